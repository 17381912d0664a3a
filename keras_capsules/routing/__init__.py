"""Routing by agreement, as pure functions on `keras.ops`.

`dynamic_routing` routes vector capsules (Sabour et al. 2017) and
`em_routing` matrix capsules (Hinton et al. 2018). Both take every child's
vote for every parent and return the parents; a new routing layer computes
the votes (a learned transformation of its inputs) and calls one of them.
"""

from keras_capsules.routing._dynamic import dynamic_routing
from keras_capsules.routing._em import em_routing
from keras_capsules.routing._em_defaults import INVERSE_TEMPERATURE
from keras_capsules.routing._em_defaults import TEMPERING
from keras_capsules.routing._em_defaults import VARIANCE_EPSILON
from keras_capsules.routing._em_defaults import inverse_temperatures

__all__ = [
    "dynamic_routing",
    "em_routing",
    "inverse_temperatures",
    "INVERSE_TEMPERATURE",
    "TEMPERING",
    "VARIANCE_EPSILON",
]
