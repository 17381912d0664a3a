"""No part of the library imports another part's private modules or names.

The parts are `applications` and each module or subpackage of
`keras_capsules` (`keras_capsules.layers`, `keras_capsules.routing`,
`keras_capsules.ops`, ...). A part may import its own private names, any
part's public ones, and the private top-level modules of `keras_capsules`
(`keras_capsules._validation`, `keras_capsules._contract`, ...), which are
private to the library as a whole. Anything else shared goes through a
public name or moves to such a module.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("keras_capsules", "applications")


def _part(parts):
    """The part of the library a dotted name belongs to, as a tuple."""
    if parts[0] == "keras_capsules" and len(parts) > 1:
        return tuple(parts[:2])
    return tuple(parts[:1])


def _imported(node, package):
    """The dotted names, as lists, that an import node in `package` brings in."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".") for alias in node.names]
    base = package[: len(package) - node.level + 1] if node.level else []
    module = base + (node.module.split(".") if node.module else [])
    return [module + [alias.name] for alias in node.names]


def private_imports(source, module):
    """`(line, dotted name)` of each import in `source` of another part's private name.

    `module` is the importing module's dotted name (`"pkg"` for a package's
    `__init__.py`, which then counts as `"pkg.__init__"`).
    """
    parts = module.split(".")
    if parts[-1] == "__init__":
        parts = package = parts[:-1]
    else:
        package = parts[:-1]
    offenders = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for name in _imported(node, package):
            if name[0] not in PACKAGES:
                continue
            private = [i for i, part in enumerate(name) if part.startswith("_")]
            private = [i for i in private if not name[i].startswith("__")]
            if not private:
                continue
            if name[0] == "keras_capsules" and private[0] == 1:
                continue  # keras_capsules._something: the whole library's
            if _part(name) != _part(parts):
                offenders.append((node.lineno, ".".join(name)))
    return offenders


def _modules():
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path, ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_no_part_imports_another_parts_private_names():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path, module in _modules()
        for line, name in private_imports(path.read_text(encoding="utf-8"), module)
    ]
    assert not offenders, "imports of another part's private names:\n" + "\n".join(offenders)


def test_the_check_tells_private_imports_apart():
    source = "\n".join(
        [
            "from keras_capsules.routing._em import em_routing",
            "from keras_capsules.routing import _positions",
            "import keras_capsules.ops",
            "from keras_capsules.ops import _scaled",
            "from applications._preset import preset_folder",
            "from keras_capsules._validation import check_positive_int",
            "from keras_capsules.layers._em_capsule import EMCapsule",
            "from keras_capsules.routing import em_routing",
            "from ._convolutional_capsule import ConvolutionalCapsule",
            "from .. import _precision",
        ]
    )
    assert private_imports(source, "keras_capsules.layers.matrix_capsule") == [
        (1, "keras_capsules.routing._em.em_routing"),
        (2, "keras_capsules.routing._positions"),
        (4, "keras_capsules.ops._scaled"),
        (5, "applications._preset.preset_folder"),
    ]
    # In its own part a private name is fine (line 9 there is routing's own); a
    # package's __init__ is in its part.
    assert private_imports(source, "keras_capsules.routing.__init__") == [
        (4, "keras_capsules.ops._scaled"),
        (5, "applications._preset.preset_folder"),
        (7, "keras_capsules.layers._em_capsule.EMCapsule"),
    ]
    # applications may use the library's private top-level modules.
    assert private_imports(source, "applications.capsnet") == [
        (1, "keras_capsules.routing._em.em_routing"),
        (2, "keras_capsules.routing._positions"),
        (4, "keras_capsules.ops._scaled"),
        (7, "keras_capsules.layers._em_capsule.EMCapsule"),
    ]


def imports_of(source, top):
    """`(line, module)` of each import in `source` of the package `top`, even in a function."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        found.extend((node.lineno, name) for name in names if name.split(".")[0] == top)
    return found


def test_the_library_never_imports_the_applications():
    # The commands and the hypermodels get the models from a catalog the
    # applications declare (keras_capsules.cli.catalog); doctests may import them.
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / "keras_capsules").rglob("*.py"))
        for line, name in imports_of(path.read_text(encoding="utf-8"), "applications")
    ]
    assert not offenders, "keras_capsules imports applications:\n" + "\n".join(offenders)
    source = "def f():\n    import applications.capsnet\n    from applications import CapsNet\n"
    assert imports_of(source, "applications") == [(2, "applications.capsnet"), (3, "applications")]
