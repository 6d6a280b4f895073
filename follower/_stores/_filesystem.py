"""The write-once store in a folder: each key a file, linked into place once written.

A filesystem call runs in a worker thread and is abandoned there on cancel: a
write may still land, later, on its own. Those threads are daemon threads the
library owns (``_threads``): an abandoned call never holds the process at exit.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, final

import anyio
import anyio.to_thread
import attrs

from .._errors import (
    InvalidKeyError,
    ObjectConflictError,
    ObjectNotFoundError,
    StoreError,
    StoreEscapeError,
)
from .._threads import run_sync_abandoning
from ._keys import check_key, check_list_prefix
from ._listing import folder_stat_version, scan_folder
from ._protocol import check_same_bytes, check_start_after
from ._temps import TEMP_NAME, check_not_exiting, finish_temp, start_temp, temp_name

if TYPE_CHECKING:
    import builtins


def _resolved(root: str | os.PathLike[str]) -> Path:
    return Path(root).resolve()


# The root is resolved once, at construction (no hook on assignments).
@final
@attrs.define(eq=False, on_setattr=attrs.setters.NO_OP)
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

    _root: Path = attrs.field(converter=_resolved)

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
        temp = path.parent / temp_name()
        start_temp(temp, key)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as file:
                # Created after the exit's cleanup looked? Then removed here (finally).
                check_not_exiting(key)
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
            finish_temp(temp)
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
        scan_folder(str(start), folder + "/" if folder else "", prefix, start_after, keys)
        return sorted(keys)

    async def folder_version(self, folder: str) -> tuple[int, ...] | None:
        """A value that changes whenever an object directly in ``folder`` is added or removed.

        The optional part of the store protocol (:func:`folder_version`): a reader
        that gets the same value twice skips the listing between, which on a
        filesystem reads every name of the folder. ``None`` when it cannot vouch
        for the folder now (see :func:`folder_stat_version`).
        """
        check_list_prefix(folder)
        if folder and not folder.endswith("/"):
            return None
        path = self._root.joinpath(*folder.rstrip("/").split("/")) if folder else self._root
        return await run_sync_abandoning(folder_stat_version, self._root, path, limiter=_limiter())


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
