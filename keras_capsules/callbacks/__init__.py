"""Training callbacks of capsule networks."""

from keras_capsules.callbacks.spread_margin_schedule import SpreadMarginSchedule

__all__ = ["SpreadMarginSchedule"]
