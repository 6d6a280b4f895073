"""The writer-gone rule with real writers, real time, on a filesystem and on S3 (moto).

A writer killed with SIGKILL (a subprocess, ``writer_step.py``: no cleanup, no end
mark) is reported by a reader within the bound docs/protocol.md promises; a
live writer following a task that stays silent for 10 bounds is never reported.
Both run on each backend, with the writer's heartbeat at 0.2 s so that 10 bounds
take seconds. Nothing is ordered by sleeping: the kill waits until the reader
has read a heartbeat, and the silent writer's 10 bounds are the time asserted on.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from follower import (
    FilesystemStore,
    LiveTurns,
    ObjectStore,
    StoredEvent,
    TrajectoryState,
    TurnEnd,
    WriterGoneError,
    connect_agent,
    read_live_trajectory,
)
from follower._format._layout import TurnKeys
from follower._storing._reader import WRITER_GONE_HEARTBEATS
from follower.s3 import S3Store
from follower.testing import ReferenceAgent

from ..support.s3 import new_bucket, running_s3_server, s3_client
from .writer_step import PREFIX, SILENT, TURN

pytestmark = [pytest.mark.anyio, pytest.mark.waiting]

ROOT = Path(__file__).resolve().parents[2]
KEYS = TurnKeys(PREFIX, TURN)
BEAT = 0.2
LAG = 1.0
POLL = 0.05
BOUND = WRITER_GONE_HEARTBEATS * BEAT + LAG
# docs/protocol.md: a writer that stops at K is reported by K + 3.5 beats + 2 lags + 2 polls.
PROMISED = (WRITER_GONE_HEARTBEATS + 0.5) * BEAT + 2 * LAG + 2 * POLL
# On top of the promise: the store's calls and the scheduling of a busy machine.
SLACK_SECONDS = 2.0
STORES = ["folder", "s3"]


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with running_s3_server() as url:
        yield url


@pytest.fixture(scope="module")
def s3(s3_url: str) -> Iterator[Any]:
    client = s3_client(s3_url)
    yield client
    client.close()


class NoticingStore:
    """Passes everything on; sets ``heartbeat_read`` once a heartbeat is read."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.heartbeat_read = anyio.Event()

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await self.inner.put(key, body, content_type=content_type)

    async def get(self, key: str) -> bytes:
        body = await self.inner.get(key)
        if key.startswith(KEYS.alive):
            self.heartbeat_read.set()
        return body

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        return await self.inner.list(prefix, start_after=start_after)


def store_of(kind: str, tmp_path: Path, s3_url: str, s3: Any) -> tuple[ObjectStore, list[str]]:
    """A store of ``kind``, and the arguments that name it to ``writer_step``."""
    if kind == "folder":
        folder = tmp_path / kind
        return FilesystemStore(folder), ["folder", str(folder)]
    bucket = new_bucket(s3)
    return S3Store(bucket, client=s3), ["s3", s3_url, bucket]


@asynccontextmanager
async def killable_writer(backend: str, where: list[str]) -> AsyncIterator[anyio.abc.Process]:
    """``writer_step`` running on ``backend``, once its first heartbeat is stored."""
    command = [sys.executable, "-m", "tests.storing.writer_step", backend, str(BEAT), *where]
    async with await anyio.open_process(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None
        try:
            line = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 100)
            assert line == b"ready"
            yield process
        finally:
            if process.returncode is None:
                process.kill()


@pytest.mark.parametrize("kind", STORES)
async def test_a_killed_writer_is_reported_within_the_bound(
    kind: str, anyio_backend: str, tmp_path: Path, s3_url: str, s3: Any
) -> None:
    inner, where = store_of(kind, tmp_path, s3_url, s3)
    store = NoticingStore(inner)
    reported: list[tuple[float, WriterGoneError]] = []

    async def reader() -> None:
        try:
            async for _ in read_live_trajectory(
                store, PREFIX, TURN, poll_interval_seconds=POLL, listing_lag_seconds=LAG
            ):
                pass
        except WriterGoneError as exc:
            reported.append((anyio.current_time(), exc))

    with anyio.fail_after(60):
        async with killable_writer(anyio_backend, where) as writer:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await store.heartbeat_read.wait()  # the reader watches a live writer
                assert not reported
                writer.send_signal(signal.SIGKILL)
                killed = anyio.current_time()
            assert await writer.wait() == -signal.SIGKILL
    [(at, error)] = reported
    assert at - killed <= PROMISED + SLACK_SECONDS
    assert error.silent_seconds is not None
    assert error.silent_seconds >= BOUND
    assert error.heartbeat_seconds == BEAT
    assert error.turn_id == TURN
    assert "stopped without an end mark" in str(error)


async def test_a_live_writer_on_a_silent_task_is_never_reported(
    anyio_backend: str, tmp_path: Path, s3_url: str, s3: Any
) -> None:
    silent_seconds = 10 * BOUND

    async def step_and_reader(kind: str) -> None:
        store, _ = store_of(kind, tmp_path, s3_url, s3)
        items: list[StoredEvent | TurnEnd] = []

        async def read() -> None:
            # A WriterGoneError here fails the test: it leaves the task group.
            async for item in read_live_trajectory(
                store,
                PREFIX,
                TURN,
                poll_interval_seconds=POLL,
                listing_lag_seconds=LAG,
                turn_ends=True,
            ):
                items.append(item)

        agent = ReferenceAgent(script=SILENT)
        async with (
            agent.client() as client,
            connect_agent("http://agent.test/", client=client) as a2a,
            anyio.create_task_group() as tg,
        ):
            task = await a2a.send_message("hello")
            async with (
                LiveTurns(
                    a2a.trajectory_endpoint,
                    store,
                    PREFIX,
                    poll_interval_seconds=POLL,
                    client=client,
                    drain_seconds=0.5,
                    writer_heartbeat_seconds=BEAT,
                ) as turns,
                turns.following(TURN) as turn,
            ):
                turn.follow(task.id)
                tg.start_soon(read)
                await anyio.sleep(silent_seconds)  # no event, for 10 bounds
                turn.ended("completed")
        # The reader read the turn to its end mark and the null link, and never
        # judged the writer gone.
        assert items == [TurnEnd(TURN, TrajectoryState.COMPLETED, 0, False, None)]
        beats = await store.list(KEYS.alive)
        assert len(beats) >= silent_seconds / BOUND  # it beat all along

    with anyio.fail_after(silent_seconds + 40):
        async with anyio.create_task_group() as tg:
            for kind in STORES:
                tg.start_soon(step_and_reader, kind)
