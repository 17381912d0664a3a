"""Class names: how many classes a model has, and what they are called."""

from keras_capsules.utils import check_positive_int


def resolve_classes(num_classes, class_names, default=10):
    """`(num_classes, class_names)` checked: the count, and a tuple of names or `None`.

    `num_classes=None` takes the number of `class_names`, or `default` without
    names (`None`: one of the two is needed). Names must be distinct non-empty
    strings, one per class, in the order of the labels (0 first).
    """
    if class_names is not None:
        if isinstance(class_names, str) or not hasattr(class_names, "__iter__"):
            raise ValueError(
                "`class_names` must be a list of strings, one per class. "
                f"Received: class_names={class_names!r}"
            )
        class_names = tuple(class_names)
        bad = [name for name in class_names if not isinstance(name, str) or not name]
        if bad or not class_names:
            raise ValueError(
                "`class_names` must be non-empty strings, one per class. "
                f"Received: class_names={class_names!r}"
            )
        repeated = sorted({name for name in class_names if class_names.count(name) > 1})
        if repeated:
            raise ValueError(
                f"`class_names` must be distinct; {', '.join(map(repr, repeated))} "
                f"appears more than once. Received: class_names={class_names!r}"
            )
        if num_classes is None:
            num_classes = len(class_names)
    if num_classes is None:
        if default is None:
            raise ValueError("`num_classes` is needed: pass it, or `class_names`.")
        num_classes = default
    check_positive_int("num_classes", num_classes)
    if class_names is not None and len(class_names) != num_classes:
        raise ValueError(
            f"`class_names` names {len(class_names)} classes but `num_classes` is "
            f"{num_classes}. Received: class_names={class_names!r}"
        )
    return num_classes, class_names
