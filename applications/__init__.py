"""Prebuilt capsule networks, ready to train with `model.fit`."""

from applications.capsnet_mnist import CapsNetMNIST
from applications.matrix_capsnet_norb import MatrixCapsNetNORB

__all__ = ["CapsNetMNIST", "MatrixCapsNetNORB"]
