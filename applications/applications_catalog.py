"""The architectures, hypermodels and presets of `applications` that the commands offer."""

from keras_capsules.cli.catalog import Catalog


class ApplicationsCatalog(Catalog):
    """The `keras-capsules` commands' view of `applications`.

    `train` builds `CapsNet`, `EfficientCapsNet`, `MatrixCapsNet` or a
    `BackboneCapsNet` with the options each class declares as its `OPTIONS`
    (read by its `option_arguments`), `tune` searches `CapsNetHyperModel` or
    `MatrixCapsNetHyperModel`, and the commands load the shipped presets.
    Declared as the entry point `applications` of the group
    `keras_capsules.catalogs`.

    Example:

    >>> from applications.applications_catalog import CATALOG
    >>> sorted(CATALOG.architectures())
    ['backbone-capsnet', 'capsnet', 'efficient-capsnet', 'matrix-capsnet']
    >>> CATALOG.model_class("capsnet").RECIPE.batch_size
    100
    >>> CATALOG.options("efficient-capsnet")  # the paper's network: no option sizes it
    ()
    """

    ARCHITECTURES = {
        "capsnet": "applications.CapsNet (dynamic routing)",
        "efficient-capsnet": "applications.EfficientCapsNet (self-attention routing)",
        "matrix-capsnet": "applications.MatrixCapsNet (EM routing)",
        "backbone-capsnet": "applications.BackboneCapsNet (a capsule head on a "
        "keras.applications or keras-hub model)",
    }
    HYPERMODELS = {
        "capsnet": "applications.CapsNetHyperModel",
        "matrix-capsnet": "applications.MatrixCapsNetHyperModel",
    }
    _CLASSES = {
        "capsnet": "CapsNet",
        "efficient-capsnet": "EfficientCapsNet",
        "matrix-capsnet": "MatrixCapsNet",
        "backbone-capsnet": "BackboneCapsNet",
    }

    def model_class(self, name, data=None):
        import applications

        family = getattr(applications, self._CLASSES[name])
        if data != "multimnist":
            return family
        return None if family.MULTIMNIST is None else getattr(applications, family.MULTIMNIST)

    def options(self, name):
        return tuple(self.model_class(name).OPTIONS)

    def model_arguments(self, name, values):
        return self.model_class(name).option_arguments(values)

    def hypermodel(self, name):
        import applications

        if name == "capsnet":
            return applications.CapsNetHyperModel(
                input_shape=(28, 28, 1), num_classes=10, batch_size=100
            )
        return applications.MatrixCapsNetHyperModel(
            input_shape=(28, 28, 1), num_classes=10, scale=1.0 / 255.0, batch_size=32
        )

    def cheaper_option(self, name, input_shape, num_classes):
        if name == _CHEAPER:
            return None
        cheaper = self.model_class(_CHEAPER).cheaper_option(input_shape, num_classes)
        if cheaper is None:
            return None
        options, build = cheaper
        return f"{_CHEAPER} {options}", build

    def preset_metadata(self, preset):
        import applications

        return applications.preset_metadata(preset)

    def from_preset(self, preset):
        import applications

        return applications.PresetMixin.from_preset(preset)


_CHEAPER = "backbone-capsnet"
"""The architecture whose `cheaper_option` `train` names for large images."""

CATALOG = ApplicationsCatalog()
"""The catalog `keras-capsules` finds through its entry point."""
