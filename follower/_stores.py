"""Write-once object stores behind one async protocol.

Write-once means the same bytes: a put that finds its key holding the same
bytes is done (an idempotent retry), one that finds other bytes raises
:class:`~follower.ObjectConflictError` and overwrites nothing.

Stores never spawn tasks: they are awaited by the follower that owns the write,
so a cancelled step cancels its writes with it. A filesystem write cancelled in
its worker thread is abandoned there: it may still land, later, on its own.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio
import anyio.lowlevel
import anyio.to_thread

from ._errors import InvalidKeyError, ObjectConflictError, ObjectNotFoundError, StoreError
from ._keys import check_key, check_list_prefix

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

    async def list(self, prefix: str) -> list[str]:
        """The keys that start with ``prefix``, sorted."""


class MemoryStore:
    """A write-once store in memory, for tests and demos."""

    def __init__(self) -> None:
        self._objects: dict[str, tuple[bytes, str]] = {}

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        check_key(key)
        await anyio.lowlevel.checkpoint()
        body = bytes(body)
        if key in self._objects:
            check_same_bytes(key, self._objects[key][0], body)
            return
        self._objects[key] = (body, content_type)

    async def get(self, key: str) -> bytes:
        check_key(key)
        await anyio.lowlevel.checkpoint()
        try:
            return self._objects[key][0]
        except KeyError:
            raise ObjectNotFoundError(f"no object {key!r}") from None

    async def list(self, prefix: str) -> list[str]:
        check_list_prefix(prefix)
        await anyio.lowlevel.checkpoint()
        return sorted(k for k in self._objects if k.startswith(prefix))

    def content_type(self, key: str) -> str:
        """The content type ``key`` was written with."""
        try:
            return self._objects[key][1]
        except KeyError:
            raise ObjectNotFoundError(f"no object {key!r}") from None


# Temporary files live beside their target (os.link needs one filesystem) under
# a name no listing shows and no key can take.
TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{32}\.tmp")


class FilesystemStore:
    """A write-once store in a folder: each key is a file under ``root``.

    A put writes a temporary file, fsyncs it, then hard-links it into place:
    the link either wins or finds the key taken, and no reader ever sees half
    an object. Keys can never reach outside ``root``.
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
        # Abandoned on cancel, so a stalled disk cannot hold the step past its bounds;
        # the write may still land later, and the turn's records only count what returned.
        try:
            await anyio.to_thread.run_sync(
                self._put_sync, path, key, bytes(body), abandon_on_cancel=True
            )
        except OSError as exc:
            raise StoreError(f"cannot write {key!r} under {self._root}: {exc}") from exc

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await anyio.to_thread.run_sync(self._get_sync, path, key)
        except OSError as exc:
            raise StoreError(f"cannot read {key!r} under {self._root}: {exc}") from exc

    async def list(self, prefix: str) -> list[str]:
        check_list_prefix(prefix)
        try:
            return await anyio.to_thread.run_sync(self._list_sync, prefix)
        except OSError as exc:
            raise StoreError(f"cannot list {prefix!r} under {self._root}: {exc}") from exc

    def _path(self, key: str) -> Path:
        check_key(key)
        name = key.rsplit("/", 1)[-1]
        if TEMP_NAME.fullmatch(name):
            raise InvalidKeyError(f"invalid key {key!r}: the name of a temporary file")
        path = self._root.joinpath(*key.split("/"))
        return path

    def _inside_root(self, path: Path, key: str) -> None:
        # Symlinks inside the root could still point outside it.
        if not path.resolve().is_relative_to(self._root):
            raise InvalidKeyError(f"invalid key {key!r}: it resolves outside {self._root}")

    def _put_sync(self, path: Path, key: str, body: bytes) -> None:
        self._inside_root(path.parent, key)  # before mkdir: create nothing outside the root
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.parent / f".{path.name}.{secrets.token_hex(16)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(body)
                file.flush()
                os.fsync(file.fileno())
            try:
                os.link(temp, path)
            except FileExistsError:
                check_same_bytes(key, self._get_sync(path, key), body)
                return
        finally:
            temp.unlink(missing_ok=True)
        _fsync_dir(path.parent)

    def _get_sync(self, path: Path, key: str) -> bytes:
        # Also the bytes a put compares with; a folder or a dangling name is no object.
        try:
            self._inside_root(path, key)
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFoundError(f"no object {key!r}") from None

    def _list_sync(self, prefix: str) -> builtins.list[str]:
        folder, _, _ = prefix.rpartition("/")
        start = self._root.joinpath(*folder.split("/")) if folder else self._root
        if not start.is_dir() or not start.resolve().is_relative_to(self._root):
            return []
        keys = []
        for dirpath, _dirnames, filenames in os.walk(start):
            rel = Path(dirpath).relative_to(self._root).as_posix()
            base = "" if rel == "." else rel + "/"
            for name in filenames:
                key = base + name
                if key.startswith(prefix) and not TEMP_NAME.fullmatch(name):
                    keys.append(key)
        return sorted(keys)


def check_same_bytes(key: str, stored: bytes, body: bytes) -> None:
    """A put that found ``stored`` under ``key``: done if the same, else a conflict."""
    if stored != body:
        raise ObjectConflictError(
            f"object {key!r} already holds other bytes ({len(stored)} stored, {len(body)} "
            "offered); write-once stores never overwrite"
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
