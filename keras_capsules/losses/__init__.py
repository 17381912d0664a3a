"""Losses of capsule networks."""

from keras_capsules.losses.margin_loss import MarginLoss
from keras_capsules.losses.reconstruction_loss import ReconstructionLoss

__all__ = ["MarginLoss", "ReconstructionLoss"]
