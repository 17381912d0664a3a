"""Losses of capsule networks."""

from keras_capsules.losses.margin_loss import MarginLoss
from keras_capsules.losses.reconstruction_loss import ReconstructionLoss
from keras_capsules.losses.spread_loss import SpreadLoss

__all__ = ["MarginLoss", "ReconstructionLoss", "SpreadLoss"]
