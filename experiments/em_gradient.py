"""Why the paper's E-step stalls learning at 3 iterations: the gradient at Conv1.

Builds the 64/8/16/16 `MatrixCapsNet` for MNIST (seed `--seed`), and for
each setting (iterations, E-step exponent `tempering`) computes, at
initialisation, the gradient of the spread loss (margin 0.2) with respect to
Conv1's kernel on `--pairs` pairs of disjoint batches of 32 real training
images. Prints one JSON object with, per setting, the gradient's RMS and the
mean cosine between the two gradients of a pair (how much two batches agree
on the direction to move), and the same with the responsibilities `R` behind
`stop_gradient`. TensorFlow backend.

    python experiments/em_gradient.py
"""

import argparse
import json

import _training  # noqa: F401  (repository root on sys.path, TensorFlow backend by default)

SETTINGS = ((2, 1.0), (3, 1.0), (2, 0.1), (3, 0.1))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def conv1_gradients(iterations, tempering, batches, seed, stop_responsibilities=False):
    import keras
    import tensorflow as tf

    import applications
    from keras_capsules.losses import SpreadLoss

    keras.utils.set_random_seed(seed)
    model = applications.MatrixCapsNet(
        A=64,
        B=8,
        C=16,
        D=16,
        iterations=iterations,
        input_shape=(28, 28, 1),
        num_classes=10,
        tempering=tempering,
        compile=False,
    )
    from keras_capsules import _positions as routing  # the layers look these up here

    original = routing.normalize_over_positions, routing.normalize_over_outputs
    if stop_responsibilities:  # log R behind stop_gradient, in every layer
        routing.normalize_over_positions = lambda *a: tf.stop_gradient(original[0](*a))
        routing.normalize_over_outputs = lambda *a: tf.stop_gradient(original[1](*a))
    try:
        grads = []
        for x, y in batches:
            with tf.GradientTape() as tape:
                loss = SpreadLoss(margin=0.2)(y, model(x, training=True)["probabilities"])
            kernel = model.backbone.get_layer("conv1").kernel
            grads.append(tape.gradient(loss, kernel).numpy().ravel())
    finally:
        routing.normalize_over_positions, routing.normalize_over_outputs = original
    return grads


def main(argv=None):
    import numpy as np

    from keras_capsules.datasets import mnist

    args = parse_args(argv)
    (x, y), _ = mnist.load_data()
    order = np.random.default_rng(args.seed).permutation(len(x))[: 64 * args.pairs]
    batches = [
        (x[order[i : i + 32], ..., None], y[order[i : i + 32]]) for i in range(0, len(order), 32)
    ]
    results = []
    for iterations, tempering in SETTINGS:
        row = {"iterations": iterations, "tempering": tempering}
        for stop in (False, True):
            grads = conv1_gradients(iterations, tempering, batches, args.seed, stop)
            cosines = [
                float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
                for a, b in zip(grads[0::2], grads[1::2])
            ]
            key = "r_stopped_" if stop else ""
            row[key + "rms"] = float(np.sqrt(np.mean(np.square(grads))))
            row[key + "mean_cosine"] = float(np.mean(cosines))
        print(row, flush=True)
        results.append(row)
    print(json.dumps({"seed": args.seed, "pairs": args.pairs, "settings": results}))


if __name__ == "__main__":
    main()
