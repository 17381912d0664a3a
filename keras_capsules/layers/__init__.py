"""Keras layers of capsule networks."""

from keras_capsules.layers.capsule_layer import CapsuleLayer
from keras_capsules.layers.length import Length
from keras_capsules.layers.mask import Mask
from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.layers.reconstruction_decoder import ReconstructionDecoder

__all__ = ["CapsuleLayer", "Length", "Mask", "PrimaryCapsule", "ReconstructionDecoder"]
