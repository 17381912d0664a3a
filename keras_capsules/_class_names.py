"""A model's names for its classes, wherever they are shown."""


def class_name(model, index):
    """The name of class `index` of `model` (its `class_names`), else the index as text."""
    names = getattr(model, "class_names", None)
    return names[int(index)] if names else str(int(index))
