"""A store that is unavailable for a while (throttled, 5xx, unreachable) loses nothing of a turn.

A put that raises ``StoreUnavailableError`` is tried again while the step runs,
with the agents' backoff, for at most ``STORE_RETRY_SECONDS`` from its first
failure, before the next chunk: chunks land in order, each once, and the end mark
says the turn is complete. (A burst of 3 ``SlowDown`` answers used to end a turn's
storage for good: 28 of 60 events stored; 12 of them, none.)

The store behind the failures is a real one: a ``MemoryStore`` on virtual time
(exact times, no worker threads), a ``FilesystemStore`` and moto's S3 server on
real time, with the backoff's floor made short and its jitter pinned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from follower import (
    FilesystemStore,
    LiveTurns,
    MemoryStore,
    ObjectStore,
    StoreUnavailableError,
    TrajectoryState,
    _retries,
)
from follower.s3 import S3Store

from ..support.agents import ENDPOINT, ScriptedAgent
from ..support.stored import stored_turn
from ..support.virtual_time import virtual_time_backends
from .test_s3_store import S3Server, new_bucket, running_s3_server

pytestmark = [pytest.mark.anyio, pytest.mark.waiting]

PREFIX = "steps/s1/"
EVENTS = 60
PAGE = 2
POLL = 0.05
ON_VIRTUAL_TIME = pytest.mark.parametrize("anyio_backend", virtual_time_backends())


def is_chunk(key: str) -> bool:
    return key.endswith(".jsonl")


class UnavailableFor:
    """A real store behind a flaky front: some of its puts raise ``StoreUnavailableError``.

    ``failures`` puts fail from the ``after``-th put that ``which`` picks (counting
    from 0) on, a failure for good if ``failures`` is None. ``landed``: a failing
    put reaches the store before it fails (the answer lost on its way back), so the
    retry finds its own bytes there. ``attempts`` stamps every put that ``which``
    picks with the clock and whether it failed.
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        failures: int | None,
        after: int = 0,
        landed: bool = False,
        which: Callable[[str], bool] = is_chunk,
    ) -> None:
        self.inner = inner
        self.failures = failures
        self.after = after
        self.landed = landed
        self.which = which
        self.attempts: list[tuple[str, float, bool]] = []

    def failing(self, n: int) -> bool:
        return n >= self.after and (self.failures is None or n < self.after + self.failures)

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        if self.which(key):
            fails = self.failing(len(self.attempts))
            self.attempts.append((key, anyio.current_time(), fails))
            if fails:
                if self.landed:
                    await self.inner.put(key, body, content_type=content_type)
                raise StoreUnavailableError(
                    f"cannot put {key!r}: SlowDown (503), injected by the test", key=key
                )
        await self.inner.put(key, body, content_type=content_type)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        return await self.inner.list(prefix, start_after=start_after)

    @property
    def failed(self) -> int:
        return sum(fails for _, _, fails in self.attempts)


def agent_with_events() -> ScriptedAgent:
    agent = ScriptedAgent(page_limit=PAGE)
    agent.add_task("t1")
    agent.publish("t1", *range(EVENTS))
    agent.finish("t1", TrajectoryState.COMPLETED)
    return agent


async def run_step(
    agent: ScriptedAgent,
    store: ObjectStore,
    *,
    drain_seconds: float = 60.0,
    until_done: bool = True,
) -> None:
    """A one-turn step that runs until its follower is done (or returns at once)."""
    async with (
        LiveTurns(
            ENDPOINT,
            store,
            PREFIX,
            poll_interval_seconds=POLL,
            drain_seconds=drain_seconds,
            client=agent.client(),
        ) as turns,
        turns.following("turn-1") as turn,
    ):
        turn.follow("t1")
        while until_done:
            stats = turn.statistics()
            # Done: it stored the last page, or it ended (having read: it started).
            if stats.complete or (stats.reads and not stats.followers_alive):
                break
            await anyio.sleep(POLL)
        turn.ended("completed")


async def assert_stored_once_and_complete(store: ObjectStore) -> None:
    turn = await stored_turn(store, PREFIX, "turn-1")
    # Contiguous from 0 (the oracle checks it), so no event is stored twice.
    assert turn.chunks == [(n, n + PAGE) for n in range(0, EVENTS, PAGE)]
    assert turn.events == list(range(EVENTS))
    assert turn.end == {"state": "completed", "next": EVENTS, "complete": True}


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real time: retried after 10 ms, not a second or more."""
    monkeypatch.setattr(_retries, "STORE_RETRY_FLOOR_SECONDS", 0.01)
    monkeypatch.setattr(_retries, "backoff_fraction", lambda: 0.0)


# --- on virtual time, in memory ---------------------------------------------------------


@ON_VIRTUAL_TIME
@pytest.mark.parametrize("landed", [False, True], ids=["lost", "landed-answer-lost"])
@pytest.mark.parametrize("failures", [3, 12])
async def test_a_store_unavailable_for_a_while_stores_every_event_once(
    failures: int, landed: bool
) -> None:
    # A few chunks in (4 of 30 stored), the next puts fail, then the store is healthy.
    store = UnavailableFor(MemoryStore(), failures=failures, after=4, landed=landed)
    with anyio.fail_after(10_000):
        await run_step(agent_with_events(), store)
    assert store.failed == failures
    await assert_stored_once_and_complete(store)
    # Retried in place, in order: the chunk that failed is tried again until it lands,
    # and only then the next.
    keys = [key for key, _, _ in store.attempts]
    chunks = sorted(set(keys))
    assert len(chunks) == EVENTS // PAGE
    assert keys == chunks[:4] + [chunks[4]] * (failures + 1) + chunks[5:]


@ON_VIRTUAL_TIME
async def test_a_store_outage_is_one_warning_and_one_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="follower")
    store = UnavailableFor(MemoryStore(), failures=12, after=4)
    with anyio.fail_after(10_000):
        await run_step(agent_with_events(), store)
    loud = [
        r for r in caplog.records if r.name.startswith("follower") and r.levelno > logging.DEBUG
    ]
    messages = [r.getMessage() for r in loud]
    assert len(loud) == 2, messages
    assert loud[0].name == "follower.chunks"
    assert "puts of turn turn-1 are failing (StoreUnavailableError)" in messages[0]
    assert "recovered after 12 failed puts" in messages[1]
    assert (loud[1].failed_puts, loud[1].turn_id, loud[1].task_id) == (12, "turn-1", "t1")


@ON_VIRTUAL_TIME
async def test_a_put_is_retried_for_at_most_its_bound_then_the_turn_is_marked_incomplete() -> None:
    store = UnavailableFor(MemoryStore(), failures=None, after=4)
    with anyio.fail_after(10_000):
        await run_step(agent_with_events(), store)
    failed = [at for _, at, fails in store.attempts if fails]
    assert len(failed) > 2  # retried ...
    assert failed[-1] - failed[0] <= _retries.STORE_RETRY_SECONDS  # ... within its bound
    assert {key for key, _, fails in store.attempts if fails} == {store.attempts[4][0]}
    turn = await stored_turn(store, PREFIX, "turn-1")
    assert turn.events == list(range(4 * PAGE))
    assert turn.end == {"state": "completed", "next": 4 * PAGE, "complete": False}


@ON_VIRTUAL_TIME
async def test_retries_end_with_the_drain_and_the_turn_is_still_marked() -> None:
    # The step returns at once; the store fails every chunk from the fifth for good.
    # Retries go on in the drain, no longer, and the end mark (not a chunk) lands.
    store = UnavailableFor(MemoryStore(), failures=None, after=4)
    drain = 5.0
    with anyio.fail_after(10_000):
        started = anyio.current_time()
        await run_step(agent_with_events(), store, drain_seconds=drain, until_done=False)
        took = anyio.current_time() - started
    assert took <= drain + 1.0
    assert store.failed >= 1
    turn = await stored_turn(store, PREFIX, "turn-1")
    assert turn.end == {"state": "completed", "next": 4 * PAGE, "complete": False}


@ON_VIRTUAL_TIME
async def test_an_end_mark_put_that_finds_the_store_unavailable_is_retried_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The longest waits the jitter draws: two retries still fit the 5 s of a cleanup write.
    monkeypatch.setattr(_retries, "backoff_fraction", lambda: 1.0)
    store = UnavailableFor(MemoryStore(), failures=2, which=lambda key: key.endswith("end.json"))
    with anyio.fail_after(10_000):
        await run_step(agent_with_events(), store)
    assert store.failed == 2
    await assert_stored_once_and_complete(store)


# --- on real time: a folder, and S3 -----------------------------------------------------


@pytest.mark.usefixtures("fast_backoff")
@pytest.mark.parametrize("failures", [3, 12])
async def test_a_folder_store_unavailable_for_a_while_stores_every_event_once(
    tmp_path: Path, failures: int
) -> None:
    store = UnavailableFor(FilesystemStore(tmp_path), failures=failures, after=4)
    with anyio.fail_after(30):
        await run_step(agent_with_events(), store)
    assert store.failed == failures
    await assert_stored_once_and_complete(FilesystemStore(tmp_path))


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    with running_s3_server() as server:
        yield server


class ThrottledAfter:
    """An S3 store whose server throttles a burst of puts once ``key`` has landed."""

    def __init__(self, inner: S3Store, key: str, burst: Callable[[], None]) -> None:
        self.inner = inner
        self.key = key
        self.burst = burst

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await self.inner.put(key, body, content_type=content_type)
        if key.endswith(self.key):
            self.burst()

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        return await self.inner.list(prefix, start_after=start_after)


@pytest.mark.usefixtures("fast_backoff")
@pytest.mark.parametrize("slowdowns", [3, 12])
async def test_a_throttling_burst_in_s3_stores_every_event_once(
    s3_server: S3Server, slowdowns: int
) -> None:
    # The store's own client settings (botocore's standard retries, 3 attempts a put):
    # 3 SlowDown answers are one failed put, 12 are four.
    client = s3_server.client(retries={"mode": "standard", "total_max_attempts": 3})
    s3_server.faults.clear()
    bucket = new_bucket(client)
    agent = ScriptedAgent(page_limit=PAGE)
    agent.add_task("t1")
    agent.publish("t1", *range(8))

    def burst() -> None:
        # Four chunks in, S3 throttles the next puts; the rest of the task follows.
        s3_server.faults = [(503, "SlowDown")] * slowdowns
        agent.publish("t1", *range(8, EVENTS))
        agent.finish("t1", TrajectoryState.COMPLETED)

    store = S3Store(bucket, client=client)
    try:
        with anyio.fail_after(60):
            await run_step(agent, ThrottledAfter(store, "00000006-00000008.jsonl", burst))
        assert s3_server.faults == []  # every SlowDown was answered
        await assert_stored_once_and_complete(store)
    finally:
        s3_server.faults.clear()
        client.close()
