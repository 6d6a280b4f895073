"""Reading a filesystem store's folders: the keys a listing finds, and a folder's version.

Only reads, in a worker thread (the store runs them there): a listing never
enters a linked folder, and the version vouches for a folder only once its time
stamps can be trusted to have moved.
"""

from __future__ import annotations

import enum
import os
import time
from typing import TYPE_CHECKING

from ._temps import TEMP_NAME

if TYPE_CHECKING:
    from pathlib import Path


def scan_folder(
    path: str, base: str, prefix: str, start_after: str | None, keys: list[str]
) -> None:
    """Add the keys under folder ``path`` (key prefix ``base``) that start with
    ``prefix`` and sort after ``start_after`` to ``keys``.

    A folder has no order of its own, so every name is read; but the names that
    sort before ``start_after`` are dropped by comparing strings, before any
    per-entry call, and the folders under them are never entered.
    """
    rest: str | None = None  # start_after, relative to this folder
    if start_after is not None:
        if start_after.startswith(base):
            rest = start_after[len(base) :]
        elif start_after > base:
            return  # every key in here sorts before start_after
    # The part of the prefix below this folder: only at its own level, never with a '/'.
    wanted = prefix[len(base) :] if len(prefix) > len(base) else ""
    if rest is None:
        with os.scandir(path) as entries:  # a whole folder: its entry types come free
            found = [(entry.name, _entry_kind(entry)) for entry in entries]
        if wanted:
            found = [(name, kind) for name, kind in found if name.startswith(wanted)]
    else:
        names = os.listdir(path)
        if wanted:
            names = [name for name in names if name.startswith(wanted)]
        # What sorts after, and the names rest starts with: a folder of that name may
        # hold keys after it ("a/z" > "a!" though "a" < "a!"). A set lookup, not a
        # startswith call a name: this filter runs over every name of a long turn.
        after = rest
        heads = {after[:end] for end in range(1, len(after.split("/", 1)[0]) + 1)}
        names = [name for name in names if name > after or name in heads]
        found = [(name, _path_kind(os.path.join(path, name))) for name in names]
    for name, kind in found:
        key = base + name
        if kind is _Kind.FOLDER:
            scan_folder(os.path.join(path, name), key + "/", prefix, start_after, keys)
        elif kind is _Kind.FILE and (rest is None or name > rest) and not TEMP_NAME.fullmatch(name):
            keys.append(key)


class _Kind(enum.Enum):
    """An entry as os.walk sees it: a file (a key), a folder to enter, a link to a folder
    (neither listed nor entered: it could lead outside the root).

    A link to a file is listed as a key, whatever it points to: naming it shows
    nothing outside, and a get of it then says where it leads (StoreEscapeError)
    instead of the object going missing without a word."""

    FILE = enum.auto()
    FOLDER = enum.auto()
    FOLDER_LINK = enum.auto()


def _entry_kind(entry: os.DirEntry[str]) -> _Kind:
    if not entry.is_dir():
        return _Kind.FILE
    return _Kind.FOLDER_LINK if entry.is_symlink() else _Kind.FOLDER


def _path_kind(path: str) -> _Kind:
    if not os.path.isdir(path):
        return _Kind.FILE
    return _Kind.FOLDER_LINK if os.path.islink(path) else _Kind.FOLDER


# A folder's time stamps tick at the filesystem's grain (a clock tick on Linux, 1 s on
# ext3 or HFS+, 2 s on FAT): an entry added in the tick of the one before can leave
# them as they were. A folder is vouched for once it has been still for longer than that.
_STILL_NANOSECONDS = 3 * 10**9


def folder_stat_version(root: Path, path: Path) -> tuple[int, ...] | None:
    """The folder's identity and time stamps, or ``None`` when they cannot be trusted now."""
    now = time.time_ns()  # before the stat: an entry added after it moves the stamps past it
    try:
        if not path.is_dir() or not path.resolve().is_relative_to(root):
            return None  # as a listing: nothing (or not the store's) there
        # Opened, not stat'ed by name: a network filesystem checks an open folder with
        # its server, as a listing does, where a stat may answer from its cache.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            found = os.fstat(fd)
        finally:
            os.close(fd)
    except OSError:
        return None  # the listing that follows says what is wrong, as it always did
    # An entry added later stamps the folder's mtime with its own tick, past an old one.
    # (The ctime in the value is the kernel's own: even a utime() back moves it.)
    if now - found.st_mtime_ns < _STILL_NANOSECONDS:
        return None  # changed lately (or stamped ahead of our clock): list it
    return (found.st_dev, found.st_ino, found.st_mtime_ns, found.st_ctime_ns, found.st_size)
