"""Routing by agreement, as pure functions on `keras.ops`.

`dynamic_routing` routes vector capsules (Sabour et al. 2017), `em_routing`
matrix capsules (Hinton et al. 2018), `self_attention_routing` the capsules
of Efficient-CapsNet (Mazzia et al. 2021) and `inverted_dot_product_routing`
those of Tsai et al. 2020. Each takes every child's vote for every parent and
returns the parents; a new routing layer computes the votes (a learned
transformation of its inputs) and calls one of them.
"""

from keras_capsules.routing._dynamic import dynamic_routing
from keras_capsules.routing._em import em_routing
from keras_capsules.routing._em_defaults import INVERSE_TEMPERATURE
from keras_capsules.routing._em_defaults import TEMPERING
from keras_capsules.routing._em_defaults import VARIANCE_EPSILON
from keras_capsules.routing._em_defaults import inverse_temperatures
from keras_capsules.routing._inverted_dot_product import inverted_dot_product_routing
from keras_capsules.routing._self_attention import self_attention_routing

__all__ = [
    "dynamic_routing",
    "em_routing",
    "inverse_temperatures",
    "inverted_dot_product_routing",
    "self_attention_routing",
    "INVERSE_TEMPERATURE",
    "TEMPERING",
    "VARIANCE_EPSILON",
]
