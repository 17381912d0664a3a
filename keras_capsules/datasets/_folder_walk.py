"""The one walk of a folder of class subfolders, and the fingerprint of what it found.

`list_folder` lists the image files of every class folder, in the order
training reads them: the classes sorted by name (hidden ones left out), then
each class's folders sorted by path and each folder's files by name, as
Keras's `image_dataset_from_directory` orders them. Unlike Keras's default,
symlinked folders are followed; a link back to a folder the walk is in (a
loop) or to a folder it has read already is refused, so the walk reads each
folder once and ends. `fingerprint` records what the listing holds (the
class names, every file's path, size and modification time, the SHA-256 of
the bytes `check_folder` read of each, the counts) and `folder_changes` says,
in words, how two fingerprints differ.
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


CONTENT = "sha256"
"""How a fingerprint records each file's content: the SHA-256 of the bytes checked."""


def fingerprint(listing, counts, skipped, contents=None):
    """What `listing` holds, for `run.json`: a resumed run is refused if it changed.

    The record: the class names in order, the number of files listed, the
    readable images of each class (`counts`) and the files skipped; a digest
    of each class's files (its relative path, size and modification time of
    each); with `contents` (`{path: SHA-256 hex digest of the bytes read}`,
    as `check_folder` reads them), a digest of each class's files' contents
    too and `"content": "sha256"`; a digest of all of it; and, to say which
    files changed, 16 hex digits per file (8 of its path's digest, 8 of its
    size and time's), 24 with `contents` (8 of its content's).
    """
    class_digests, content_digests, keys = [], [], {}
    for name, paths in zip(listing.class_names, listing.files):
        top = os.path.join(listing.directory, name)
        records, contained, shorts = [], [], []
        for path in paths:
            relative = os.fsencode(os.path.relpath(path, top))
            try:
                info = os.stat(path)
                state = f"{info.st_size}:{info.st_mtime_ns}".encode()
            except OSError:  # a broken link: read as unreadable, recorded as such
                state = b"-"
            records.append(relative + b"\0" + state)
            short = _hash(relative)[:8] + _hash(relative + b"\0" + state)[:8]
            if contents is not None:
                content = contents.get(path, "-").encode()  # "-": not read
                contained.append(relative + b"\0" + content)
                short += _hash(relative + b"\0" + content)[:8]
            shorts.append(short)
        class_digests.append(_hash(b"\n".join(records)))
        content_digests.append(_hash(b"\n".join(contained)))
        keys[name] = "".join(shorts)
    record = {
        "kind": "folder",
        "digest": None,
        "classes": list(listing.class_names),
        "files": listing.total,
        "counts": list(counts),
        "skipped": len(skipped),
        "class_digests": class_digests,
        "file_keys": keys,
    }
    if contents is not None:
        record.update(content=CONTENT, content_digests=content_digests)
    record["digest"] = _digest(record)
    return record


def _digest(record):
    """The digest of a fingerprint: of its classes, their files' digests, counts and skipped."""
    summary = [*record["classes"], *record["class_digests"]]
    summary += [repr(tuple(record["counts"])), str(record["skipped"])]
    if record.get("content"):
        summary += [record["content"], *record["content_digests"]]
    return _hash("\n".join(summary).encode())


def _without_content(record):
    """`record` as a fingerprint without the files' contents would be (an older run's)."""
    record = {k: v for k, v in record.items() if k not in ("content", "content_digests")}
    record["file_keys"] = {
        name: "".join(keys[i : i + 16] for i in range(0, len(keys), 24))
        for name, keys in record["file_keys"].items()
    }
    record["digest"] = _digest(record)
    return record


def _file_states(keys, width):
    """`{path key: state key}` of a class's `file_keys` string, `width` hex digits a file."""
    return {keys[i : i + 8]: keys[i + 8 : i + width] for i in range(0, len(keys), width)}


def folder_changes(old, new):
    """How the folder of fingerprint `new` differs from that of `old`, in one line.

    E.g. "class 'three' added", "class 'two' renamed or removed", "classes
    reordered ('a' holds what 'b' held, ...)", "3 files changed in class
    'zero' (1 added, 2 modified)", "1 file changed in class 'zero' (1 edited
    in place keeping its size and time)". `None` where the digests agree.
    A fingerprint `old` that records no contents (an older run's) is compared
    by the files' paths, sizes and times alone.
    """
    if not old.get("content") and new.get("content"):
        new = _without_content(new)
    if old.get("digest") == new.get("digest"):
        return None
    if old.get("content") and not new.get("content"):
        return "the run recorded its images' contents, and these were not read"
    old_classes, new_classes = list(old.get("classes", ())), list(new["classes"])
    old_digest = _class_keys(old)
    new_digest = _class_keys(new)
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
    parts += _file_changes(changed, old.get("file_keys", {}), new["file_keys"], _width(new))
    if not parts and old.get("skipped") != new.get("skipped"):
        parts.append(f"{old.get('skipped')} -> {new['skipped']} unreadable files skipped")
    return "; ".join(parts) or "the images changed"


def _class_keys(record):
    """`{class name: its files' digests}` of a fingerprint: of their states, and contents."""
    contents = record.get("content_digests") or [None] * len(record.get("class_digests", ()))
    return dict(zip(record.get("classes", ()), zip(record.get("class_digests", ()), contents)))


def _width(record):
    """The hex digits a file has in `record`'s `file_keys`: path, state, and content."""
    return 24 if record.get("content") else 16


def _file_changes(classes, old_keys, new_keys, width):
    """`["N files changed in class 'x' (A added, R removed, M modified)"]` for `classes`.

    A file whose size and time are those recorded but whose content is not
    is counted apart: "edited in place keeping its size and time".
    """
    if not classes:
        return []
    added = removed = modified = edited = 0
    for name in classes:
        before = _file_states(old_keys.get(name, ""), width)
        after = _file_states(new_keys[name], width)
        added += len(after.keys() - before.keys())
        removed += len(before.keys() - after.keys())
        for key in after.keys() & before.keys():
            if after[key][:8] != before[key][:8]:
                modified += 1
            elif after[key] != before[key]:
                edited += 1
    total = added + removed + modified + edited
    where = ", ".join(repr(name) for name in classes[:3]) + (" ..." if classes[3:] else "")
    kept = f"edited in place keeping {'its' if edited == 1 else 'their'} size and time"
    kinds = ", ".join(
        f"{count} {kind}"
        for count, kind in (
            (added, "added"),
            (removed, "removed"),
            (modified, "modified"),
            (edited, kept),
        )
        if count
    )
    noun = "file" if total == 1 else "files"
    return [
        f"{total or 'some'} {noun} changed in class{'es' if classes[1:] else ''} {where}"
        + (f" ({kinds})" if kinds else "")
    ]
