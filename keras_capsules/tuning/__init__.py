"""Hyperparameter search for capsule networks with keras-tuner.

`CapsNetHyperModel` and `MatrixCapsNetHyperModel` are `keras_tuner.HyperModel`
subclasses for the two papers' networks; use them with any keras-tuner tuner,
or with `create_tuner`, whose tuners also survive lost workers and an
interrupted chief in keras-tuner's distributed mode. `best_trials_table`
formats the best trials; `process_role` says whether this process is the
chief or a worker of a distributed search. See the tuning guide (docs/tuning.md).
"""

from keras_capsules._optional import require

require("keras_tuner", "keras_capsules.tuning")  # a clear error when keras-tuner is missing

from keras_capsules.tuning.capsnet_hyper_model import CapsNetHyperModel  # noqa: E402
from keras_capsules.tuning.matrix_capsnet_hyper_model import MatrixCapsNetHyperModel  # noqa: E402
from keras_capsules.tuning.tuners import TUNERS  # noqa: E402
from keras_capsules.tuning.tuners import best_trials_table  # noqa: E402
from keras_capsules.tuning.tuners import create_tuner  # noqa: E402
from keras_capsules.tuning.tuners import process_role  # noqa: E402

__all__ = [
    "CapsNetHyperModel",
    "MatrixCapsNetHyperModel",
    "TUNERS",
    "best_trials_table",
    "create_tuner",
    "process_role",
]
