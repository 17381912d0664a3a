"""What decides CapsNetMNIST's test accuracy after its first epoch?

Trains the paper's CapsNetMNIST for one epoch (600 batches of 100, shifts of
up to 2 px) once per `--seeds` value and `--variants` entry, each run in its
own process, and evaluates it on the 10,000 test images. A run draws the same
weights, order and shifts as `keras-capsules train capsnet-mnist --seed S`
(the `paper` variant reproduces that command's accuracy), and a variant
changes one thing after the model is built, so a seed's runs differ only in
that thing. Prints one JSON object: every run, each variant's mean, and its
mean difference to `paper` over the same seeds. Progress goes to stderr.

Variants:
    paper                  the defaults (Adam 1e-3, epsilon 1e-7, decay 0.96 per 2,000 steps)
    adam-epsilon-1e-8      Adam's epsilon of TensorFlow 1, which the paper used
    decoder-official-init  the decoder drawn as the official code draws it
                           (truncated normal, std 0.1; biases 0.1)
    primary-he-init        PrimaryCapsule's kernel scaled by sqrt(2): He instead
                           of LeCun normal, from the same draw
    primary-init-0.5       PrimaryCapsule's kernel halved, from the same draw
    primary-lr-2           the same halved kernel, its convolution doubled in
                           the forward pass: the paper's initial model, but Adam
                           moves PrimaryCapsule's kernel twice as fast
    primary-official       PrimaryCapsule as the official code computes it:
                           squash(conv(x) / 32 + b), kernel truncated normal
                           std 0.1, biases 0.1 (its one-iteration "routing"
                           from Conv1 divides by the 32 capsule types)
    official-init          primary-official, plus Conv1 (truncated normal std
                           0.05, biases 0.1), W (truncated normal std 0.1) and
                           the decoder drawn as the official code draws them
    conv1-bias-0.1         Conv1's biases start at 0.1 (the official code's)
    ema-0.98, ema-0.99     the paper's training, evaluated with an exponential
                           moving average of the weights (momentum 0.98 or 0.99;
                           Keras's optimizer EMA)

Measured on the 2-core AVX-512 CPU (TensorFlow 2.21, float32), seeds 0-3
(seeds 0-1 for primary-lr-2, primary-official, official-init and
conv1-bias-0.1), about 5 minutes per run: see
`benchmarks/README.md`, "first_epoch.py". Command:

    python benchmarks/first_epoch.py --seeds 0,1,2,3 --variants paper,decoder-official-init

Smoke test:

    python benchmarks/first_epoch.py --steps 2 --variants paper,ema-0.99
"""

import argparse
import json
import os
import time

from _child import run_grid  # also puts the repository root on sys.path

VARIANTS = (
    "paper",
    "adam-epsilon-1e-8",
    "decoder-official-init",
    "primary-he-init",
    "primary-official",
    "official-init",
    "primary-init-0.5",
    "primary-lr-2",
    "conv1-bias-0.1",
    "ema-0.98",
    "ema-0.99",
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0", help="comma-separated seeds (0)")
    p.add_argument("--variants", default="paper", help=f"comma-separated, of {', '.join(VARIANTS)}")
    p.add_argument("--steps", type=int, default=600, help="training batches of 100 (600)")
    p.add_argument("--only", default=None, help="VARIANT,SEED: run one in this process")
    args = p.parse_args(argv)
    try:
        seeds = [int(v) for v in args.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds takes comma-separated integers, got {args.seeds!r}")
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    if args.steps < 1:
        p.error("--steps must be positive")
    # `args` keeps the strings as given: `run_grid` passes them on to each run.
    return args, seeds, variants


def _draw(variable, stddev, seed):
    """Redraw `variable` from a truncated normal, as the official code draws its weights."""
    import keras

    variable.assign(keras.initializers.TruncatedNormal(stddev=stddev, seed=seed)(variable.shape))


def _fill(variable, value):
    import numpy as np

    variable.assign(np.full(variable.shape, value, "float32"))


def _official_decoder(decoder, seed):
    """The decoder drawn as the official code draws it: kernels std 0.1, biases 0.1."""
    for variable in decoder.trainable_variables:
        if variable.path.endswith("kernel"):
            _draw(variable, 0.1, 1000 + seed)
        else:
            _fill(variable, 0.1)


def _official_primary(layer, seed):
    """PrimaryCapsule as the official code computes it: squash(conv(x) / 32 + b).

    Its primary capsules come out of a one-iteration routing whose softmax over
    the 32 capsule types is uniform, so the convolution is divided by 32 before
    the bias; kernel truncated normal, std 0.1; biases 0.1.
    """
    _draw(layer.conv.kernel, 0.1, 4000 + seed)
    _fill(layer.conv.bias, 0.1)
    _scale_primary(layer, 1.0 / layer.num_capsules)


def _scale_primary(layer, scale):
    """PrimaryCapsule computing squash(scale * conv(x) + b) from here on.

    Adam's steps do not depend on the gradient's scale, so `scale` multiplies
    how fast the kernel's effect moves (the bias's is unchanged).
    """
    from keras import ops

    conv = layer.conv

    def call(inputs):
        features = ops.conv(inputs, conv.kernel, strides=conv.strides, padding=conv.padding)
        return features * scale + conv.bias

    conv.call = call


def run_one(variant, seed, steps):
    import keras
    import numpy as np

    import applications
    from keras_capsules.datasets import mnist

    # The order of these calls is the CLI's, so the same seed draws the same run.
    keras.utils.set_random_seed(seed)
    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    train = mnist.training_pipeline(x_train, y_train, batch_size=100, seed=seed).take(steps)
    model = applications.CapsNetMNIST()
    # The optimizer variants are the default optimizer with one setting changed;
    # Keras's EMA averages the weights after every step and, at the end of
    # `fit`, writes the average into the model.
    changed = {}
    if variant == "adam-epsilon-1e-8":
        changed = {"epsilon": 1e-8}
    elif variant.startswith("ema-"):
        changed = {"use_ema": True, "ema_momentum": float(variant[len("ema-") :])}
    elif variant == "decoder-official-init":
        _official_decoder(model.decoder, seed)
    elif variant == "primary-he-init":
        kernel = model.get_layer("primary_caps").trainable_variables[0]
        kernel.assign(kernel.numpy() * np.sqrt(2.0))
    if variant in ("primary-init-0.5", "primary-lr-2"):
        kernel = model.get_layer("primary_caps").trainable_variables[0]
        kernel.assign(kernel.numpy() * 0.5)
    if variant == "conv1-bias-0.1":
        _fill(model.get_layer("conv1").bias, 0.1)
    if variant == "primary-lr-2":
        _scale_primary(model.get_layer("primary_caps"), 2.0)
    if variant in ("primary-official", "official-init"):
        _official_primary(model.get_layer("primary_caps"), seed)
    if variant == "official-init":
        conv1 = model.get_layer("conv1")
        _draw(conv1.kernel, 0.05, 2000 + seed)
        _fill(conv1.bias, 0.1)
        _draw(model.get_layer("digit_caps").trainable_variables[0], 0.1, 3000 + seed)
        _official_decoder(model.decoder, seed)
    if changed:
        optimizer = model.optimizer
        optimizer = type(optimizer).from_config({**optimizer.get_config(), **changed})
        model.compile(optimizer=optimizer, metrics=["accuracy"])
    start = time.perf_counter()
    model.fit(train, epochs=1, verbose=0)
    seconds = time.perf_counter() - start
    x_test = x_test[..., None]
    results = model.evaluate(x_test, y_test, batch_size=100, verbose=0, return_dict=True)
    return {
        "variant": variant,
        "seed": seed,
        "test_accuracy": round(float(results["accuracy"]), 4),
        "train_seconds": round(seconds, 1),
    }


def main(argv=None):
    args, seeds, variants = parse_args(argv)
    if args.only is not None:
        variant, seed = args.only.split(",")
        print(json.dumps(run_one(variant, int(seed), args.steps)), flush=True)
        return
    runs = run_grid(os.path.abspath(__file__), args, variants, seeds)

    accuracy = {(r["variant"], r["seed"]): r["test_accuracy"] for r in runs}

    summary = {}
    for variant in variants:
        accuracies = [accuracy[variant, seed] for seed in seeds]
        summary[variant] = {"mean_test_accuracy": round(sum(accuracies) / len(accuracies), 5)}
        if "paper" in variants:
            differences = [a - accuracy["paper", s] for a, s in zip(accuracies, seeds)]
            summary[variant]["mean_difference_to_paper_points"] = round(
                100 * sum(differences) / len(differences), 3
            )
    result = {"steps": args.steps, "batch": 100, "seeds": seeds, "variants": summary}
    print(json.dumps({**result, "runs": runs}))


if __name__ == "__main__":
    main()
