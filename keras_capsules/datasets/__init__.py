"""Data sets for capsule networks, usable offline."""

from keras_capsules.datasets import mnist

__all__ = ["mnist"]
