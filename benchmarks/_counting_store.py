"""The store our followers write to in the benchmarks: when each page landed, not its bytes."""

from __future__ import annotations

import re

import anyio.lowlevel
from _measure import PageLog

from follower import ObjectExistsError, ObjectNotFoundError

_CHUNK = re.compile(r"([0-9]{8,})-([0-9]{8,})\.jsonl")


class CountingStore:
    """An ObjectStore (the library's protocol) that tells a ``PageLog`` when each chunk landed.

    Write-once like the library's stores for the marks, but chunks are only counted and
    no body is kept, so the store's own memory does not grow with the run and the RSS
    figures are the followers'.
    """

    def __init__(self, log: PageLog) -> None:
        self._log = log
        self._keys: set[str] = set()

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await anyio.lowlevel.checkpoint()
        _, turn_id, _, name = key.split("/")
        chunk = _CHUNK.fullmatch(name)
        if chunk is not None:
            self._log.page_stored(turn_id, int(chunk[1]), int(chunk[2]))
            return
        if key in self._keys:
            raise ObjectExistsError(f"object {key!r} already exists")
        self._keys.add(key)

    async def get(self, key: str) -> bytes:
        raise ObjectNotFoundError(f"bodies are not kept: {key!r}")

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        after = "" if start_after is None else start_after
        return sorted(key for key in self._keys if key.startswith(prefix) and key > after)
