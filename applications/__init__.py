"""Prebuilt capsule networks, ready to train with `model.fit`."""

from applications.capsnet_mnist import CapsNetMNIST

__all__ = ["CapsNetMNIST"]
