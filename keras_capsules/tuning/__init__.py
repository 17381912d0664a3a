"""Hyperparameter search for capsule networks with keras-tuner.

`CapsuleHyperModel` is the base of the capsule networks' `keras_tuner.HyperModel`s
(the two papers' are `applications.CapsNetHyperModel` and
`applications.MatrixCapsNetHyperModel`); use them with any keras-tuner tuner,
or with `create_tuner`, whose tuners also survive lost workers and an
interrupted chief in keras-tuner's distributed mode. `best_trials_table`
formats the best trials; `process_role` says whether this process is the
chief or a worker of a distributed search. See the tuning guide (docs/tuning.md).
"""

from keras_capsules._optional import require

require("keras_tuner", "keras_capsules.tuning")  # a clear error when keras-tuner is missing

from keras_capsules.tuning.capsule_hyper_model import CapsuleHyperModel  # noqa: E402
from keras_capsules.tuning.tuners import TUNERS  # noqa: E402
from keras_capsules.tuning.tuners import best_trials_table  # noqa: E402
from keras_capsules.tuning.tuners import create_tuner  # noqa: E402
from keras_capsules.tuning.tuners import process_role  # noqa: E402

__all__ = [
    "CapsuleHyperModel",
    "TUNERS",
    "best_trials_table",
    "create_tuner",
    "process_role",
]
