"""The four routings on the same votes: time of a training step and peak memory.

Each routing function routes votes `(batch, children, parents, 16)` (a 4x4
pose or a 16D vector per vote) inside a compiled `fit` step whose only
weight scales the votes, so the step is the routing's forward and backward
pass and nothing else. Prints one JSON object: per routing, milliseconds per
step (median of `--repeats`) and the peak RSS of its own process.

    python benchmarks/routing.py --batch 32 --children 1152 --parents 10

Smoke test:

    python benchmarks/routing.py --batch 2 --children 32 --steps 2 --warmup 1
"""

import argparse
import json
import resource
import statistics
import time

import _child  # noqa: F401  (sys.path, backend and allocator, before Keras)

ROUTINGS = ("dynamic", "em", "self_attention", "inverted_dot_product")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--children", type=int, default=1152)
    parser.add_argument("--parents", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=ROUTINGS, default=None)
    return parser.parse_args(argv)


def _routed(name, votes, iterations):
    import numpy as np
    from keras import ops

    from keras_capsules import routing

    if name == "dynamic":
        return routing.dynamic_routing(votes, iterations=iterations["dynamic"])
    if name == "em":
        parents = votes.shape[1]
        activations = ops.ones((ops.shape(votes)[0], ops.shape(votes)[2]))
        zeros = np.zeros(parents, "float32")
        poses, _ = routing.em_routing(votes, activations, zeros, zeros, iterations=iterations["em"])
        return poses
    if name == "self_attention":
        return routing.self_attention_routing(votes)
    return routing.inverted_dot_product_routing(
        votes, iterations=iterations["inverted_dot_product"]
    )


def measure(name, args):
    import keras
    import numpy as np

    iterations = {"dynamic": 3, "em": 3, "inverted_dot_product": 2}

    class Route(keras.layers.Layer):
        def build(self, input_shape):
            self.scale = self.add_weight(shape=(), initializer="ones", name="scale")

        def call(self, votes):
            return _routed(name, votes * self.scale, iterations)

    shape = (args.parents, args.children, 16)  # routing's layout
    inputs = keras.Input(shape)
    model = keras.Model(inputs, Route()(inputs))
    model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch * args.steps,) + shape).astype("float32")
    y = np.zeros((args.batch * args.steps, args.parents, 16), "float32")
    model.fit(
        x[: args.batch * args.warmup],
        y[: args.batch * args.warmup],
        batch_size=args.batch,
        verbose=0,
    )
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        model.fit(x, y, batch_size=args.batch, verbose=0)
        times.append((time.perf_counter() - start) / args.steps * 1000)
    return {
        "ms_per_step": round(statistics.median(times), 2),
        "iterations": iterations.get(name, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv=None):
    args = parse_args(argv)
    if args.only:
        print(json.dumps(measure(args.only, args)))
        return
    import keras
    from _child import run_child

    results = {name: run_child(__file__, args, name) for name in ROUTINGS}
    print(
        json.dumps(
            {
                "benchmark": "routing",
                "backend": keras.backend.backend(),
                "batch": args.batch,
                "children": args.children,
                "parents": args.parents,
                "dim": 16,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
