"""Write-once object stores behind one async protocol.

Write-once means the same bytes: a put that finds its key holding the same
bytes is done (an idempotent retry), one that finds other bytes raises
:class:`~follower.ObjectConflictError` and overwrites nothing.

Stores never spawn tasks: they are awaited by the follower that owns the write,
so a cancelled step cancels its writes with it. A filesystem call cancelled in
its worker thread is abandoned there: a write may still land, later, on its own.
Those threads are daemon threads the library owns (``_threads``): an abandoned
call never holds the process at exit.
"""

from __future__ import annotations

import atexit
import bisect
import enum
import inspect
import os
import re
import secrets
import threading
import time
import unicodedata
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio
import anyio.lowlevel
import anyio.to_thread

from ._errors import (
    InvalidArgumentError,
    InvalidKeyError,
    ObjectConflictError,
    ObjectNotFoundError,
    StoreError,
    StoreEscapeError,
)
from ._keys import check_key, check_list_prefix
from ._threads import run_sync_abandoning

if TYPE_CHECKING:
    import builtins


@runtime_checkable
class ObjectStore(Protocol):
    """An async, write-once object store."""

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        """Write ``body`` under ``key``, once.

        If the key holds the same bytes already, return; if it holds other bytes,
        raise :class:`ObjectConflictError` (a store that cannot compare raises
        :class:`ObjectExistsError`).
        """

    async def get(self, key: str) -> bytes:
        """Read ``key``; raise :class:`ObjectNotFoundError` if it is not written."""

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        """The keys that start with ``prefix`` and sort after ``start_after``, sorted.

        Sorted by code point, which is S3's UTF-8 byte order. ``start_after``
        need not be a key; ``None`` lists every key under ``prefix``. The reader
        passes the last chunk it read, so that a poll lists only what is new.

        A store written before ``start_after`` existed (``list(self, prefix)``)
        still works: the library sees from the method's signature that it takes
        no ``start_after``, lists everything under the prefix and drops what
        sorts before, so the answer is the same, at the cost of a whole listing
        at every poll. (Type checkers will ask such a store for the new keyword.)
        """


async def list_keys(
    store: ObjectStore, prefix: str, *, start_after: str | None = None
) -> list[str]:
    """``store.list(prefix, start_after=...)``, for stores of either protocol.

    A store whose ``list`` takes no ``start_after`` (written before it existed)
    is listed whole and filtered here: the same keys, at the old cost.
    """
    if start_after is None:
        return await store.list(prefix)
    if _takes_start_after(store):
        return await store.list(prefix, start_after=start_after)
    return [key for key in await store.list(prefix) if key > start_after]


# Per store class: whether its list takes start_after (classes, weakly: a test's local
# class must not be kept alive by this cache).
_TAKES_START_AFTER: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _takes_start_after(store: ObjectStore) -> bool:
    kind = type(store)
    known = _TAKES_START_AFTER.get(kind)
    if known is None:
        try:
            parameters = inspect.signature(store.list).parameters.values()
        except (TypeError, ValueError):  # no signature to read: call it the old way
            known = False
        else:
            known = any(
                p.name == "start_after" or p.kind is inspect.Parameter.VAR_KEYWORD
                for p in parameters
            )
        _TAKES_START_AFTER[kind] = known
    return known


def check_start_after(start_after: str | None) -> None:
    """A listing's ``start_after`` is a string (any: it need not be a key) or ``None``."""
    if start_after is not None and not isinstance(start_after, str):
        raise InvalidArgumentError(
            f"start_after must be a str or None, not {type(start_after).__name__}"
        )


class MemoryStore:
    """A write-once store in memory, for tests and demos.

    Its keys are also kept sorted, so a listing costs the keys it returns, not
    the keys the store holds.
    """

    def __init__(self) -> None:
        self._objects: dict[str, tuple[bytes, str]] = {}
        self._sorted: list[str] = []

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        check_key(key)
        await anyio.lowlevel.checkpoint()
        # No copy of a bytes object (bytes() returns it as it is); a bytearray is
        # copied, so changing it later cannot change what is stored.
        body = bytes(body)
        if key in self._objects:
            check_same_bytes(key, self._objects[key][0], body)
            return
        self._objects[key] = (body, content_type)
        bisect.insort(self._sorted, key)

    async def get(self, key: str) -> bytes:
        check_key(key)
        await anyio.lowlevel.checkpoint()
        try:
            return self._objects[key][0]
        except KeyError:
            raise ObjectNotFoundError(f"no object {key!r}", key=key) from None

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        check_list_prefix(prefix)
        check_start_after(start_after)
        await anyio.lowlevel.checkpoint()
        keys = self._sorted
        first = bisect.bisect_left(keys, prefix)
        if start_after is not None:
            first = max(first, bisect.bisect_right(keys, start_after))
        # Keys under a prefix are one run of the sorted keys: stop at the first that is not.
        found = []
        for index in range(first, len(keys)):
            key = keys[index]
            if not key.startswith(prefix):
                break
            found.append(key)
        return found

    def content_type(self, key: str) -> str:
        """The content type ``key`` was written with."""
        try:
            return self._objects[key][1]
        except KeyError:
            raise ObjectNotFoundError(f"no object {key!r}", key=key) from None


# Temporary files live beside their target (os.link needs one filesystem) under
# a name no listing shows and no key can take: 37 bytes whatever the key, so a
# name of MAX_SEGMENT_BYTES still fits the filesystem's 255 with its temp file.
# Before, the name was ".<target>.<hex>.tmp": such leftovers stay hidden too.
TEMP_NAME = re.compile(r"\.(?:.+\.)?[0-9a-f]{32}\.tmp")


def _temp_name() -> str:
    return f".{secrets.token_hex(16)}.tmp"


# The temporary files of this process's puts that have not finished. A put runs on a
# daemon thread, which the interpreter stops where it is when it exits: what such a
# put had written is removed then (never a half-written object: it had no link yet).
# A process killed (SIGKILL, os._exit) leaves them: hidden from every listing, no
# key names them, safe to delete when no put is running.
_UNFINISHED: set[Path] = set()
_UNFINISHED_LOCK = threading.Lock()
_exiting = False
# Removing them at exit is bounded too: a stalled disk must not hold the exit.
EXIT_CLEANUP_SECONDS = 2.0


def _start_temp(temp: Path, key: str) -> None:
    with _UNFINISHED_LOCK:
        if _exiting:
            raise StoreError(f"cannot write {key!r}: the process is exiting", key=key)
        _UNFINISHED.add(temp)


def _finish_temp(temp: Path) -> None:
    temp.unlink(missing_ok=True)
    with _UNFINISHED_LOCK:
        _UNFINISHED.discard(temp)


def _unlink_all(temps: list[Path]) -> None:
    for temp in temps:
        temp.unlink(missing_ok=True)


@atexit.register
def _remove_unfinished_temps() -> None:
    global _exiting  # one flag for the whole process, set once
    with _UNFINISHED_LOCK:
        _exiting = True
        temps = list(_UNFINISHED)
    if not temps:
        return
    remover = threading.Thread(target=_unlink_all, args=(temps,), daemon=True)
    try:
        remover.start()
    except RuntimeError:
        # Python 3.12 starts no thread at interpreter shutdown: remove them here,
        # unbounded then, but an unlink is not the fsync that stalled.
        _unlink_all(temps)
        return
    remover.join(EXIT_CLEANUP_SECONDS)


class FilesystemStore:
    """A write-once store in a folder: each key is a file under ``root``.

    A put writes a temporary file, fsyncs it, then hard-links it into place:
    the link either wins or finds the key taken, and no reader ever sees half
    an object. Keys can never reach outside ``root``: a symbolic link below it
    is followed only while it stays inside (else :class:`StoreEscapeError`), and
    a listing never enters a linked folder.

    Keys are case-sensitive, as on S3. On a filesystem that is not (macOS's by
    default, Windows'), two keys that differ only in case, or in Unicode
    normalisation, name one file: a put that finds its file taken under
    another spelling raises :class:`ObjectConflictError`, whatever the bytes,
    so two keys are never silently merged.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root).resolve()

    @property
    def root(self) -> Path:
        return self._root

    def __repr__(self) -> str:
        return f"FilesystemStore({str(self._root)!r})"

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        path = self._path(key)
        # Abandoned on cancel, so a stalled disk cannot hold the step (or, on a daemon
        # thread, the process) past its bounds; the write may still land later, and the
        # turn's records only count what returned.
        # bytes() copies a bytearray (the thread must not see it change), never a bytes.
        try:
            await run_sync_abandoning(self._put_sync, path, key, bytes(body), limiter=_limiter())
        except OSError as exc:
            raise StoreError(f"cannot write {key!r} under {self._root}: {exc}", key=key) from exc

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await run_sync_abandoning(self._get_sync, path, key, limiter=_limiter())
        except OSError as exc:
            raise StoreError(f"cannot read {key!r} under {self._root}: {exc}", key=key) from exc

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        check_list_prefix(prefix)
        check_start_after(start_after)
        try:
            return await run_sync_abandoning(
                self._list_sync, prefix, start_after, limiter=_limiter()
            )
        except OSError as exc:
            raise StoreError(
                f"cannot list {prefix!r} under {self._root}: {exc}", key=prefix
            ) from exc

    def _path(self, key: str) -> Path:
        check_key(key)
        name = key.rsplit("/", 1)[-1]
        if TEMP_NAME.fullmatch(name):
            raise InvalidKeyError(f"invalid key {key!r}: the name of a temporary file", key=key)
        path = self._root.joinpath(*key.split("/"))
        return path

    def _inside_root(self, path: Path, key: str) -> None:
        # Symlinks inside the root could still point outside it. Not the key's fault:
        # what the store's folder holds, so a store error.
        if not path.resolve().is_relative_to(self._root):
            raise StoreEscapeError(
                f"{key!r} leads out of the store's root {str(self._root)!r} through a "
                "symbolic link below it: refused",
                key=key,
            )

    def _put_sync(self, path: Path, key: str, body: bytes) -> None:
        self._inside_root(path.parent, key)  # before mkdir: create nothing outside the root
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.parent / _temp_name()
        _start_temp(temp, key)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            if _exiting:  # created after the exit's cleanup looked: remove it here
                os.close(fd)
                raise StoreError(f"cannot write {key!r}: the process is exiting", key=key)
            with os.fdopen(fd, "wb") as file:
                file.write(body)
                file.flush()
                os.fsync(file.fileno())
            try:
                os.link(temp, path)
            except FileExistsError:
                self._check_taken_by_the_same_key(path, key)
                check_same_bytes(key, self._get_sync(path, key), body)
                return
        finally:
            _finish_temp(temp)
        _fsync_dir(path.parent)

    def _check_taken_by_the_same_key(self, path: Path, key: str) -> None:
        """A put found its name taken: by this very key's object, or refuse.

        Read only on this path (a retry or a conflict), never on a put that wins.
        """
        names = os.listdir(path.parent)
        if path.name not in names:
            raise ObjectConflictError(
                f"cannot write {key!r}: this filesystem ignores case or Unicode normalisation, "
                f"and the name {_spelt_like(path.name, names)!r} beside it takes its file; "
                "keys are case-sensitive",
                key=key,
            )
        self._inside_root(path, key)
        if path.is_dir():
            # As get says: no object there; and none can be, while keys sit under it.
            raise StoreError(
                f"cannot write {key!r}: no object, but a folder of other keys "
                f"({key + '/'!r}...) has its name, and on a filesystem a name is one or the other",
                key=key,
            )

    def _get_sync(self, path: Path, key: str) -> bytes:
        # Also the bytes a put compares with; a folder or a dangling name is no object.
        try:
            self._inside_root(path, key)
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFoundError(f"no object {key!r}", key=key) from None
        except IsADirectoryError:
            raise ObjectNotFoundError(
                f"no object {key!r}: a folder of other keys", key=key
            ) from None

    def _list_sync(self, prefix: str, start_after: str | None) -> builtins.list[str]:
        folder, _, _ = prefix.rpartition("/")
        start = self._root.joinpath(*folder.split("/")) if folder else self._root
        if not start.is_dir() or not start.resolve().is_relative_to(self._root):
            return []
        keys: builtins.list[str] = []
        _scan_folder(str(start), folder + "/" if folder else "", prefix, start_after, keys)
        return sorted(keys)

    async def folder_version(self, folder: str) -> tuple[int, ...] | None:
        """A value that changes whenever an object directly in ``folder`` is added or removed.

        The optional part of the store protocol (:func:`folder_version`): a reader
        that gets the same value twice skips the listing between, which on a
        filesystem reads every name of the folder. ``None`` when it cannot vouch
        for the folder now (see :func:`_folder_stat_version`).
        """
        check_list_prefix(folder)
        if folder and not folder.endswith("/"):
            return None
        path = self._root.joinpath(*folder.rstrip("/").split("/")) if folder else self._root
        return await run_sync_abandoning(_folder_stat_version, self._root, path, limiter=_limiter())


def _limiter() -> anyio.CapacityLimiter:
    # anyio's default: a folder's calls count with the process's other worker threads.
    return anyio.to_thread.current_default_thread_limiter()


def _spelt_like(name: str, names: list[str]) -> str:
    """The one of ``names`` a case- or normalisation-blind filesystem takes for ``name``."""
    wanted = unicodedata.normalize("NFD", name).casefold()
    for other in names:
        if unicodedata.normalize("NFD", other).casefold() == wanted:
            return other
    return name


def _scan_folder(
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
            _scan_folder(os.path.join(path, name), key + "/", prefix, start_after, keys)
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


def check_same_bytes(key: str, stored: bytes, body: bytes) -> None:
    """A put that found ``stored`` under ``key``: done if the same, else a conflict."""
    if stored != body:
        raise ObjectConflictError(
            f"object {key!r} already holds other bytes ({len(stored)} stored, {len(body)} "
            "offered); write-once stores never overwrite",
            key=key,
        )


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- the optional folder version (docs/protocol.md, "Listing") -------------------------


async def folder_version(store: ObjectStore, folder: str) -> object | None:
    """``store.folder_version(folder)`` if the store has one, else ``None`` (list it).

    Optional, so stores written without it keep working: a value that changes
    whenever an object directly in ``folder`` (a prefix ending in ``/``) is added or
    removed, ``None`` when the store cannot tell now. Equal values from two calls
    mean a listing of the folder's objects made after the first shows what the
    second would.
    """
    method = getattr(store, "folder_version", None)
    if method is None:
        return None
    version: object | None = await method(folder)
    return version


# A folder's time stamps tick at the filesystem's grain (a clock tick on Linux, 1 s on
# ext3 or HFS+, 2 s on FAT): an entry added in the tick of the one before can leave
# them as they were. A folder is vouched for once it has been still for longer than that.
_STILL_NANOSECONDS = 3 * 10**9


def _folder_stat_version(root: Path, path: Path) -> tuple[int, ...] | None:
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
