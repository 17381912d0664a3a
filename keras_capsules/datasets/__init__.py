"""Data sets for capsule networks, usable offline."""

from keras_capsules.datasets import mnist
from keras_capsules.datasets import smallnorb

__all__ = ["mnist", "smallnorb"]
