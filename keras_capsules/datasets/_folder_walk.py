"""The one walk of a folder of class subfolders, and the fingerprint of what it found.

`list_folder` lists the image files of every class folder, in the order
training reads them: the classes sorted by name (hidden ones left out), then
each class's folders sorted by path and each folder's files by name, as
Keras's `image_dataset_from_directory` orders them. Unlike Keras's default,
symlinked folders are followed; a link back to a folder the walk is in (a
loop) or to a folder it has read already is refused, so the walk reads each
folder once and ends. `fingerprint` records what the listing holds (the
class names, every file's path, size and modification time, the counts) and
`folder_changes` says, in words, how two fingerprints differ.
"""

import dataclasses
import hashlib
import os

EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
"""The files read (any case), as `image_dataset_from_directory`'s; any other is passed over."""


@dataclasses.dataclass(frozen=True)
class Listing:
    """The image files of a folder's class subfolders, in the order training reads them.

    Attributes:
        directory: the folder.
        class_names: the class folders' names, sorted (the labels' order).
        files: one tuple of paths per class, in that order.
        ignored: files of no image kind (by their extension), not hidden.
    """

    directory: str
    class_names: tuple
    files: tuple
    ignored: int = 0

    @property
    def total(self):
        """The number of image files."""
        return sum(len(paths) for paths in self.files)


def shown(path):
    """`path` as a message shows it: `repr` of its bytes where it is no UTF-8 text."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return repr(os.fsencode(path))
    return path


def list_folder(directory, min_classes=2):
    """The `Listing` of `directory`: its class folders and their image files, walked once.

    Raises:
        ValueError: naming the folder: a missing folder, fewer than
            `min_classes` class folders, a class folder whose name is not
            UTF-8 or that holds no image file, a symlink loop, a folder
            reached twice through symlinks, a folder that cannot be listed.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"No folder {directory}: it should hold one subfolder of images per class")
    classes = sorted(
        name
        for name in _listdir(directory)
        if os.path.isdir(os.path.join(directory, name)) and not name.startswith(".")
    )
    if not classes:
        raise ValueError(
            f"{directory} holds no class folders: put each class's images in a subfolder "
            "named after the class"
        )
    if len(classes) < min_classes:
        raise ValueError(
            f"{directory} holds one class folder ({shown(classes[0])}): a classifier needs two "
            "classes or more"
        )
    for name in classes:
        if shown(name) != name:
            raise ValueError(
                f"The class folder {shown(name)} in {directory} has a name that is not UTF-8 "
                "text, which TensorFlow and a model's class names need: rename it"
            )
    seen = {_identity(directory): directory}
    files, ignored = [], 0
    for name in classes:
        paths, others = _class_files(os.path.join(directory, name), seen, (_identity(directory),))
        files.append(paths)
        ignored += others
    empty = [name for name, paths in zip(classes, files) if not paths]
    if empty:
        raise ValueError(
            f"The class folder {os.path.join(directory, empty[0])} holds no images "
            f"({', '.join(EXTENSIONS)})"
            + (f"; {len(empty) - 1} more are empty" if empty[1:] else "")
        )
    return Listing(directory, tuple(classes), tuple(files), ignored)


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError as error:
        raise ValueError(f"Cannot list {shown(path)}: {error.strerror or error}") from None


def _identity(path):
    """`(device, inode)` of the folder `path` (a symlink followed)."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise ValueError(f"Cannot read {shown(path)}: {error.strerror or error}") from None
    return info.st_dev, info.st_ino


def _class_files(top, seen, ancestors):
    """`(paths, others)`: the image files under `top` (symlinks followed), in Keras's order.

    `seen` maps the identity of every folder read so far to its path; a
    folder met again is a loop (one of its own ancestors) or a duplicate,
    both refused.
    """
    folders, others, pending = [], 0, [(top, ancestors)]
    while pending:
        path, above = pending.pop()
        identity = _identity(path)
        if identity in seen:
            first = seen[identity]
            if identity in above:
                raise ValueError(
                    f"{shown(path)} leads back to {shown(first)}, a folder it is in: a symlink "
                    "loop (symlinked folders are followed). Remove the link"
                )
            raise ValueError(
                f"{shown(path)} is the folder {shown(first)} again (through a symlink): its "
                "images would be read twice. Remove one of the two"
            )
        seen[identity] = path
        names, subfolders = [], []
        for name in _listdir(path):
            full = os.path.join(path, name)
            if os.path.isdir(full):
                subfolders.append(full)
            elif name.lower().endswith(EXTENSIONS):
                names.append(name)
            elif not name.startswith("."):
                others += 1
        folders.append((path, sorted(names)))
        pending.extend((sub, (*above, identity)) for sub in sorted(subfolders, reverse=True))
    folders.sort(key=lambda folder: folder[0])  # as Keras sorts os.walk's folders
    return tuple(os.path.join(root, name) for root, names in folders for name in names), others


def _hash(data):
    return hashlib.sha256(data).hexdigest()


def fingerprint(listing, counts, skipped):
    """What `listing` holds, for `run.json`: a resumed run is refused if it changed.

    The record: the class names in order, the number of files listed, the
    readable images of each class (`counts`) and the files skipped; a digest
    of each class's files (its relative path, size and modification time of
    each); a digest of all of it; and, to say which files changed, 16 hex
    digits per file (8 of its path's digest, 8 of its size and time's).
    """
    class_digests, keys = [], {}
    for name, paths in zip(listing.class_names, listing.files):
        top = os.path.join(listing.directory, name)
        records, shorts = [], []
        for path in paths:
            relative = os.fsencode(os.path.relpath(path, top))
            try:
                info = os.stat(path)
                state = f"{info.st_size}:{info.st_mtime_ns}".encode()
            except OSError:  # a broken link: read as unreadable, recorded as such
                state = b"-"
            records.append(relative + b"\0" + state)
            shorts.append(_hash(relative)[:8] + _hash(relative + b"\0" + state)[:8])
        class_digests.append(_hash(b"\n".join(records)))
        keys[name] = "".join(shorts)
    summary = "\n".join(
        [*listing.class_names, *class_digests, repr(tuple(counts)), str(len(skipped))]
    )
    return {
        "kind": "folder",
        "digest": _hash(summary.encode()),
        "classes": list(listing.class_names),
        "files": listing.total,
        "counts": list(counts),
        "skipped": len(skipped),
        "class_digests": class_digests,
        "file_keys": keys,
    }


def _file_states(keys):
    """`{path key: state key}` of a class's `file_keys` string."""
    return {keys[i : i + 8]: keys[i + 8 : i + 16] for i in range(0, len(keys), 16)}


def folder_changes(old, new):
    """How the folder of fingerprint `new` differs from that of `old`, in one line.

    E.g. "class 'three' added", "class 'two' renamed or removed", "classes
    reordered ('a' holds what 'b' held, ...)", "3 files changed in class
    'zero' (1 added, 2 modified)". `None` where the digests agree.
    """
    if old.get("digest") == new.get("digest"):
        return None
    old_classes, new_classes = list(old.get("classes", ())), list(new["classes"])
    old_digest = dict(zip(old_classes, old.get("class_digests", ())))
    new_digest = dict(zip(new_classes, new["class_digests"]))
    parts = []
    removed = [name for name in old_classes if name not in new_classes]
    added = [name for name in new_classes if name not in old_classes]
    for name in removed:
        moved = [other for other in added if new_digest[other] == old_digest.get(name)]
        if moved:
            parts.append(f"class {name!r} renamed {moved[0]!r}")
            added.remove(moved[0])
        else:
            parts.append(f"class {name!r} renamed or removed")
    parts += [f"class {name!r} added" for name in added]
    common = [name for name in new_classes if name in old_digest]
    moved = {
        name: other
        for name in common
        for other in common
        if other != name
        and new_digest[name] != old_digest[name]
        and new_digest[name] == old_digest[other]
    }
    if moved:
        pairs = ", ".join(f"{name!r} holds what {other!r} held" for name, other in moved.items())
        parts.append(f"classes reordered ({pairs})")
    changed = [n for n in common if n not in moved and new_digest[n] != old_digest[n]]
    parts += _file_changes(changed, old.get("file_keys", {}), new["file_keys"])
    if not parts and old.get("skipped") != new.get("skipped"):
        parts.append(f"{old.get('skipped')} -> {new['skipped']} unreadable files skipped")
    return "; ".join(parts) or "the images changed"


def _file_changes(classes, old_keys, new_keys):
    """`["N files changed in class 'x' (A added, R removed, M modified)"]` for `classes`."""
    if not classes:
        return []
    added = removed = modified = 0
    for name in classes:
        before, after = _file_states(old_keys.get(name, "")), _file_states(new_keys[name])
        added += len(after.keys() - before.keys())
        removed += len(before.keys() - after.keys())
        modified += sum(1 for key in after.keys() & before.keys() if after[key] != before[key])
    total = added + removed + modified
    where = ", ".join(repr(name) for name in classes[:3]) + (" ..." if classes[3:] else "")
    kinds = ", ".join(
        f"{count} {kind}"
        for count, kind in ((added, "added"), (removed, "removed"), (modified, "modified"))
        if count
    )
    noun = "file" if total == 1 else "files"
    return [
        f"{total or 'some'} {noun} changed in class{'es' if classes[1:] else ''} {where}"
        + (f" ({kinds})" if kinds else "")
    ]
