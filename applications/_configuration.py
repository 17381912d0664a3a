"""The papers' configurations of an architecture: classes that fix some of its arguments."""


class PaperConfiguration:
    """A mixin before an architecture class whose `CONFIGURATION` arguments are fixed.

    The subclass calls `super().__init__(**self.configured(kwargs))`: the
    fixed arguments are added, and given ones refused with a `ValueError`
    naming `ARCHITECTURE`, the class that takes them. Its config leaves them
    out, so that `from_config` builds it again.
    """

    CONFIGURATION = {}
    ARCHITECTURE = None

    def configured(self, kwargs):
        """`kwargs` with `CONFIGURATION` added; a `ValueError` if they set any of it."""
        given = sorted(set(kwargs) & set(self.CONFIGURATION))
        if given:
            fixed = ", ".join(
                f"{len(value)} class names" if key == "class_names" else f"{key}={value!r}"
                for key, value in self.CONFIGURATION.items()
            )
            raise ValueError(
                f"{type(self).__name__} is the paper's configuration ({fixed}), so it takes no "
                f"{', '.join(f'`{key}`' for key in given)}. For other images or classes use "
                f"applications.{self.ARCHITECTURE}. Received: "
                + ", ".join(f"{key}={kwargs[key]!r}" for key in given)
            )
        return {**kwargs, **self.CONFIGURATION}

    def _architecture_config(self):
        config = super()._architecture_config()
        for key in self.CONFIGURATION:
            config.pop(key)
        return config
