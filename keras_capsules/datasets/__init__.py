"""Data sets for capsule networks, usable offline."""

from keras_capsules.datasets import fashion_mnist
from keras_capsules.datasets import mnist
from keras_capsules.datasets import smallnorb

__all__ = ["fashion_mnist", "mnist", "smallnorb"]
