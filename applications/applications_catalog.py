"""The architectures, hypermodels and presets of `applications` that the commands offer."""

from keras_capsules.cli.catalog import Catalog


class ApplicationsCatalog(Catalog):
    """The `keras-capsules` commands' view of `applications`.

    `train` builds `CapsNet`, `EfficientCapsNet`, `MatrixCapsNet` or a
    `BackboneCapsNet` with the sizes the command's options give
    (`--iterations`, `--conv-filters`, `--primary-capsule-types` for CapsNet;
    `-A` to `-D`, `--normalization` and EM routing's settings for the matrix
    capsule network; `--backbone`, `--backbone-weights`, `--routing` and
    `--iterations` for a capsule head on a `keras.applications` model), `tune`
    searches `CapsNetHyperModel` or `MatrixCapsNetHyperModel`, and the
    commands load the shipped presets. Declared as the entry point
    `applications` of the group `keras_capsules.catalogs`.

    Example:

    >>> from applications.applications_catalog import CATALOG
    >>> sorted(CATALOG.architectures())
    ['backbone-capsnet', 'capsnet', 'efficient-capsnet', 'matrix-capsnet']
    >>> CATALOG.model_class("capsnet").RECIPE.batch_size
    100
    """

    ARCHITECTURES = {
        "capsnet": "applications.CapsNet (dynamic routing)",
        "efficient-capsnet": "applications.EfficientCapsNet (self-attention routing)",
        "matrix-capsnet": "applications.MatrixCapsNet (EM routing)",
        "backbone-capsnet": "applications.BackboneCapsNet (a capsule head on a "
        "keras.applications model: --backbone)",
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

    def model_class(self, name):
        import applications

        return getattr(applications, self._CLASSES[name])

    def model_arguments(self, name, args):
        given = _given(args, ("backbone", "routing"), "backbone-capsnet", name)
        if name == "backbone-capsnet":
            preset = getattr(args, "from_preset", None)
            if (args.backbone is None) == (preset is None):
                raise ValueError(
                    "backbone-capsnet needs --backbone NAME, a keras.applications model such "
                    "as MobileNetV3Small, EfficientNetB0 or ResNet50 or a keras-hub image "
                    "preset, or --from-preset, which brings its own; not both"
                )
            given = {**given, **_given(args, ("iterations",))}
            return {**given, "backbone_weights": args.backbone_weights}
        if args.backbone_weights != "imagenet":
            raise ValueError(f"--backbone-weights is for backbone-capsnet, not {name}")
        if name == "capsnet":
            return {
                **_given(args, ("iterations",)),
                **{name: getattr(args, name) for name in ("conv_filters", "primary_capsule_types")},
            }
        if name == "matrix-capsnet":
            from keras_capsules.routing import EMSettings

            settings = EMSettings(**_given(args, _EM_OPTIONS))
            sizes = {name: getattr(args, name) for name in ("A", "B", "C", "D", "normalization")}
            return {**sizes, "em_settings": settings}
        if args.iterations is not None:
            raise ValueError(f"{name} routes in one pass: it takes no --iterations")
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

    def cheaper_option(self, name, input_shape, num_classes):
        if name == "backbone-capsnet" or min(input_shape[:2]) < _SMALLEST_BACKBONE_INPUT:
            return None

        def build():
            import applications

            return applications.BackboneCapsNet(
                _CHEAPER_BACKBONE,
                num_classes=num_classes,
                input_shape=input_shape,
                backbone_weights=None,
                compile=False,
            )

        return f"backbone-capsnet --backbone {_CHEAPER_BACKBONE}", build

    def preset_metadata(self, preset):
        import applications

        return applications.preset_metadata(preset)

    def from_preset(self, preset):
        import applications

        return applications.PresetMixin.from_preset(preset)


_CHEAPER_BACKBONE = "MobileNetV3Small"
"""The backbone `train` names as the cheaper option for large images."""

_SMALLEST_BACKBONE_INPUT = 32
"""The smallest side `keras.applications` models take."""


def _given(args, names, only=None, model=None):
    """`{name: value}` of the options `names` given a value (not None).

    With `only`, they are options of the architecture `only` alone: a
    `ValueError` if one is given for another `model`.
    """
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if only is not None and model != only and given:
        options = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"{options}: for {only}, not {model}")
    return given


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
