"""Routing by agreement, as pure functions on `keras.ops`.

Every routing function follows one contract:

- it takes the votes laid out `(batch, num_outputs, num_inputs, dim)`: every
  parent's votes from every child, the children next to the pose entries, so
  that the sums over children are batched matrix products over contiguous
  memory;
- it returns the parents, `(batch, num_outputs, dim)` (EM routing also their
  activations, `(batch, num_outputs)`);
- with `return_coupling=True` it also returns the coupling of the last
  iteration, laid out like the votes without their last axis,
  `(batch, num_outputs, num_inputs)`;
- it computes in float32 for float16 and bfloat16 votes and returns their
  dtype.

`dynamic_routing` routes vector capsules (Sabour et al. 2017), `em_routing`
matrix capsules (Hinton et al. 2018; `EMSettings` holds its settings as one
value), `self_attention_routing` the capsules of Efficient-CapsNet (Mazzia
et al. 2021) and `inverted_dot_product_routing` those of Tsai et al. 2020.
A routing layer computes the votes (a learned transformation of its inputs)
and calls one of them: `keras_capsules.layers.FullyConnectedCapsule` is the
base of such layers.
"""

from keras_capsules.routing._dynamic import dynamic_routing
from keras_capsules.routing._em import em_routing
from keras_capsules.routing._em_settings import INVERSE_TEMPERATURE
from keras_capsules.routing._em_settings import SCHEDULES
from keras_capsules.routing._em_settings import TEMPERING
from keras_capsules.routing._em_settings import VARIANCE_EPSILON
from keras_capsules.routing._em_settings import EMSettings
from keras_capsules.routing._em_settings import inverse_temperatures
from keras_capsules.routing._inverted_dot_product import LAYER_NORM_EPSILON
from keras_capsules.routing._inverted_dot_product import inverted_dot_product_routing
from keras_capsules.routing._self_attention import self_attention_routing

__all__ = [
    "dynamic_routing",
    "em_routing",
    "EMSettings",
    "inverse_temperatures",
    "inverted_dot_product_routing",
    "self_attention_routing",
    "INVERSE_TEMPERATURE",
    "LAYER_NORM_EPSILON",
    "SCHEDULES",
    "TEMPERING",
    "VARIANCE_EPSILON",
]
