"""The stores our followers write to in the benchmarks: when each page landed, or nothing at all."""

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
        # By folder: a turn lists its own folder on entry, and a scan of every key
        # would make the start-up of N followers cost N² in the loop, measuring the store.
        self._folders: dict[str, set[str]] = {}

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await anyio.lowlevel.checkpoint()
        _, turn_id, _, name = key.split("/")
        chunk = _CHUNK.fullmatch(name)
        if chunk is not None:
            self._log.page_stored(turn_id, int(chunk[1]), int(chunk[2]))
            return
        folder = self._folders.setdefault(key.rpartition("/")[0] + "/", set())
        if key in folder:
            raise ObjectExistsError(f"object {key!r} already exists")
        folder.add(key)

    async def get(self, key: str) -> bytes:
        raise ObjectNotFoundError(f"bodies are not kept: {key!r}")

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        after = "" if start_after is None else start_after
        if prefix.endswith("/") and prefix.count("/") == 3:  # a turn's folder: its keys only
            keys = self._folders.get(prefix, set())
        else:
            keys = {key for folder in self._folders.values() for key in folder}
        return sorted(key for key in keys if key.startswith(prefix) and key > after)


class NullStore:
    """An ObjectStore that keeps nothing and lists nothing: what is left is the turns' own."""

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await anyio.lowlevel.checkpoint()

    async def get(self, key: str) -> bytes:
        raise AssertionError(f"a store that keeps nothing was asked for {key!r}")

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        await anyio.lowlevel.checkpoint()
        return []
