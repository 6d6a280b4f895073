"""A turn's writer says it lives; a reader tells a writer that stopped from a quiet task.

docs/protocol.md, "The writer's heartbeat": while a turn is open, its writer
stores ``<turn>/alive/<seq>.json`` every ``heartbeat_seconds`` (named in
``task.json``); a reader raises :class:`WriterGoneError` when a turn without an
end mark shows no new heartbeat (nor chunk) for 3 intervals plus the listing
lag, on the reader's own clock. These tests run on virtual time with in-memory
stores: the bound is exact there. tests/storing/test_writer_gone_real.py kills a
real writer, on a filesystem and on S3.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from follower import (
    CorruptObjectError,
    MemoryStore,
    ObjectStore,
    ReaderIdleError,
    StoredEvent,
    StoreUnavailableError,
    TrajectoryState,
    WriterGoneError,
    following_live_trajectory,
    read_live_trajectory,
)
from follower._format._layout import HeartbeatMark, TaskMark, TurnKeys
from follower._storing._chunks import write_next_turn
from follower._storing._reader import WRITER_GONE_HEARTBEATS
from follower.lowlevel import LiveTrajectoryChunks, TrajectoryBatch

from ..support.agents import ENDPOINT, ScriptedAgent
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"
TURN = "turn-1"
KEYS = TurnKeys(PREFIX, TURN)
BEAT = 1.0
LAG = 2.0
POLL = 0.1
BOUND = WRITER_GONE_HEARTBEATS * BEAT + LAG
JSON = "application/json"
# Virtual clocks add floats: a poll due at t may run at t plus a rounding error.
EPSILON = 1e-6


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


async def heartbeats(store: ObjectStore) -> list[dict[str, Any]]:
    return [json.loads(await store.get(key)) for key in await store.list(KEYS.alive)]


class ListingStore(MemoryStore):
    """A memory store that notes the prefix of every listing."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[str] = []

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        self.listed.append(prefix)
        return await super().list(prefix, start_after=start_after)


# --- the writer ------------------------------------------------------------------------


async def test_a_turn_beats_while_it_is_open_and_never_after() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")  # a task that stays silent
    with anyio.fail_after(100):
        async with following_live_trajectory(
            ENDPOINT,
            store,
            PREFIX,
            TURN,
            poll_interval_seconds=POLL,
            client=agent.client(),
            writer_heartbeat_seconds=BEAT,
        ) as turn:
            turn.follow("t1")
            await anyio.sleep(10.5 * BEAT)
            beats = await heartbeats(store)
            turn.ended("completed")
        after_exit = await heartbeats(store)
        await anyio.sleep(10 * BEAT)
    # One at once, then one each interval: never a gap longer than the interval.
    assert [beat["seq"] for beat in beats] == list(range(len(beats)))
    assert len(beats) >= 10
    assert all(beat["heartbeat_seconds"] == BEAT and beat["at"].endswith("Z") for beat in beats)
    assert await heartbeats(store) == after_exit  # none after the block
    task = json.loads(await store.get(KEYS.task))
    assert task["heartbeat_seconds"] == BEAT
    # The turn's own folder holds what it always held: heartbeats are beside it.
    assert all(not key.startswith(KEYS.live + "alive") for key in await store.list(KEYS.live))


async def test_task_json_is_stored_at_once_for_a_silent_task() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    with anyio.fail_after(100):
        async with following_live_trajectory(
            ENDPOINT, store, PREFIX, TURN, poll_interval_seconds=POLL, client=agent.client()
        ) as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            # Before any page: a reader knows whose turn it is, and what to judge it by.
            task = TaskMark.decode(await store.get(KEYS.task), KEYS.task)
            assert task.task_id == "t1"
            assert task.heartbeat_seconds == 10.0  # the default
            turn.ended("completed")


class SlowHeartbeats(MemoryStore):
    """A store whose heartbeat puts take half a second each."""

    def __init__(self) -> None:
        super().__init__()
        self.beat_in_flight = anyio.Event()

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        if key.startswith(KEYS.alive):
            self.beat_in_flight.set()
            await anyio.sleep(0.5)
        await super().put(key, body, content_type=content_type)


async def test_a_turn_that_ends_waits_for_its_beat_in_flight() -> None:
    # A put cancelled in a folder's worker thread still lands, after the block: a turn
    # that ends normally lets its beat in flight land instead, and starts no other.
    agent, store = ScriptedAgent(), SlowHeartbeats()
    agent.add_task("t1")
    agent.publish("t1", 1)
    agent.finish("t1")
    with anyio.fail_after(100):
        async with following_live_trajectory(
            ENDPOINT,
            store,
            PREFIX,
            TURN,
            poll_interval_seconds=POLL,
            client=agent.client(),
            writer_heartbeat_seconds=BEAT,
        ) as turn:
            turn.follow("t1")
            await store.beat_in_flight.wait()
            turn.ended("completed")
        assert [beat["seq"] for beat in await heartbeats(store)] == [0]
        await anyio.sleep(10 * BEAT)
    assert [beat["seq"] for beat in await heartbeats(store)] == [0]
    assert json.loads(await store.get(KEYS.end))["complete"] is True


class RefusingHeartbeats(MemoryStore):
    """A store whose heartbeat puts fail, or hang."""

    def __init__(self, *, hang: bool) -> None:
        super().__init__()
        self.hang = hang
        self.refused = 0

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        if key.startswith(KEYS.alive):
            self.refused += 1
            if self.hang:
                await anyio.sleep_forever()
            raise StoreUnavailableError("heartbeats refused", key=key)
        await super().put(key, body, content_type=content_type)


@pytest.mark.parametrize("hang", [False, True], ids=["fail", "hang"])
async def test_heartbeats_that_fail_cost_the_step_nothing(
    hang: bool, caplog: pytest.LogCaptureFixture
) -> None:
    agent, store = ScriptedAgent(), RefusingHeartbeats(hang=hang)
    agent.add_task("t1")
    agent.publish("t1", 1, 2)
    with anyio.fail_after(100):
        async with following_live_trajectory(
            ENDPOINT,
            store,
            PREFIX,
            TURN,
            poll_interval_seconds=POLL,
            client=agent.client(),
            writer_heartbeat_seconds=BEAT,
        ) as turn:
            turn.follow("t1")
            await anyio.sleep(5 * BEAT)
            agent.publish("t1", 3)
            agent.finish("t1")
            turn.ended("completed")
            body_end = anyio.current_time()
        # The drain waits for the beat in flight, within that beat's own bound (one
        # interval): no new beat starts once the body has ended.
        assert anyio.current_time() - body_end <= BEAT + EPSILON
    assert store.refused >= 5  # each beat is tried, however the one before went
    assert json.loads(await store.get(KEYS.end)) == {
        "state": "completed",
        "next": 3,
        "complete": True,
    }
    warnings = [r for r in caplog.records if "heartbeat" in r.getMessage()]
    assert len(warnings) <= 1  # a run of failures is one line, not one a beat


async def test_a_resumed_turn_beats_on_after_the_stored_heartbeats() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    for seq in range(3):
        body = HeartbeatMark(seq, "2026-01-01T00:00:00Z", 5.0).encode()
        await store.put(KEYS.heartbeat(seq), body, content_type=JSON)
    await store.put(
        KEYS.task, TaskMark("t1", ENDPOINT, "2026-01-01T00:00:00Z", 5.0).encode(), content_type=JSON
    )
    with anyio.fail_after(100):
        async with following_live_trajectory(
            ENDPOINT,
            store,
            PREFIX,
            TURN,
            poll_interval_seconds=POLL,
            client=agent.client(),
            writer_heartbeat_seconds=BEAT,
            resume=True,
        ) as turn:
            turn.follow("t1")
            await anyio.sleep(2.5 * BEAT)
            turn.hand_off()
    beats = await heartbeats(store)
    assert [beat["seq"] for beat in beats] == list(range(len(beats)))
    assert len(beats) >= 5
    assert {beat["heartbeat_seconds"] for beat in beats[3:]} == {BEAT}


# --- the reader ------------------------------------------------------------------------


async def start_turn(store: ObjectStore, *, heartbeat_seconds: float | None = BEAT) -> None:
    """A turn's task.json (naming the interval, unless None) and two events."""
    sink = LiveTrajectoryChunks(
        store, PREFIX, TURN, task_id="t1", endpoint=ENDPOINT, heartbeat_seconds=heartbeat_seconds
    )
    await sink(
        TrajectoryBatch(
            after=0, next=2, events=(1, 2), format=None, state=TrajectoryState.RUNNING, last=False
        )
    )


async def beat(store: ObjectStore, seq: int, at: str = "2026-01-01T00:00:00Z") -> None:
    await store.put(KEYS.heartbeat(seq), HeartbeatMark(seq, at, BEAT).encode(), content_type=JSON)


async def beat_for(store: ObjectStore, seconds: float, *, first: int = 0) -> int:
    """Beat every ``BEAT`` for ``seconds``, as a writer does; the next sequence number."""
    seq = first
    # A writer's clock may be anywhere: the reader must never look at it.
    skewed = ["1970-01-01T00:00:00Z", "2999-12-31T23:59:59Z"]
    deadline = anyio.current_time() + seconds
    while anyio.current_time() < deadline:
        await beat(store, seq, skewed[seq % 2])
        seq += 1
        await anyio.sleep(BEAT)
    return seq


async def read(store: ObjectStore, got: list[StoredEvent]) -> None:
    async for event in read_live_trajectory(
        store, PREFIX, TURN, poll_interval_seconds=POLL, listing_lag_seconds=LAG
    ):
        got.append(event)


async def test_a_writer_that_stops_without_an_end_mark_is_reported_within_the_bound() -> None:
    store = MemoryStore()
    await start_turn(store)
    got: list[StoredEvent] = []
    reported: list[tuple[float, WriterGoneError]] = []

    async def reader() -> None:
        try:
            await read(store, got)
        except WriterGoneError as exc:
            reported.append((anyio.current_time(), exc))

    with anyio.fail_after(1000):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await beat_for(store, 20 * BEAT)
            stopped = anyio.current_time()  # the last beat landed one interval ago
    assert [event.event for event in got] == [1, 2]
    [(at, error)] = reported
    # Never before the bound has passed since the last beat landed; and by then, plus
    # the half interval the reader may take to see it, and a poll each to see and to judge.
    last_beat = stopped - BEAT
    assert last_beat + BOUND <= at <= last_beat + BEAT / 2 + BOUND + 2 * POLL + EPSILON
    assert error.heartbeat_seconds == BEAT
    assert error.silent_seconds is not None
    assert error.silent_seconds >= BOUND
    assert error.turn_id == TURN
    assert error.key == KEYS.alive
    assert "stopped without an end mark" in str(error)


async def test_a_live_writer_of_a_silent_task_is_never_reported() -> None:
    store = ListingStore()
    await start_turn(store)
    got: list[StoredEvent] = []
    with anyio.fail_after(1000):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read, store, got)
            seq = await beat_for(store, 10 * BOUND)  # silent for 10 bounds, but beating
            # The reader looks for heartbeats about twice an interval, not at every poll.
            assert store.listed.count(KEYS.alive) <= 2 * 10 * BOUND / BEAT + 2
            await LiveTrajectoryChunks(store, PREFIX, TURN, stored_next=2).end(
                TrajectoryState.COMPLETED
            )
            await write_next_turn(store, KEYS, None)
            await beat(store, seq)  # a beat after the end mark is never judged either
    assert [event.event for event in got] == [1, 2]  # and the reader ended at the null link


async def test_new_chunks_are_a_sign_of_life_too() -> None:
    store = MemoryStore()
    await start_turn(store)
    got: list[StoredEvent] = []
    with anyio.fail_after(1000):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read, store, got)
            sink = LiveTrajectoryChunks(store, PREFIX, TURN, stored_next=2)
            for n in range(2, 30):  # no heartbeat, but a chunk each interval
                await anyio.sleep(BEAT)
                await sink(
                    TrajectoryBatch(
                        after=n,
                        next=n + 1,
                        events=(n + 1,),
                        format=None,
                        state=TrajectoryState.RUNNING,
                        last=False,
                    )
                )
            await sink.end(TrajectoryState.COMPLETED)
            await write_next_turn(store, KEYS, None)
    assert [event.event for event in got] == list(range(1, 31))


async def test_a_turn_stored_before_heartbeats_reads_as_before() -> None:
    store = ListingStore()
    await start_turn(store, heartbeat_seconds=None)
    with anyio.fail_after(1000):
        got: list[StoredEvent] = []
        with pytest.raises(ReaderIdleError):
            async for event in read_live_trajectory(
                store, PREFIX, TURN, poll_interval_seconds=POLL, idle_timeout_seconds=100 * BOUND
            ):
                got.append(event)
    assert [event.event for event in got] == [1, 2]
    assert KEYS.alive not in store.listed  # no rule, and not a listing more


async def test_an_ended_turn_is_never_judged() -> None:
    store = MemoryStore()
    await start_turn(store)
    await beat(store, 0)
    await LiveTrajectoryChunks(store, PREFIX, TURN, stored_next=2).end(TrajectoryState.COMPLETED)
    # Its writer is gone, as it should be: the step between turns is another matter.
    with anyio.fail_after(1000), pytest.raises(ReaderIdleError):
        async for _ in read_live_trajectory(
            store, PREFIX, TURN, poll_interval_seconds=POLL, idle_timeout_seconds=10 * BOUND
        ):
            pass


async def test_a_reader_that_starts_late_judges_from_what_it_saw() -> None:
    store = MemoryStore()
    await start_turn(store)
    await beat(store, 0)
    await anyio.sleep(1000 * BOUND)  # the writer died long before the reader came
    started = anyio.current_time()
    with anyio.fail_after(1000), pytest.raises(WriterGoneError):
        await read(store, [])
    assert BOUND <= anyio.current_time() - started <= BOUND + 2 * POLL + EPSILON


@pytest.mark.parametrize(
    ("where", "body"),
    [
        pytest.param("heartbeat", b"[]", id="heartbeat-a-list"),
        pytest.param("heartbeat", b'{"seq":0,"at":"x","heartbeat_seconds":0}', id="zero-seconds"),
        pytest.param("heartbeat", b'{"seq":0,"at":"x"}', id="no-seconds"),
        pytest.param("heartbeat", b'{"seq":-1,"at":"x","heartbeat_seconds":1}', id="bad-seq"),
        pytest.param(
            "task",
            b'{"task_id":"t1","endpoint":"","started_at":"x","heartbeat_seconds":"10"}',
            id="task-seconds-a-string",
        ),
        pytest.param(
            "task",
            b'{"task_id":"t1","endpoint":"","started_at":"x","heartbeat_seconds":true}',
            id="task-seconds-a-boolean",
        ),
    ],
)
async def test_a_heartbeat_or_interval_of_the_wrong_shape_is_corrupt(
    where: str, body: bytes
) -> None:
    store = MemoryStore()
    if where == "task":
        await store.put(KEYS.task, body, content_type=JSON)
        key = KEYS.task
    else:
        await start_turn(store)
        await store.put(KEYS.heartbeat(0), body, content_type=JSON)
        key = KEYS.heartbeat(0)
    with anyio.fail_after(1000), pytest.raises(CorruptObjectError, match=repr(key)):
        await read(store, [])
