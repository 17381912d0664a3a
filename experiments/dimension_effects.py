"""How much each capsule dimension changes the reconstruction, as in the paper's Figure 4.

For each of the first `--images` test digits, the winning class capsule is
decoded with one dimension moved to -0.25 and to +0.25 of its value
(`keras_capsules.visualization.perturbations`); the change of that dimension
is the mean absolute pixel difference between the two reconstructions, in
[0, 255] grey levels, averaged over the digits. Prints one JSON object: the
change per dimension, their mean, and the pixels a change moves by more than
a quarter of the range (`moved_pixels`, per dimension).

    python experiments/dimension_effects.py --preset capsnet_mnist
    python experiments/dimension_effects.py --model runs/docs-figures/model.keras

Smoke test: `python experiments/dimension_effects.py --images 1` (the preset).
"""

import argparse
import json

import numpy as np
from _training import log


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", default=None, help="a preset (capsnet_mnist by default)")
    source.add_argument("--model", default=None, help="a .keras file")
    parser.add_argument("--images", type=int, default=8, help="the first N test digits")
    parser.add_argument("--step", type=float, default=0.25, help="the tweak, +- (0.25)")
    return parser.parse_args(argv)


def dimension_effects(model, images, step=0.25):
    """Per dimension: mean |decode(+step) - decode(-step)| in grey levels, and pixels moved."""
    from keras_capsules.visualization import perturbations

    changes, moved = [], []
    for image in images:
        decoded, _ = perturbations(model, image, steps=np.array([-step, step]))
        difference = np.abs(decoded[:, 1] - decoded[:, 0]) * 255.0  # (dims,) + image shape
        changes.append(difference.reshape(len(difference), -1).mean(axis=1))
        moved.append((difference.reshape(len(difference), -1) > 255.0 / 4).sum(axis=1))
    return np.mean(changes, axis=0), np.mean(moved, axis=0)


def main(argv=None):
    args = parse_args(argv)
    import applications
    from keras_capsules.cli._model import load_model
    from keras_capsules.datasets import mnist

    if args.model:
        model, source = load_model(args.model), args.model
    else:
        source = args.preset or "capsnet_mnist"
        model = applications.PresetMixin.from_preset(source)
    _, (x_test, _) = mnist.load_data()
    log(f"decoding {args.images} test digits x {model.get_config()['capsule_dim']} dimensions")
    changes, moved = dimension_effects(model, x_test[: args.images], args.step)
    result = {
        "experiment": "dimension_effects",
        "model": source,
        "images": args.images,
        "step": args.step,
        "mean_abs_change_per_dim": [round(float(v), 2) for v in changes],
        "mean_abs_change": round(float(changes.mean()), 2),
        "moved_pixels_per_dim": [round(float(v), 1) for v in moved],
    }
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
