"""Efficient-CapsNet (Mazzia et al. 2021): backbone, classifier, MultiMNIST network."""

from applications.efficient_capsnet.efficient_capsnet import EfficientCapsNet
from applications.efficient_capsnet.efficient_capsnet_backbone import EfficientCapsNetBackbone
from applications.efficient_capsnet.efficient_capsnet_multimnist import EfficientCapsNetMultiMNIST

__all__ = ["EfficientCapsNet", "EfficientCapsNetBackbone", "EfficientCapsNetMultiMNIST"]
