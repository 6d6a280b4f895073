"""Who writes a turn's heartbeats: its follower between reads, or a task once it cannot.

docs/protocol.md, "The writer's heartbeat", and follower/_turns/_beats.py: a
follower of cursor reads or polls writes the beats itself, so a turn keeps no task
that only waits to beat. Once that would make a beat late (a read with no answer
a quarter interval after the beat fell due, a beat that took that long, a follower
that ended while the turn is open, a stream's follower from the start), a task of
the turn writes them. These tests run on virtual time with in-memory stores and
agents: every gap between two beats is measured on the loop's own clock.
"""

from __future__ import annotations

import itertools
import json
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import httpx
import pytest

from follower import LiveTurn, MemoryStore, TaskSource, Via, following_live_trajectory
from follower._format._layout import JSON, TaskMark, TurnKeys
from follower._options import DEFAULT_READ_TIMEOUT_SECONDS
from follower._turns._beats import LATE_INTERVALS

from ..support.agents import ENDPOINT, ScriptedAgent
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"
TURN = "turn-1"
KEYS = TurnKeys(PREFIX, TURN)
BEAT = 1.0
POLL = 0.1
# Virtual clocks add floats: a poll due at t may run at t plus a rounding error.
EPSILON = 1e-6
HEARTBEAT_TASK = f"heartbeat {TURN}"


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


class BeatClock(MemoryStore):
    """A memory store that notes when each heartbeat landed, on the loop's clock."""

    def __init__(self) -> None:
        super().__init__()
        self.beats: list[float] = []

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await super().put(key, body, content_type=content_type)
        if key.startswith(KEYS.alive):
            self.beats.append(anyio.current_time())

    def longest_gap(self, until: float) -> float:
        """The longest time without a beat, from the first beat until ``until``."""
        times = [*self.beats, until]
        return max(b - a for a, b in itertools.pairwise(times))


def beating_turn(
    client: httpx.AsyncClient,
    store: MemoryStore,
    source: str | TaskSource = ENDPOINT,
    *,
    poll: float = POLL,
    beat: float = BEAT,
    read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
) -> AbstractAsyncContextManager[LiveTurn]:
    """The turn under test: ``source`` followed every ``poll``, a beat every ``beat``."""
    return following_live_trajectory(
        source,
        store,
        PREFIX,
        TURN,
        poll_interval_seconds=poll,
        client=client,
        writer_heartbeat_seconds=beat,
        read_timeout_seconds=read_timeout_seconds,
    )


def heartbeat_task_runs() -> bool:
    return any(task.name == HEARTBEAT_TASK for task in anyio.get_running_tasks())


async def settled(agent: ScriptedAgent, reads: int) -> None:
    """Return once the agent answered ``reads`` reads and every task waits again."""
    await agent.wait_reads(reads)
    await anyio.wait_all_tasks_blocked()


async def test_a_cursor_follower_writes_the_beats_with_no_task_of_their_own() -> None:
    agent, store = ScriptedAgent(), BeatClock()
    agent.add_task("t1")  # silent: no page ever stores a chunk, only beats say it lives
    with anyio.fail_after(100):
        async with beating_turn(agent.client(), store) as turn:
            turn.follow("t1")
            await anyio.sleep(10.5 * BEAT)
            assert not heartbeat_task_runs()
            now = anyio.current_time()
            turn.ended("completed")
    assert len(store.beats) >= 10
    # Each at the first read due after it: never later than a poll past its interval.
    assert store.longest_gap(now) <= BEAT + POLL + EPSILON


async def test_a_turn_whose_follower_ended_beats_on_in_a_task_until_it_ends() -> None:
    agent, store = ScriptedAgent(), BeatClock()
    agent.add_task("t1")
    agent.publish("t1", 1, 2)
    agent.finish("t1")
    with anyio.fail_after(100):
        async with beating_turn(agent.client(), store) as turn:
            turn.follow("t1")
            await settled(agent, 1)
            stats = turn.statistics()
            assert stats.complete  # read to its end: its follower is done
            assert stats.followers_alive == 0
            # The body goes on, so the turn is open: its writer must still say it lives.
            await anyio.sleep(5.5 * BEAT)
            assert heartbeat_task_runs()
            now = anyio.current_time()
            turn.ended("completed")
        beats_at_exit = len(store.beats)
        await anyio.sleep(5 * BEAT)
    assert beats_at_exit >= 6
    assert store.longest_gap(now) <= BEAT + POLL + EPSILON
    assert len(store.beats) == beats_at_exit  # none after the block
    assert not heartbeat_task_runs()


class SlowReads(ScriptedAgent):
    """A scripted agent that holds each read ``delay`` seconds before it answers."""

    delay: float = 0.0
    given_up: int = 0  # reads the client stopped waiting for

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.delay:
            try:
                await anyio.sleep(self.delay)
            except anyio.get_cancelled_exc_class():
                self.given_up += 1
                raise
        await super().__call__(scope, receive, send)


async def test_a_read_with_no_answer_when_a_beat_is_due_is_cut_and_sent_again() -> None:
    agent, store = SlowReads(), BeatClock()
    agent.add_task("t1")
    agent.publish("t1", 1)
    beat = 10 * BEAT  # the default interval: a cut read may have waited up to 12.5 s
    # Far past a quarter interval, and within the read's own bound, but not within what is
    # left of it once the read was cut (nor that and the 5 s this in-process transport
    # adds to a bound for a pooled connection): it is sent again with the whole bound.
    slow = 10 * beat
    with anyio.fail_after(1000):
        async with beating_turn(
            agent.client(), store, beat=beat, read_timeout_seconds=slow + BEAT
        ) as turn:
            turn.follow("t1")
            await settled(agent, 1)
            assert turn.statistics().events_stored == 1
            agent.delay = slow
            agent.publish("t1", 2)
            await settled(agent, len(agent.reads) + 1)  # the next read answered: a slow one
            assert turn.statistics().events_stored == 2
            now, stats, given_up = anyio.current_time(), turn.statistics(), agent.given_up
            agent.delay = 0.0
            agent.finish("t1")
            turn.ended("completed")
    # The beat due while the read hung was written a quarter interval late at most, and
    # each after it by the task the beats went to; the read cost nothing.
    assert store.longest_gap(now) <= (1 + LATE_INTERVALS) * beat + EPSILON
    assert stats.failed_reads == 0
    # One read was cut short (then the beats were the task's), sent again, and answered.
    assert given_up == 1
    assert json.loads(await store.get(KEYS.end))["next"] == 2


class SlowBeats(BeatClock):
    """A store whose heartbeat puts take ``delay`` seconds each."""

    delay = 0.8 * BEAT  # longer than a beat may be late, within its bound

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        if key.startswith(KEYS.alive):
            await anyio.sleep(self.delay)
        await super().put(key, body, content_type=content_type)


async def test_a_slow_beat_moves_the_beats_to_a_task_and_the_reads_go_on() -> None:
    agent, store = ScriptedAgent(), SlowBeats()
    agent.add_task("t1")
    with anyio.fail_after(100):
        async with beating_turn(agent.client(), store) as turn:
            turn.follow("t1")
            await anyio.sleep(10 * BEAT)
            assert heartbeat_task_runs()
            reads = turn.statistics().reads
            turn.ended("completed")
    # The follower waited for the first beat only: then a poll each POLL, give or take.
    assert reads >= (10 * BEAT - SlowBeats.delay) / POLL - 2
    assert len(store.beats) >= 9


def polled_agent(requests: list[float]) -> httpx.AsyncClient:
    """A JSON-RPC agent (A2A 0.3) whose task ``t1`` is working, for ever."""

    async def answer(request: httpx.Request) -> httpx.Response:
        call = json.loads(request.content)
        requests.append(anyio.current_time())
        task = {"id": "t1", "contextId": "c1", "kind": "task", "status": {"state": "working"}}
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": call["id"], "result": task})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


async def test_a_polled_turn_writes_its_beats_between_polls() -> None:
    store, polls = BeatClock(), []
    source = TaskSource(Via.POLL, "http://agent.test/a2a", None)
    with anyio.fail_after(100):
        async with beating_turn(polled_agent(polls), store, source) as turn:
            turn.follow("t1")
            await anyio.sleep(10.5 * BEAT)
            assert not heartbeat_task_runs()
            now = anyio.current_time()
            turn.ended("completed")
    assert len(polls) >= 10 * BEAT / POLL
    assert len(store.beats) >= 10
    assert store.longest_gap(now) <= BEAT + POLL + EPSILON


async def test_a_poll_interval_longer_than_a_beat_may_wait_wakes_the_follower_to_beat() -> None:
    agent, store = ScriptedAgent(), BeatClock()
    agent.add_task("t1")
    with anyio.fail_after(100):
        async with beating_turn(agent.client(), store, poll=3 * BEAT) as turn:
            turn.follow("t1")
            await anyio.sleep(10.5 * BEAT)
            assert not heartbeat_task_runs()
            now = anyio.current_time()
            reads = len(agent.reads)
            turn.ended("completed")
    assert reads <= 4  # a read each poll interval, not one each beat
    assert store.longest_gap(now) <= BEAT + EPSILON


async def test_a_turn_another_run_took_writes_no_beat() -> None:
    agent, store = ScriptedAgent(), BeatClock()
    agent.add_task("t1")
    agent.publish("t1", 1)
    with anyio.fail_after(100):
        async with beating_turn(agent.client(), store) as turn:
            # Another run of the step got there first: its task.json is the turn's.
            theirs = TaskMark.started_now("t1", "http://elsewhere.test/ext/trajectory", BEAT)
            await store.put(KEYS.task, theirs.encode(), content_type=JSON)
            turn.follow("t1")
            await anyio.sleep(5.5 * BEAT)
            assert not heartbeat_task_runs()
            turn.ended("completed")
    # Whether that run lives is for its own writer to say: this one says nothing.
    assert store.beats == []
    assert await store.get(KEYS.task) == theirs.encode()
