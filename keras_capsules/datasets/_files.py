"""File helpers shared by the data set loaders."""

import os


def find(path, name):
    """The path of `name` in folder `path`, gzipped (`name.gz`) or not; `None` if absent."""
    for candidate in (name + ".gz", name):
        full = os.path.join(path, candidate)
        if os.path.exists(full):
            return full
    return None
