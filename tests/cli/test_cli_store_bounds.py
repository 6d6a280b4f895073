"""A command's store calls: each bounded by the command, and not retried past that bound.

The command line wraps its store (`follow --store`, `tail STORE`) so that a call
with no answer within ``STORE_CALL_SECONDS`` fails: the command ends with one
line and exit 6 (docs/errors.md). A turn retries a `StoreUnavailableError` for
minutes; the command's own give-up must not be taken for one, or a store gone
silent mid-step would hold `follow` far past its documented bound.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from follower import (
    FilesystemStore,
    LiveTurns,
    MemoryStore,
    StoreError,
    StoreUnavailableError,
    TrajectoryState,
)
from follower._cli._store import STORE_CALL_SECONDS, CommandStore

from ..support.agents import ENDPOINT, ScriptedAgent
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio
ON_VIRTUAL_TIME = pytest.mark.parametrize("anyio_backend", virtual_time_backends())


class SilentChunks(MemoryStore):
    """A store that stops answering chunk puts: each one waits for ever."""

    def __init__(self) -> None:
        super().__init__()
        self.chunk_puts = 0

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        if key.endswith(".jsonl"):
            self.chunk_puts += 1
            await anyio.sleep_forever()
        await super().put(key, body, content_type=content_type)


@ON_VIRTUAL_TIME
async def test_a_call_with_no_answer_fails_as_the_commands_give_up_not_as_unavailable() -> None:
    store = CommandStore(SilentChunks(), "a store that went silent")
    started = anyio.current_time()
    with pytest.raises(StoreError) as caught:
        await store.put("k/0.jsonl", b"{}\n", content_type="application/x-ndjson")
    assert anyio.current_time() - started >= STORE_CALL_SECONDS
    assert not isinstance(caught.value, StoreUnavailableError)
    assert store.failed_puts == {"k/0.jsonl": caught.value}


@ON_VIRTUAL_TIME
async def test_a_turn_does_not_retry_a_put_the_command_gave_up_on(anyio_backend: Any) -> None:
    agent = ScriptedAgent(page_limit=2)
    agent.add_task("t1")
    agent.publish("t1", *range(6))
    agent.finish("t1", TrajectoryState.COMPLETED)
    silent = SilentChunks()
    store = CommandStore(silent, "a store that went silent")
    # A drain long enough for a turn to try again, had it taken the give-up for a
    # store unavailable for a while.
    drain_seconds = 4 * STORE_CALL_SECONDS
    with anyio.fail_after(2 * drain_seconds):
        async with (
            LiveTurns(
                ENDPOINT,
                store,
                "steps/",
                poll_interval_seconds=0.05,
                drain_seconds=drain_seconds,
                client=agent.client(),
            ) as turns,
            turns.following("turn-1") as turn,
        ):
            turn.follow("t1")
            turn.ended("completed")
    # The first chunk's put was tried once: its give-up ended the follower.
    assert silent.chunk_puts == 1
    assert turn.statistics().events_stored == 0
    assert "steps/turn-1/live/00000000-00000002.jsonl" in store.failed_puts


async def test_a_folders_version_passes_through_so_tail_can_skip_a_still_folder(
    tmp_path: Path,
) -> None:
    # Real files and threads, so real time: a folder still for a minute has a version.
    folder = tmp_path / "steps" / "turn-1" / "live"
    folder.mkdir(parents=True)
    (folder / "00000000-00000002.jsonl").write_text("1\n2\n")
    a_minute_ago = time.time() - 60
    os.utime(folder, (a_minute_ago, a_minute_ago))
    inner = FilesystemStore(tmp_path)
    store = CommandStore(inner, str(tmp_path))
    version = await store.folder_version("steps/turn-1/live/")
    assert version is not None
    assert version == await inner.folder_version("steps/turn-1/live/")
