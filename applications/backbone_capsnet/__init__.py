"""Capsule heads on any backbone, and the dense head they are measured against."""

from applications.backbone_capsnet.backbone_capsnet import BackboneCapsNet
from applications.backbone_capsnet.backbone_cnn import BackboneCNN
from applications.backbone_capsnet.standard_backbone import STANDARD_BACKBONES
from applications.backbone_capsnet.standard_backbone import standard_backbone

__all__ = ["STANDARD_BACKBONES", "BackboneCapsNet", "BackboneCNN", "standard_backbone"]
