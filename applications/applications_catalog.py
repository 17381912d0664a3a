"""The architectures, hypermodels and presets of `applications` that the commands offer."""

from keras_capsules.cli.catalog import Catalog


class ApplicationsCatalog(Catalog):
    """The `keras-capsules` commands' view of `applications`.

    `train` builds `CapsNet`, `EfficientCapsNet` or `MatrixCapsNet` with the
    sizes the command's options give (`--iterations`, `--conv-filters`,
    `--primary-capsule-types` for CapsNet; `-A` to `-D`, `--normalization`
    and EM routing's settings for the matrix capsule network), `tune`
    searches `CapsNetHyperModel` or `MatrixCapsNetHyperModel`, and the
    commands load the shipped presets. Declared as the entry point
    `applications` of the group `keras_capsules.catalogs`.

    Example:

    >>> from applications.applications_catalog import CATALOG
    >>> sorted(CATALOG.architectures())
    ['capsnet', 'efficient-capsnet', 'matrix-capsnet']
    >>> CATALOG.model_class("capsnet").RECIPE.batch_size
    100
    """

    ARCHITECTURES = {
        "capsnet": "applications.CapsNet (dynamic routing)",
        "efficient-capsnet": "applications.EfficientCapsNet (self-attention routing)",
        "matrix-capsnet": "applications.MatrixCapsNet (EM routing)",
    }
    HYPERMODELS = {
        "capsnet": "applications.CapsNetHyperModel",
        "matrix-capsnet": "applications.MatrixCapsNetHyperModel",
    }
    _CLASSES = {
        "capsnet": "CapsNet",
        "efficient-capsnet": "EfficientCapsNet",
        "matrix-capsnet": "MatrixCapsNet",
    }

    def model_class(self, name):
        import applications

        return getattr(applications, self._CLASSES[name])

    def model_arguments(self, name, args):
        if name == "capsnet":
            return {
                name: getattr(args, name)
                for name in ("iterations", "conv_filters", "primary_capsule_types")
            }
        if name == "matrix-capsnet":
            from keras_capsules.routing import EMSettings

            settings = EMSettings(**{name: getattr(args, name) for name in _EM_OPTIONS})
            sizes = {name: getattr(args, name) for name in ("A", "B", "C", "D", "normalization")}
            return {**sizes, "em_settings": settings}
        return {}

    def hypermodel(self, name):
        import applications

        if name == "capsnet":
            return applications.CapsNetHyperModel(
                input_shape=(28, 28, 1), num_classes=10, batch_size=100
            )
        return applications.MatrixCapsNetHyperModel(
            input_shape=(28, 28, 1), num_classes=10, scale=1.0 / 255.0, batch_size=32
        )

    def preset_metadata(self, preset):
        import applications

        return applications.preset_metadata(preset)

    def from_preset(self, preset):
        import applications

        return applications.PresetMixin.from_preset(preset)


_EM_OPTIONS = (
    "iterations",
    "inverse_temperature",
    "variance_epsilon",
    "tempering",
    "inverse_temperature_schedule",
)
"""The options of `train` that are EM routing's settings, by their `EMSettings` names."""

CATALOG = ApplicationsCatalog()
"""The catalog `keras-capsules` finds through its entry point."""
