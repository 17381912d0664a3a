"""Helpers for code built on keras-capsules: argument checks, files, devices, Keras's layers.

The prebuilt models of `applications`, and models of your own that should
behave like them, check their arguments, write their files and read their
optional dependencies with these functions:

- argument checks that raise a `ValueError` naming the argument and the
  value received: `check_positive_int`, `check_positive_ints`,
  `check_positive`, `check_margin`, `check_choice`, `check_image_shape`,
  `check_model_arguments` (with `is_int` and `is_number`, the type tests they
  use: a bool is neither);
- `write_json`, which replaces a file atomically (a reader never sees half a
  file, and a failed write leaves the old one);
- `require`, which imports an optional dependency or raises an `ImportError`
  naming the extra that installs it;
- `installed_folder`, `install_hint` and `download`, which find a data
  distribution's files in place or fetch them once into Keras's cache,
  checked against a SHA-256 (`PRESETS_DISTRIBUTION` names the presets');
- `has_accelerator`, whether the backend computes on a GPU or TPU, and
  `native_bfloat16`, whether the CPU computes bfloat16 natively (one of
  `BFLOAT16_CPU_FLAGS`);
- `flatten_layers`, every layer inside a layer or model, nested models'
  layers included.

>>> from keras_capsules import utils
>>> utils.check_positive_ints(filters=8, kernel_size=3)
>>> utils.check_margin("margin", 0.2)
0.2
>>> utils.check_positive_int("filters", 0)
Traceback (most recent call last):
...
ValueError: `filters` must be a positive integer. Received: filters=0
"""

from keras_capsules._atomic import write_json
from keras_capsules._compat.keras import flatten_layers
from keras_capsules._devices import BFLOAT16_CPU_FLAGS
from keras_capsules._devices import has_accelerator
from keras_capsules._devices import native_bfloat16
from keras_capsules._download import PRESETS_DISTRIBUTION
from keras_capsules._download import download
from keras_capsules._download import install_hint
from keras_capsules._download import installed_folder
from keras_capsules._optional import require
from keras_capsules._validation import MODEL_ARGUMENTS
from keras_capsules._validation import check_choice
from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_margin
from keras_capsules._validation import check_model_arguments
from keras_capsules._validation import check_positive
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_positive_ints
from keras_capsules._validation import is_int
from keras_capsules._validation import is_number

__all__ = [
    "BFLOAT16_CPU_FLAGS",
    "MODEL_ARGUMENTS",
    "PRESETS_DISTRIBUTION",
    "check_choice",
    "check_image_shape",
    "check_margin",
    "check_model_arguments",
    "check_positive",
    "check_positive_int",
    "check_positive_ints",
    "download",
    "flatten_layers",
    "has_accelerator",
    "install_hint",
    "installed_folder",
    "is_int",
    "is_number",
    "native_bfloat16",
    "require",
    "write_json",
]
