"""How many training steps one call of `fit`'s compiled step ran."""


def steps_run(callback, begin, end):
    """The training steps of the call that ran batches `begin` to `end` of an epoch.

    With `compile(steps_per_execution=N)` Keras calls a callback's batch hooks
    once per N steps, `on_train_batch_begin(begin)` and
    `on_train_batch_end(end)` with the first and last batch of the call; the
    last call of an epoch may run fewer, and its `end` then passes the epoch's
    last batch (`params["steps"] - 1`), where `fit` knows it.
    """
    steps = (callback.params or {}).get("steps")
    if steps:
        end = min(end, steps - 1)
    return end - begin + 1
