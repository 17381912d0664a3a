"""Shared pieces of the tuning tests: tiny fixed sizes and a `fit` recorder."""

import keras_tuner as kt

# Fixed sizes that make a CapsNet trial take a few seconds on 2 CPU cores.
TINY_CAPSNET = {
    "conv_filters": 8,
    "primary_capsule_types": 2,
    "primary_capsule_dim": 4,
    "capsule_dim": 4,
}
TINY_MATRIX = {"A": 4, "B": 2, "C": 2, "D": 2, "iterations": 1}


def fixed(**values):
    """A `HyperParameters` fixing `values` (the first registration of a name wins)."""
    hp = kt.HyperParameters()
    for name, value in values.items():
        hp.Fixed(name, value)
    return hp


class FitRecorder:
    """Stands for a model: records what `fit` receives."""

    def fit(self, x, y=None, **kwargs):
        self.x, self.y, self.kwargs = x, y, kwargs
        return "history"
