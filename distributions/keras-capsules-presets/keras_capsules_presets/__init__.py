"""The weights of keras-capsules' trained presets, read by `applications`.

The package holds data only: one folder per preset with its
`model.weights.h5`. keras-capsules finds them without importing this module.
"""
