"""A capsule head against a dense head on the same backbone, on photo-sized images.

Writes Fashion-MNIST as a user's folder of photos: `--per-class` training and
`--test-per-class` test images of each class, upscaled to `--size` pixels
(112 by default, bilinear) and written as RGB PNG files, one subfolder per
class. Then, for each head, it builds the model on `keras.applications`'
`MobileNetV3Small` (`--backbone`) with random weights (nothing downloads),
reads the folder with `image_folder.load_folder` and trains it for
`--epochs` epochs with the heads' one recipe (`BackboneCapsNet.RECIPE`), the
same batches in the same order. From random weights, the backbone's batch
normalisation averages its statistics with momentum 0.9
(`--batch-norm-momentum`; `keras.applications` sets 0.999, for fine-tuning),
for both heads:

* "capsule": `applications.BackboneCapsNet` (dynamic routing, no decoder);
* "dense": `applications.BackboneCNN` with `head_parameters` set to the
  capsule head's, so that the two heads are of one size.

Each run appends one JSON line to `experiments/results/backbone_heads.jsonl`
(test accuracy after every epoch, parameters, training time and images/s);
a rerun leaves out the runs already there (same head, seed, backbone, data
and epochs), so an interrupted run resumes with the next one.

    python experiments/backbone_heads.py                      # 1,000 a class, 10 epochs
    python experiments/backbone_heads.py --per-class 20 --test-per-class 10 --epochs 1 \\
        --output /tmp/smoke.jsonl                             # a smoke run
"""

import argparse
import json
import os
import platform
import tempfile
import time

from _training import log
from own_images import write_folder

_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(_REPOSITORY, "experiments", "results", "backbone_heads.jsonl")
HEADS = ("capsule", "dense")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-class", type=int, default=1000)
    parser.add_argument("--test-per-class", type=int, default=200)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--backbone", default="MobileNetV3Small")
    parser.add_argument("--heads", nargs="+", default=list(HEADS), choices=HEADS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--batch-norm-momentum",
        type=float,
        default=0.9,
        help="the backbone's batch normalisation momentum, for both heads (0.9)",
    )
    parser.add_argument("--work", default=None, help="folder for the images (a temp dir)")
    parser.add_argument("--output", default=RESULTS, help="JSON lines file to append to")
    return parser.parse_args(argv)


def folders(args):
    """`(train, test)`: the two folders, written once into `--work`."""
    from keras_capsules.datasets import fashion_mnist

    work = args.work or tempfile.mkdtemp(prefix="backbone_heads_")
    train = os.path.join(work, f"train_{args.per_class}_{args.size}")
    test = os.path.join(work, f"test_{args.test_per_class}_{args.size}")
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data()
    names = fashion_mnist.CLASS_NAMES
    for folder, x, y, count in (
        (train, x_train, y_train, args.per_class),
        (test, x_test, y_test, args.test_per_class),
    ):
        if not os.path.isdir(folder):
            written = write_folder(folder + ".partial", x, y, names, count, args.size)
            os.rename(folder + ".partial", folder)
            log(f"wrote {written} images into {folder}")
    return train, test


def build(head, args, num_classes, class_names):
    import keras

    import applications
    from keras_capsules.utils import flatten_layers

    shape = (args.size, args.size, 3)
    capsules = applications.BackboneCapsNet(
        args.backbone, input_shape=shape, class_names=class_names, backbone_weights=None
    )
    model = capsules
    if head == "dense":
        model = applications.BackboneCNN(
            args.backbone,
            input_shape=shape,
            class_names=class_names,
            backbone_weights=None,
            head_parameters=capsules.head_parameters(),
        )
    # keras.applications' batch normalisation averages its statistics with momentum 0.999,
    # made for fine-tuning ImageNet weights: from random weights, a run of a few hundred
    # steps would evaluate with statistics still near their start. Both heads get 0.9.
    for layer in flatten_layers(model.backbone):
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = args.batch_norm_momentum
    return model


def run(head, seed, args, train_folder, test_folder):
    import keras

    import applications
    from keras_capsules.datasets import image_folder

    keras.utils.set_random_seed(seed)
    batch = applications.BackboneCapsNet.RECIPE.batch_size
    summary = image_folder.check_folder(train_folder, color_mode="rgb")
    test_summary = image_folder.check_folder(test_folder, color_mode="rgb")
    train, _ = image_folder.load_folder(summary, batch_size=batch, seed=seed)
    test, _ = image_folder.load_folder(test_summary, batch_size=batch, shuffle=False)
    model = build(head, args, len(summary.class_names), summary.class_names)
    accuracies, seconds = [], 0.0
    for epoch in range(args.epochs):
        start = time.perf_counter()
        model.fit(train, epochs=1, verbose=0)
        seconds += time.perf_counter() - start
        accuracy = model.evaluate(test, verbose=0, return_dict=True)["accuracy"]
        accuracies.append(round(float(accuracy), 4))
        log(f"{head}, seed {seed}, epoch {epoch + 1}: test accuracy {accuracy:.4f}")
    return {
        "head": head,
        "seed": seed,
        "backbone": args.backbone,
        "backbone_weights": None,
        "batch_norm_momentum": args.batch_norm_momentum,
        "size": args.size,
        "per_class": args.per_class,
        "test_images": test_summary.images,
        "epochs": args.epochs,
        "batch_size": batch,
        "parameters": int(model.count_params()),
        "head_parameters": int(model.head_parameters()),
        "test_accuracy": accuracies[-1],
        "test_accuracy_per_epoch": accuracies,
        "train_seconds": round(seconds, 1),
        "train_images_per_s": round(summary.images * args.epochs / seconds, 1),
        "machine": platform.processor() or platform.machine(),
        "backend": keras.backend.backend(),
    }


def _key(record):
    """What makes two runs the same run: the head, seed, backbone, data and epochs."""
    return tuple(record[k] for k in ("head", "seed", "backbone", "size", "per_class", "epochs"))


def done(path):
    """The runs already in `path`, by `_key`."""
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {_key(json.loads(line)) for line in f if line.strip()}


def main(argv=None):
    args = parse_args(argv)
    train_folder, test_folder = folders(args)
    finished = done(args.output)
    for seed in args.seeds:
        for head in args.heads:
            wanted = {"head": head, "seed": seed, "backbone": args.backbone, "size": args.size}
            wanted.update(per_class=args.per_class, epochs=args.epochs)
            if _key(wanted) in finished:
                log(f"{head}, seed {seed}: already in {args.output}")
                continue
            result = run(head, seed, args, train_folder, test_folder)
            with open(args.output, "a") as f:
                f.write(json.dumps(result) + "\n")
            log(json.dumps(result))


if __name__ == "__main__":
    main()
