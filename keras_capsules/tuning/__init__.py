"""Hyperparameter search for capsule networks with keras-tuner.

`CapsNetHyperModel` and `MatrixCapsNetHyperModel` are `keras_tuner.HyperModel`
subclasses for the two papers' networks; use them with any keras-tuner tuner,
or with `create_tuner`, whose tuners also survive lost workers and an
interrupted chief in keras-tuner's distributed mode. `best_trials_table`
formats the best trials. See the tuning guide (docs/tuning.md).
"""

from keras_capsules.tuning.capsnet_hyper_model import CapsNetHyperModel
from keras_capsules.tuning.matrix_capsnet_hyper_model import MatrixCapsNetHyperModel
from keras_capsules.tuning.tuners import TUNERS
from keras_capsules.tuning.tuners import best_trials_table
from keras_capsules.tuning.tuners import create_tuner

__all__ = [
    "CapsNetHyperModel",
    "MatrixCapsNetHyperModel",
    "TUNERS",
    "best_trials_table",
    "create_tuner",
]
