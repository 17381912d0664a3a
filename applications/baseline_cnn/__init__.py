"""The baseline CNN of Sabour et al. 2017, the papers' non-capsule control."""

from applications.baseline_cnn.baseline_cnn import BaselineCNN

__all__ = ["BaselineCNN"]
