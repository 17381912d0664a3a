"""MNIST and Fashion-MNIST's canonical files, read by `keras_capsules.datasets`.

The package holds data only: `mnist/` and `fashion_mnist/`, four gzipped IDX
files each. keras-capsules finds them without importing this module.
"""
