"""How fast does an EM model learn real MNIST, and with which E-step?

Trains `applications.MatrixCapsNet` on the 60,000 MNIST training images
(batches of 32, shuffled with `--seed`, no augmentation) for `--steps` steps
with the model's default compile (Adam with its decaying learning rate) and
the spread margin rising from 0.2 to 0.9 over the run, and evaluates it on the
first `--test-size` test images after each step count in `--eval-at`. Prints
one JSON object: the settings, the accuracy at each evaluation, the first
step whose loss was not finite (`null` if none), steps per second and peak RSS.
Progress goes to stderr.

Models: `reduced` (A=32, B=8, C=D=8) and `small` (A=64, B=8, C=D=16, the
paper's 68K model). `--tempering` is one number or one per E-step, comma
separated (`0.1,0.5`).

The issue's measurements (about 1 minute per reduced run, 12 per 1,000 small
steps on the 2-core AVX2 CPU):

    python experiments/em_iterations.py --model reduced --steps 300 --learning-rate 1e-2 \\
        --test-size 1000 --iterations 3 --tempering 0.1
    python experiments/em_iterations.py --model small --steps 1000 --iterations 3

Smoke test:

    python experiments/em_iterations.py --model reduced --steps 2 --test-size 64
"""

import argparse
import dataclasses
import json
import math
import resource
import time

from _training import budget_callback
from _training import log
from _training import one_step_per_call

MODELS = {"reduced": dict(A=32, B=8, C=8, D=8), "small": dict(A=64, B=8, C=16, D=16)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=tuple(MODELS), default="small")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--eval-at", default=None, help="comma-separated step counts (--steps)")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--tempering", default=None, help="E-step exponent(s) (library default)")
    p.add_argument("--normalization", default="types_and_positions")
    p.add_argument("--schedule", default="rescaled", help="inverse temperature schedule")
    p.add_argument("--inverse-temperature", type=float, default=None)
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--test-size", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import keras

    import applications
    from keras_capsules import routing
    from keras_capsules.callbacks import SpreadMarginSchedule
    from keras_capsules.datasets import mnist

    eval_at = sorted({int(s) for s in (args.eval_at or str(args.steps)).split(",")})
    if args.tempering is None:
        tempering = routing.TEMPERING
    else:
        values = [float(v) for v in args.tempering.split(",")]
        tempering = values[0] if len(values) == 1 else values
    keras.utils.set_random_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    x_test, y_test = x_test[: args.test_size, ..., None], y_test[: args.test_size]
    model = applications.MatrixCapsNet(
        **MODELS[args.model],
        iterations=args.iterations,
        input_shape=(28, 28, 1),
        num_classes=10,
        tempering=tempering,
        normalization=args.normalization,
        inverse_temperature_schedule=args.schedule,
        inverse_temperature=args.inverse_temperature or routing.INVERSE_TEMPERATURE,
        compile=False,
    )
    recipe = dataclasses.replace(model.RECIPE, learning_rate=args.learning_rate)
    model.compile(optimizer=recipe.optimizer())
    one_step_per_call(model)  # evaluates at exact steps
    results = {"accuracy": {}, "first_non_finite_step": None}
    budget = budget_callback(math.inf, max_steps=eval_at[-1])

    class Evaluate(keras.callbacks.Callback):
        """Notes the first non-finite loss, and evaluates at the `eval_at` steps, untimed."""

        def on_train_batch_end(self, batch, logs=None):
            step = budget.steps + 1  # `budget` counts this step after us
            if not math.isfinite(float(logs["loss"])) and results["first_non_finite_step"] is None:
                results["first_non_finite_step"] = step
            if step in eval_at:
                started = time.perf_counter()
                scores = self.model.evaluate(x_test, y_test, verbose=0, return_dict=True)
                results["accuracy"][step] = round(100 * float(scores["accuracy"]), 2)
                log(f"step {step}: test accuracy {results['accuracy'][step]}%")
                budget.start += time.perf_counter() - started

    epochs = math.ceil(eval_at[-1] * args.batch_size / len(x_train))
    model.fit(
        x_train[..., None],
        y_train,
        batch_size=args.batch_size,
        epochs=epochs,
        verbose=0,
        callbacks=[SpreadMarginSchedule(0.2, 0.9, steps=eval_at[-1]), Evaluate(), budget],
    )
    settings = {k: v for k, v in vars(args).items() if k != "eval_at"}
    settings["tempering"] = tempering
    print(
        json.dumps(
            {
                **settings,
                **results,
                "steps_per_s": round(budget.steps / budget.seconds, 2),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "backend": keras.backend.backend(),
            }
        )
    )


if __name__ == "__main__":
    main()
