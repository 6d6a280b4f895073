"""The object store protocol, and the rules every store of the library keeps.

Write-once means the same bytes: a put that finds its key holding the same
bytes is done (an idempotent retry), one that finds other bytes raises
:class:`~follower.ObjectConflictError` and overwrites nothing.

Stores never spawn tasks: they are awaited by the follower that owns the write,
so a cancelled step cancels its writes with it.

Besides the protocol, the two ways the library calls a store that may be older
than it: :func:`list_keys` (a ``list`` without ``start_after``) and
:func:`folder_version` (an optional method).
"""

from __future__ import annotations

import inspect
import weakref
from typing import Protocol, runtime_checkable

from .._errors import InvalidArgumentError, ObjectConflictError


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


def check_same_bytes(key: str, stored: bytes, body: bytes) -> None:
    """A put that found ``stored`` under ``key``: done if the same, else a conflict."""
    if stored != body:
        raise ObjectConflictError(
            f"object {key!r} already holds other bytes ({len(stored)} stored, {len(body)} "
            "offered); write-once stores never overwrite",
            key=key,
        )


def check_start_after(start_after: str | None) -> None:
    """A listing's ``start_after`` is a string (any: it need not be a key) or ``None``."""
    if start_after is not None and not isinstance(start_after, str):
        raise InvalidArgumentError(
            f"start_after must be a str or None, not {type(start_after).__name__}"
        )


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
