"""Efficient-CapsNet (Mazzia et al. 2021): its backbone and its classifier."""

from applications.efficient_capsnet.efficient_capsnet import EfficientCapsNet
from applications.efficient_capsnet.efficient_capsnet_backbone import EfficientCapsNetBackbone

__all__ = ["EfficientCapsNet", "EfficientCapsNetBackbone"]
