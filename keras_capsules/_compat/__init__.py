"""Other libraries' internals, each library's in one module of this package.

Where a library has no public way to do what keras-capsules needs, the private
names it uses are reached only from the module here named after that library
(`keras`, `keras_tuner`, `tensorflow`, `tf2onnx`, `uvicorn`). Each module
reaches them through `internal`, which raises `InternalChanged` naming the
library, its installed version and the internal when one is gone, and has a
`check()` that reaches every one of them. The tests call each `check()`, so
that an upgrade that moves an internal fails with that message instead of
changing what keras-capsules does without a word.
"""

import importlib
import sys


class InternalChanged(RuntimeError):
    """A library no longer has an internal that keras-capsules uses."""


def version(library):
    """The installed version of the (imported) top-level module `library`, as a string."""
    module = sys.modules.get(library)
    found = getattr(module, "__version__", None)
    if found is None:
        from importlib import metadata

        try:
            found = metadata.version(library.replace("_", "-"))
        except metadata.PackageNotFoundError:
            found = "(version unknown)"
    return str(found)


def changed(library, name, reason=None):
    """The `InternalChanged` error for `library` lacking its internal `name`."""
    detail = f": {reason}" if reason else ""
    return InternalChanged(
        f"keras-capsules relies on {name}, an internal of {library}, which changed in the "
        f"installed {library} {version(library)}{detail}. Install a "
        f"{library.replace('_', '-')} version in the range of keras-capsules' pyproject.toml, "
        "or update "
        f"keras_capsules._compat.{library} for this one."
    )


def internal(library, module, name=None):
    """The module `module` of `library`, or its attribute `name` (a dotted path).

    `library` (its top-level module) must be installed: a missing library is an
    `ImportError`, as usual.

    Raises:
        InternalChanged: `module` or `name` is gone.
    """
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name == library:
            raise
        raise changed(library, module, error) from error
    for part in name.split(".") if name else ():
        try:
            found = getattr(found, part)
        except AttributeError as error:
            raise changed(library, f"{module}.{name}", error) from error
    return found
