"""Capsule heads on any backbone, and the dense head they are measured against."""

from applications.backbone_capsnet.backbone_capsnet import BackboneCapsNet
from applications.backbone_capsnet.backbone_cnn import BackboneCNN

__all__ = ["BackboneCapsNet", "BackboneCNN"]
