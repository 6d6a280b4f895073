"""The write-once store in memory, for tests and demos."""

from __future__ import annotations

import bisect
from typing import final

import anyio.lowlevel
import attrs

from .._errors import ObjectNotFoundError
from ._keys import check_key, check_list_prefix
from ._protocol import check_same_bytes, check_start_after


@final
@attrs.define(eq=False)
class MemoryStore:
    """A write-once store in memory, for tests and demos.

    Its keys are also kept sorted, so a listing costs the keys it returns, not
    the keys the store holds.
    """

    _objects: dict[str, tuple[bytes, str]] = attrs.field(init=False, factory=dict, repr=False)
    _sorted: list[str] = attrs.field(init=False, factory=list, repr=False)

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
