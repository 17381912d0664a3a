"""Prebuilt capsule networks, ready to train with `model.fit`, and trained presets of them.

`CapsNetHyperModel` and `MatrixCapsNetHyperModel`, the papers' networks for
keras-tuner, are imported on first use: they need the `tune` extra.
"""

from applications._preset import PresetMixin
from applications._preset import list_presets
from applications._preset import preset_metadata
from applications.backbone import Backbone
from applications.backbone_capsnet import BackboneCapsNet
from applications.backbone_capsnet import BackboneCNN
from applications.backbone_capsnet import standard_backbone
from applications.baseline_cnn import BaselineCNN
from applications.capsnet import CapsNet
from applications.capsnet import CapsNetBackbone
from applications.capsnet import CapsNetMNIST
from applications.capsnet import CapsNetMultiMNIST
from applications.efficient_capsnet import EfficientCapsNet
from applications.efficient_capsnet import EfficientCapsNetBackbone
from applications.efficient_capsnet import EfficientCapsNetMultiMNIST
from applications.matrix_capsnet import MatrixCapsNet
from applications.matrix_capsnet import MatrixCapsNetBackbone
from applications.matrix_capsnet import MatrixCapsNetNORB
from applications.multimnist_accuracy import MultiMNISTAccuracy
from applications.recipe import Recipe

__all__ = [
    "Backbone",
    "BackboneCapsNet",
    "BackboneCNN",
    "BaselineCNN",
    "CapsNet",
    "CapsNetBackbone",
    "CapsNetMNIST",
    "CapsNetMultiMNIST",
    "EfficientCapsNet",
    "EfficientCapsNetBackbone",
    "EfficientCapsNetMultiMNIST",
    "MatrixCapsNet",
    "MatrixCapsNetBackbone",
    "MatrixCapsNetNORB",
    "MultiMNISTAccuracy",
    "PresetMixin",
    "Recipe",
    "list_presets",
    "preset_metadata",
    "standard_backbone",
    "CapsNetHyperModel",
    "MatrixCapsNetHyperModel",
]

_HYPERMODELS = {
    "CapsNetHyperModel": "applications.capsnet.capsnet_hyper_model",
    "MatrixCapsNetHyperModel": "applications.matrix_capsnet.matrix_capsnet_hyper_model",
}


def __getattr__(name):
    """Import a hypermodel on first use (PEP 562): they need keras-tuner."""
    if name in _HYPERMODELS:
        import importlib

        return getattr(importlib.import_module(_HYPERMODELS[name]), name)
    raise AttributeError(f"module 'applications' has no attribute {name!r}")
