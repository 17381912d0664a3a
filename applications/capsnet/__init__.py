"""CapsNet (Sabour et al. 2017): its backbone, its classifier and the paper's configurations."""

from applications.capsnet.capsnet import CapsNet
from applications.capsnet.capsnet_backbone import CapsNetBackbone
from applications.capsnet.capsnet_mnist import CapsNetMNIST
from applications.capsnet.capsnet_multimnist import CapsNetMultiMNIST

__all__ = ["CapsNet", "CapsNetBackbone", "CapsNetMNIST", "CapsNetMultiMNIST"]
