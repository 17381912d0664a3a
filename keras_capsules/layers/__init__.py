"""Keras layers of capsule networks."""

from keras_capsules.layers.capsule_layer import CapsuleLayer
from keras_capsules.layers.class_matrix_capsule import ClassMatrixCapsule
from keras_capsules.layers.depthwise_primary_capsule import DepthwisePrimaryCapsule
from keras_capsules.layers.fully_connected_capsule import FullyConnectedCapsule
from keras_capsules.layers.image_converter import ImageConverter
from keras_capsules.layers.inverted_dot_product_capsule import InvertedDotProductCapsule
from keras_capsules.layers.length import Length
from keras_capsules.layers.mask import Mask
from keras_capsules.layers.matrix_capsule import MatrixCapsule
from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.layers.primary_matrix_capsule import PrimaryMatrixCapsule
from keras_capsules.layers.random_coupling_capsule import RandomCouplingCapsule
from keras_capsules.layers.reconstruction_decoder import ReconstructionDecoder
from keras_capsules.layers.self_attention_capsule import SelfAttentionCapsule

__all__ = [
    "CapsuleLayer",
    "ClassMatrixCapsule",
    "DepthwisePrimaryCapsule",
    "FullyConnectedCapsule",
    "ImageConverter",
    "InvertedDotProductCapsule",
    "Length",
    "Mask",
    "MatrixCapsule",
    "PrimaryCapsule",
    "PrimaryMatrixCapsule",
    "RandomCouplingCapsule",
    "ReconstructionDecoder",
    "SelfAttentionCapsule",
]
