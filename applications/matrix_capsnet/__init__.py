"""Matrix capsules with EM routing (Hinton et al. 2018): backbone, classifier, paper's network."""

from applications.matrix_capsnet.matrix_capsnet import MatrixCapsNet
from applications.matrix_capsnet.matrix_capsnet_backbone import MatrixCapsNetBackbone
from applications.matrix_capsnet.matrix_capsnet_norb import MatrixCapsNetNORB

__all__ = ["MatrixCapsNet", "MatrixCapsNetBackbone", "MatrixCapsNetNORB"]
