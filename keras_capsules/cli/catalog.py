"""The models the `keras-capsules` commands build and load, handed over by the models' side."""

import importlib.metadata

ENTRY_POINT_GROUP = "keras_capsules.catalogs"
"""The entry point group under which a distribution declares its `Catalog` instance."""


class Catalog:
    """What the `keras-capsules` commands build, tune and load: an interface.

    The commands know no architecture by name: `train` trains whatever the
    catalog names, with the options the catalog declares for it (`options`)
    and the constructor arguments it makes of their values; `tune` searches
    the catalog's hypermodels; every command loads presets through it. A
    distribution that ships models declares one instance under the entry
    point group `keras_capsules.catalogs` (the
    `applications` package declares `applications.applications_catalog:CATALOG`),
    and `keras_capsules.cli.main` finds it there, or takes one as `catalog=`.
    Loading the catalog also imports the models' classes, which registers them
    for `keras.saving.load_model`.

    A subclass defines every method below; `ARCHITECTURES` and `HYPERMODELS`
    are plain tables, and `options` declarations, so that building the parser
    (`keras-capsules --help`) builds no model.

    Example:

    >>> from keras_capsules.cli.catalog import Catalog
    >>> class Empty(Catalog):
    ...     ARCHITECTURES = {}
    >>> Empty().architectures()
    {}
    """

    ARCHITECTURES = {}
    """`{command name: one line of help}` of the architectures `train` builds."""

    HYPERMODELS = {}
    """`{command name: one line of help}` of the hypermodels `tune` searches."""

    def architectures(self):
        """The architectures `train` builds, `{name: help}`."""
        return dict(self.ARCHITECTURES)

    def hypermodels(self):
        """The hypermodels `tune` searches, `{name: help}`."""
        return dict(self.HYPERMODELS)

    def model_class(self, name, data=None):
        """The classifier class of the architecture `name` (its `RECIPE`, `from_preset`, ...).

        With `data="multimnist"`, the architecture's network for two digits
        per image (`train ARCH --data multimnist`), or `None` if it has none.
        """
        raise NotImplementedError

    def options(self, name):
        """The options of `train name`: a tuple of `keras_capsules.cli.option.Option`.

        The architecture's own, declared by its family; `train name --help`
        lists them beside the options of every run, and `train` refuses
        another architecture's.
        """
        return ()

    def model_arguments(self, name, values):
        """The constructor arguments of `name` that its options' `values` give.

        Args:
            values: `{option.argument: value}` for every option of
                `options(name)`, its `default` where it was not given.

        Raises:
            ValueError: an option's value the architecture cannot take.
        """
        raise NotImplementedError

    def hypermodel(self, name):
        """The `keras_tuner.HyperModel` of `name`, for MNIST-sized images."""
        raise NotImplementedError

    def cheaper_option(self, name, input_shape, num_classes):
        """`(option, build)`: another model for these images `train` may name, or `None`.

        `train` says what `name`'s model costs on images of `input_shape`
        before training, and names `option` (the command-line options of the
        other model) where the model `build()` returns needs less memory.
        """
        return None

    def preset_metadata(self, preset):
        """The metadata of the preset `preset` (a name, folder or handle)."""
        raise NotImplementedError

    def from_preset(self, preset):
        """The model of the preset `preset`, as trained."""
        raise NotImplementedError


def installed_catalog():
    """The one `Catalog` the installed distributions declare; a `SystemExit` otherwise."""
    points = sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda point: point.name
    )
    if not points:
        raise SystemExit(
            "keras-capsules: no models are installed (no entry point in the group "
            f"{ENTRY_POINT_GROUP!r}): install keras-capsules with its applications package"
        )
    if len(points) > 1:
        names = ", ".join(f"{point.name} ({point.value})" for point in points)
        raise SystemExit(f"keras-capsules: several model catalogs are installed: {names}")
    catalog = points[0].load()
    if not isinstance(catalog, Catalog):
        raise SystemExit(
            f"keras-capsules: the entry point {points[0].value} is not a "
            f"keras_capsules.cli.catalog.Catalog but {type(catalog).__name__}"
        )
    return catalog
