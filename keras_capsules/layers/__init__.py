"""Keras layers of capsule networks."""

from keras_capsules.layers.capsule_layer import CapsuleLayer
from keras_capsules.layers.class_matrix_capsule import ClassMatrixCapsule
from keras_capsules.layers.length import Length
from keras_capsules.layers.mask import Mask
from keras_capsules.layers.matrix_capsule import MatrixCapsule
from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.layers.primary_matrix_capsule import PrimaryMatrixCapsule
from keras_capsules.layers.reconstruction_decoder import ReconstructionDecoder

__all__ = [
    "CapsuleLayer",
    "ClassMatrixCapsule",
    "Length",
    "Mask",
    "MatrixCapsule",
    "PrimaryCapsule",
    "PrimaryMatrixCapsule",
    "ReconstructionDecoder",
]
