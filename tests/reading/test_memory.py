"""A follower's memory does not grow with the trajectory it follows (docs/security.md).

One follower reads 200,000 small events (200 pages of 1,000) from a canned agent
and stores them through the chunk sink into a store that keeps nothing. tracemalloc
counts the memory still held by allocations made in the library's own code (the
agent and the store are the test's, and excluded), at 20,000 events and at
200,000: nothing the follower keeps may grow with the events it has read.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import anyio
import httpx
import pytest

from follower.lowlevel import LiveTrajectoryChunks, TrajectoryBatch, follow_trajectory

pytestmark = pytest.mark.anyio

TASK = "t1"
ENDPOINT = "http://agent.test/ext/trajectory"
PAGE_EVENTS = 1000
TOTAL_EVENTS = 200_000
# Where the library's memory is first measured; tracing starts a few pages before it.
FIRST_EVENTS = 20_000
# Held by the library's own allocations at 200 k events, over what it held at 20 k: a
# follower that kept anything per event (180,000 more, at 8 bytes a reference at least)
# or a page per page (180 more; 20 are over the bound already) shows it.
GROWTH_BOUND_BYTES = 64 * 1024
# Small integers, which CPython keeps one copy of: decoding them allocates nothing per
# event, so tracing every allocation for 180,000 events stays affordable.
_EVENTS = json.dumps([i % 200 for i in range(PAGE_EVENTS)], separators=(",", ":"))


def canned_agent(request: httpx.Request) -> httpx.Response:
    """Pages of the same 1,000 small events, up to TOTAL_EVENTS, then the last page."""
    after = json.loads(request.content)["after"]
    more = after < TOTAL_EVENTS
    events = _EVENTS if more else "[]"
    nxt = after + PAGE_EVENTS if more else after
    state = "running" if more else "completed"
    body = (
        f'{{"context_id":"c","task_id":"{TASK}","state":"{state}","format":"test/v1",'
        f'"events":{events},"next":{nxt},"has_more":{"true" if more else "false"}}}'
    )
    return httpx.Response(200, content=body.encode())


class NullStore:
    """A write-once store that keeps nothing: only the follower's own memory is left."""

    def __init__(self) -> None:
        self.puts = 0

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        self.puts += 1

    async def get(self, key: str) -> bytes:
        raise AssertionError(f"nothing is read back while following: {key}")

    async def list(self, prefix: str) -> list[str]:
        return []


def _made_by(frames: tracemalloc.Traceback) -> str | None:
    """Whose code made an allocation: the innermost frame in follower/ or in tests/."""
    for frame in reversed(frames):  # oldest first: the innermost frame is the last
        if "/follower/" in frame.filename:
            return "library"
        if "/tests/" in frame.filename:
            return "test"
    return None


def library_bytes(snapshot: tracemalloc.Snapshot) -> int:
    """Bytes held by allocations made in follower/ code, not by the test's agent or store."""
    return sum(trace.size for trace in snapshot.traces if _made_by(trace.traceback) == "library")


class Measuring:
    """The chunk sink, with snapshots of the library's memory as events go by."""

    def __init__(self, sink: LiveTrajectoryChunks) -> None:
        self.sink = sink
        self.held: dict[int, int] = {}

    async def __call__(self, batch: TrajectoryBatch) -> None:
        await self.sink(batch)
        if batch.next == FIRST_EVENTS // 2:
            tracemalloc.start(6)
        elif batch.next in (FIRST_EVENTS, TOTAL_EVENTS):
            self.held[batch.next] = library_bytes(tracemalloc.take_snapshot())


async def test_a_follower_reading_200k_events_holds_no_more_memory_than_at_20k() -> None:
    store = NullStore()
    sink = Measuring(LiveTrajectoryChunks(store, "p/", "turn-1", task_id=TASK))
    try:
        with anyio.fail_after(300):
            async with httpx.AsyncClient(transport=httpx.MockTransport(canned_agent)) as client:
                outcome = await follow_trajectory(
                    ENDPOINT,
                    TASK,
                    sink,
                    poll_interval_seconds=0.01,
                    stop=anyio.Event(),
                    client=client,
                )
    finally:
        tracemalloc.stop()
    assert outcome.complete
    assert outcome.events == TOTAL_EVENTS
    assert store.puts == TOTAL_EVENTS // PAGE_EVENTS + 2  # the chunks, task.json, meta.json
    growth = sink.held[TOTAL_EVENTS] - sink.held[FIRST_EVENTS]
    assert growth < GROWTH_BOUND_BYTES, sink.held


def test_the_measure_sees_memory_the_library_keeps() -> None:
    # Not vacuous: pages kept by library code are counted. Keeping 20 of the 180 pages read
    # between the two snapshots is over the bound already.
    from follower._format._wire import Page

    body = canned_agent(
        httpx.Request("POST", ENDPOINT, content=b'{"task_id":"t1","after":0}')
    ).content
    tracemalloc.start(6)
    try:
        before = library_bytes(tracemalloc.take_snapshot())
        kept: list[Any] = [Page.from_json(body, task_id=TASK, after=0) for _ in range(20)]
        after = library_bytes(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    assert len(kept) == 20
    assert after - before > GROWTH_BOUND_BYTES
