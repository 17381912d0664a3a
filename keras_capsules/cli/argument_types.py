"""The `type=` functions of the command's arguments: each checks one value as argparse reads it.

A value they refuse ends the command with argparse's usage error, naming the
argument: `keras-capsules train: error: argument --epochs: must be a positive
integer, got '0'`.
"""

import argparse
import os


def _number(text, kind, accept, requirement):
    """`text` read as a `kind` that `accept`s, or argparse's error naming the `requirement`."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not accept(value):
        raise argparse.ArgumentTypeError(f"must be {requirement}, got {text!r}")
    return value


def positive_int(text):
    """An integer of at least 1.

    >>> positive_int("3")
    3
    >>> positive_int("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a positive integer, got '0'
    """
    return _number(text, int, lambda value: value >= 1, "a positive integer")


def non_negative_int(text):
    """An integer of at least 0.

    >>> non_negative_int("0")
    0
    """
    return _number(text, int, lambda value: value >= 0, "a non-negative integer")


def positive_float(text):
    """A finite number above 0.

    >>> positive_float("2.5")
    2.5
    """
    return _number(text, float, lambda value: 0 < value < float("inf"), "a positive number")


def held_out_fraction(text):
    """`--validation-split`: a fraction in (0, 0.5].

    >>> held_out_fraction("0.1")
    0.1
    """
    return _number(text, float, lambda value: 0 < value <= 0.5, "in (0, 0.5]")


def tempering(text):
    """EM routing's E-step exponent: one positive number, or several separated by commas.

    >>> tempering("0.1,0.5"), tempering("1")
    ([0.1, 0.5], 1.0)
    """
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(0 < v < float("inf") for v in values):
        raise argparse.ArgumentTypeError(
            f"must be a positive number or positive numbers separated by commas: {text!r}"
        )
    return values[0] if len(values) == 1 else values


def backbone_weights(text):
    """A backbone's weights: `imagenet`, `none` (random: `None`) or an existing file."""
    if text in ("imagenet", "none"):
        return None if text == "none" else text
    path = os.path.expanduser(text)
    if not os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"{text} is not imagenet, none or a weights file")
    return path


def data_dir(text):
    """`--data-dir`: an existing folder that holds files, `~` expanded."""
    path = os.path.expanduser(text)
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    if not any(entry.is_file() for entry in os.scandir(path)):
        raise argparse.ArgumentTypeError(f"the folder {text} holds no files")
    return path


def image_folder_argument(text):
    """`--images`: an existing folder, `~` expanded (its contents are checked before training)."""
    path = os.path.expanduser(text)
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(
            f"no folder {text}: it should hold one subfolder of images per class"
        )
    return path


def unit_fraction(text):
    """A number strictly between 0 and 1.

    >>> unit_fraction("0.2")
    0.2
    >>> unit_fraction("1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a number between 0 and 1, got '1'
    """
    return _number(text, float, lambda value: 0 < value < 1, "a number between 0 and 1")
