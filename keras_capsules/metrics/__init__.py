"""Training state of capsule networks that Keras logs as metrics."""

from keras_capsules.metrics.spread_margin import SpreadMargin

__all__ = ["SpreadMargin"]
