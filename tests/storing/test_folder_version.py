"""A folder's version: a reader's idle poll of a long turn lists nothing (docs/protocol.md).

``folder_version`` is the optional part of the store protocol: a value that
changes whenever an object directly in a folder is added or removed, ``None``
when the store cannot tell. ``FilesystemStore`` offers it from the folder's
stamps, once the folder has been still for longer than a filesystem's clock
tick; the reader skips a listing when the version has not moved since the last.

The filesystem tests run in real time (worker threads) and never wait for a
folder to grow still: they set its mtime back, as a step idle for a minute.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from follower import (
    FilesystemStore,
    MemoryStore,
    ObjectStore,
    StoredEvent,
    TrajectoryState,
    read_live_trajectory,
)
from follower._format._layout import TurnKeys
from follower._stores import folder_version
from follower._storing._chunks import write_next_turn

from ..support.virtual_time import virtual_clock

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"
LIVE = f"{PREFIX}t1/live/"
JSONL = "application/jsonl"


def chunk(n: int) -> str:
    return f"{LIVE}{n:08d}-{n + 1:08d}.jsonl"


def still(store: FilesystemStore, folder: str, seconds_ago: float = 60.0) -> None:
    """Make ``folder`` look as if nothing had been written to it for ``seconds_ago``."""
    path = store.root.joinpath(*folder.strip("/").split("/"))
    then = time.time() - seconds_ago
    os.utime(path, (then, then))


async def put_chunks(store: ObjectStore, numbers: range) -> None:
    for n in numbers:
        await store.put(chunk(n), f"{n}\n".encode(), content_type=JSONL)


# --- the filesystem's version ------------------------------------------------------------


class TestFilesystemVersion:
    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> Any:
        return request.param

    async def test_a_still_folder_keeps_its_version_until_an_object_is_added(
        self, tmp_path: Path
    ) -> None:
        with anyio.fail_after(10):
            store = FilesystemStore(tmp_path)
            await put_chunks(store, range(3))
            still(store, LIVE)
            first = await store.folder_version(LIVE)
            assert first is not None
            assert await store.folder_version(LIVE) == first
            await put_chunks(store, range(3, 4))
            assert await store.folder_version(LIVE) != first
            still(store, LIVE)  # the same stamp set back as before: the ctime still moved
            assert await store.folder_version(LIVE) not in (None, first)

    async def test_a_folder_written_to_lately_is_not_vouched_for(self, tmp_path: Path) -> None:
        # Its stamps may not have ticked since the last entry: only a listing can tell.
        with anyio.fail_after(10):
            store = FilesystemStore(tmp_path)
            await put_chunks(store, range(1))
            assert await store.folder_version(LIVE) is None

    @pytest.mark.parametrize("folder", [f"{PREFIX}t2/live/", f"{LIVE}000", chunk(0) + "/"])
    async def test_no_version_where_no_folder_is(self, tmp_path: Path, folder: str) -> None:
        with anyio.fail_after(10):
            store = FilesystemStore(tmp_path)
            await put_chunks(store, range(1))
            assert await store.folder_version(folder) is None

    async def test_a_folder_through_a_link_out_of_the_root_has_no_version(
        self, tmp_path: Path
    ) -> None:
        with anyio.fail_after(10):
            outside = tmp_path / "outside"
            outside.mkdir()
            root = tmp_path / "root"
            root.mkdir()
            (root / "link").symlink_to(outside, target_is_directory=True)
            then = time.time() - 60
            os.utime(outside, (then, then))
            store = FilesystemStore(root)
            assert await store.folder_version("link/") is None


# --- the reader ---------------------------------------------------------------------------


class CountingStore:
    """Passes every call on, counting listings and folder versions; wakes on each version."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.listings = 0
        self.versions = 0
        self._asked = anyio.Event()

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await self.inner.put(key, body, content_type=content_type)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        self.listings += 1
        return await self.inner.list(prefix, start_after=start_after)

    async def folder_version(self, folder: str) -> object | None:
        version = await folder_version(self.inner, folder)
        self.versions += 1
        asked, self._asked = self._asked, anyio.Event()
        asked.set()
        return version

    async def versions_asked(self, count: int) -> None:
        """Wait until ``count`` more versions than now have been asked for."""
        target = self.versions + count
        while self.versions < target:
            await self._asked.wait()


class Reader:
    """A reader of turn t1 in a task; its events come through a stream."""

    def __init__(self, store: ObjectStore, poll: float) -> None:
        self.store, self.poll = store, poll
        self._send, self._receive = anyio.create_memory_object_stream[StoredEvent](math.inf)

    async def run(self) -> None:
        async with self._send:
            async for event in read_live_trajectory(
                self.store, PREFIX, "t1", poll_interval_seconds=self.poll
            ):
                await self._send.send(event)

    async def events(self, count: int) -> list[int]:
        return [(await self._receive.receive()).event for _ in range(count)]

    async def rest(self) -> list[int]:
        async with self._receive:
            return [event.event async for event in self._receive]


async def end_turn(store: ObjectStore, events: int) -> None:
    await store.put(
        LIVE + "end.json",
        f'{{"state":"{TrajectoryState.COMPLETED.value}","next":{events}}}'.encode(),
        content_type="application/json",
    )
    await write_next_turn(store, TurnKeys(PREFIX, "t1"), None)


class TestReaderOnFilesystem:
    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> Any:
        return request.param

    async def test_an_idle_poll_of_a_still_folder_lists_nothing(self, tmp_path: Path) -> None:
        with anyio.fail_after(20):
            inner = FilesystemStore(tmp_path)
            await put_chunks(inner, range(20))
            still(inner, LIVE)
            store = CountingStore(inner)
            reader = Reader(store, 0.01)
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run)
                assert await reader.events(20) == list(range(20))
                await store.versions_asked(2)  # the first poll after the chunks lists
                listed = store.listings
                await store.versions_asked(5)
                assert store.listings == listed  # five idle polls, no listing
                await put_chunks(store, range(20, 21))  # the folder moves: listed again
                assert await reader.events(1) == [20]
                await end_turn(store, 21)
                assert await reader.rest() == []


# --- a version that never moves -----------------------------------------------------------


class FrozenVersionStore(CountingStore):
    """A store whose folders claim one version for ever (a mount whose stamps never move)."""

    async def folder_version(self, folder: str) -> object | None:
        await super().folder_version(folder)
        return "frozen"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_version_that_never_moves_delays_a_chunk_by_a_bounded_time(backend: str) -> None:
    async def main() -> None:
        with anyio.fail_after(120):
            store = FrozenVersionStore(MemoryStore())
            await put_chunks(store, range(2))
            reader = Reader(store, 1.0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run)
                assert await reader.events(2) == [0, 1]
                await store.versions_asked(2)
                written_at = anyio.current_time()
                await put_chunks(store, range(2, 3))
                assert await reader.events(1) == [2]
                # Relisted within its bound (30 s) and one poll, though the version lied.
                assert anyio.current_time() - written_at <= 31.0 + 0.01
                await end_turn(store, 3)
                assert await reader.rest() == []

    anyio.run(main, backend=backend, backend_options=virtual_clock(backend))
