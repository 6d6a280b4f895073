"""``statistics()`` of a turn and of a step's turns, and the connection lane of each follower.

The figures are checked against what the agent saw and what the store holds:
in-process on virtual time (the scripted agent), so lags are exact; the lanes
against the reference agent on a real loopback socket, on the loop's own pool.
"""

from __future__ import annotations

from typing import Any

import anyio
import attrs
import httpx
import pytest

import follower._reading._follow as _follow
from follower import (
    LiveTurns,
    LiveTurnsStatistics,
    LiveTurnStatistics,
    MemoryStore,
    TrajectoryState,
    following_live_trajectory,
)
from follower._http._clients import client_pool
from follower.testing import Fault, ReferenceAgent, TaskScript, serve_agent

from ..support.agents import ENDPOINT, Read, ScriptedAgent
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

POLL = 1.0
PREFIX = "steps/s1/"
REAL_BACKENDS = ["asyncio", "trio"]


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(autouse=True)
def backoff_at_its_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every backoff at the top of its jitter, so the times are exact (test_retries.py)."""
    monkeypatch.setattr(_follow, "backoff_fraction", lambda: 1.0)


class BusyPool(httpx.AsyncBaseTransport):
    """The scripted agent behind a pool of ours that is full for the next ``busy`` reads."""

    def __init__(self, agent: ScriptedAgent, busy: int = 0) -> None:
        self._agent = httpx.ASGITransport(app=agent)
        self.busy = busy

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.busy > 0:
            self.busy -= 1
            raise httpx.PoolTimeout("no free connection in the pool")
        return await self._agent.handle_async_request(request)


async def chunk_bytes(store: MemoryStore, turn: str) -> tuple[int, int]:
    """How many chunks a turn's folder holds, and their bytes."""
    keys = [k for k in await store.list(f"{PREFIX}{turn}/live/") if k.endswith(".jsonl")]
    return len(keys), sum([len(await store.get(k)) for k in keys])


ZERO = {
    "reads": 0,
    "failed_reads": 0,
    "pool_waits": 0,
    "pages_stored": 0,
    "events_stored": 0,
    "bytes_stored": 0,
    "followers_alive": 0,
    "lag_seconds": None,
    "complete": False,
}


def figures(stats: LiveTurnStatistics | LiveTurnsStatistics) -> dict[str, Any]:
    return {name: getattr(stats, name) for name in ZERO}


def turn_block(client: httpx.AsyncClient, store: MemoryStore) -> Any:
    return following_live_trajectory(
        ENDPOINT, store, PREFIX, "turn-1", poll_interval_seconds=POLL, client=client
    )


async def settled(agent: ScriptedAgent, reads: int) -> None:
    """Return once the agent saw ``reads`` reads and the follower is waiting for its next.

    (On asyncio, anyio polls for blocked tasks every 0.1 s: virtual time moves.)
    """
    await agent.wait_reads(reads)
    await anyio.wait_all_tasks_blocked()


def since(read: Read) -> float:
    """Seconds from when the agent saw ``read`` until now."""
    return anyio.current_time() - read.at


async def test_each_figure_of_a_turn_moves_as_its_follower_reads_and_stores() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    async with agent.client() as client:
        with anyio.fail_after(100):
            async with turn_block(client, store) as turn:
                before = turn.statistics()
                assert (before.turn_id, before.task_id) == ("turn-1", None)
                assert figures(before) == ZERO

                turn.follow("t1")
                await settled(agent, 1)  # the first page (pending, nothing more): caught up
                polling = turn.statistics()
                assert polling.task_id == "t1"
                assert (polling.reads, polling.failed_reads) == (1, 0)
                assert polling.followers_alive == 1
                assert polling.lag_seconds == pytest.approx(since(agent.reads[0]))
                assert polling.lag_seconds < POLL

                # Two 503s: the follower is no longer caught up, and its lag grows.
                agent.faults += [(503, "busy"), (503, "busy")]
                await settled(agent, 3)
                failing = turn.statistics()
                assert (failing.reads, failing.failed_reads) == (3, 2)
                assert failing.lag_seconds == pytest.approx(since(agent.reads[0]))
                assert failing.lag_seconds >= POLL + (POLL + 5)  # the poll, then a backoff

                agent.publish("t1", *range(5))
                await settled(agent, 4)
                stored = turn.statistics()
                assert (stored.pages_stored, stored.events_stored) == (1, 5)
                assert stored.bytes_stored == (await chunk_bytes(store, "turn-1"))[1]
                assert stored.lag_seconds == pytest.approx(since(agent.reads[3]))
                assert stored.lag_seconds < POLL
                assert not stored.complete

                agent.publish("t1", {"text": "x" * 100})
                agent.finish("t1", TrajectoryState.COMPLETED)
                turn.ended("completed")
            after = turn.statistics()
    pages, stored_bytes = await chunk_bytes(store, "turn-1")
    assert (after.pages_stored, after.bytes_stored) == (pages, stored_bytes) == (2, stored_bytes)
    assert after.events_stored == 6
    assert after.reads == len(agent.reads) == 5
    assert after.failed_reads == 2
    assert after.pool_waits == 0
    assert after.followers_alive == 0
    assert after.complete
    # The last page caught it up for good, and the lag stops when the follower does.
    assert after.lag_seconds == pytest.approx(0.0)


async def test_the_lag_is_none_until_caught_up_and_resets_at_each_caught_up_page() -> None:
    agent, store = ScriptedAgent(page_limit=1), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")
    agent.faults += [(503, "busy")] * 3
    async with agent.client() as client:
        with anyio.fail_after(100):
            async with turn_block(client, store) as turn:
                turn.follow("t1")
                await settled(agent, 3)
                # Only failed reads so far: never caught up, so no lag yet.
                assert turn.statistics().lag_seconds is None
                await settled(agent, 5)  # "a" (has_more), then "b" at once: caught up
                assert [r.answered for r in agent.reads] == [503, 503, 503, 200, 200]
                caught_up = turn.statistics().lag_seconds
                assert caught_up == pytest.approx(since(agent.reads[4]))
                await anyio.sleep(POLL / 4)  # virtual time passes; the next poll is not due
                assert turn.statistics().lag_seconds == pytest.approx(caught_up + POLL / 4)
                await settled(agent, 6)  # the next poll caught it up again
                assert turn.statistics().lag_seconds == pytest.approx(since(agent.reads[5]))
                assert agent.reads[5].at - agent.reads[4].at == pytest.approx(POLL)
                agent.finish("t1")


async def test_pool_waits_are_counted_apart_from_reads() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "a")
    agent.finish("t1")
    async with httpx.AsyncClient(transport=BusyPool(agent, busy=3)) as client:
        with anyio.fail_after(100):
            async with turn_block(client, store) as turn:
                turn.follow("t1")
    stats = turn.statistics()
    assert (stats.pool_waits, stats.reads, stats.failed_reads) == (3, 1, 0)
    assert (stats.events_stored, stats.complete) == (1, True)


async def test_a_read_after_stop_that_ends_following_is_a_failed_read() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "a")
    async with agent.client() as client:
        with anyio.fail_after(100):
            async with turn_block(client, store) as turn:
                turn.follow("t1")
                await settled(agent, 1)
                agent.faults.append((503, "busy"))  # the next read fails, before stop
                await settled(agent, 2)
                agent.faults.append((503, "gone"))  # and the one after stop ends following
    stats = turn.statistics()
    assert (stats.reads, stats.failed_reads) == (3, 2)
    assert (stats.events_stored, stats.complete, stats.followers_alive) == (1, False, 0)
    # Caught up at the first read, stopped at the third: the lag stops growing there.
    assert stats.lag_seconds == pytest.approx(agent.reads[2].at - agent.reads[0].at)
    assert stats.lag_seconds == pytest.approx(POLL)
    await anyio.sleep(10)
    assert turn.statistics().lag_seconds == stats.lag_seconds


async def test_a_404_is_a_failed_read() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    async with agent.client() as client:
        with anyio.fail_after(100):
            async with turn_block(client, store) as turn:
                turn.follow("unknown")
    stats = turn.statistics()
    assert (stats.reads, stats.failed_reads, stats.lag_seconds) == (1, 1, None)


async def test_a_steps_statistics_sum_its_turns_and_carry_each() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    for task, events in (("a", [1, 2]), ("b", [3])):
        agent.add_task(task)
        agent.publish(task, *events)
    agent.finish("a")
    async with agent.client() as client:
        turns = LiveTurns(ENDPOINT, store, PREFIX, poll_interval_seconds=POLL, client=client)
        with anyio.fail_after(100):
            async with turns:
                assert figures(turns.statistics()) == ZERO
                assert turns.statistics().turns == ()
                async with turns.following("turn-1") as turn:
                    turn.follow("a")
                async with turns.following("turn-2") as turn:
                    turn.follow("b")
                    await settled(agent, 2)
                    running = turns.statistics()
                    assert running.followers_alive == 1
                    assert not running.complete  # turn-2 still reads
                    agent.finish("b")
                async with turns.following("turn-3"):
                    pass  # follows no task: counted, never incomplete
    step = turns.statistics()
    one, two, three = step.turns
    assert [t.turn_id for t in step.turns] == ["turn-1", "turn-2", "turn-3"]
    assert figures(three) == ZERO
    assert (one.events_stored, two.events_stored) == (2, 1)
    for name in ("reads", "failed_reads", "pool_waits", "pages_stored"):
        assert getattr(step, name) == sum(getattr(t, name) for t in step.turns), name
    assert step.events_stored == 3
    assert step.bytes_stored == sum(
        [(await chunk_bytes(store, t))[1] for t in ("turn-1", "turn-2")]
    )
    assert step.followers_alive == 0
    assert step.complete
    assert step.lag_seconds == max(one.lag_seconds or 0, two.lag_seconds or 0)


async def test_statistics_are_frozen_values() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.finish("t1")
    async with agent.client() as client:
        turns = LiveTurns(ENDPOINT, store, PREFIX, poll_interval_seconds=POLL, client=client)
        with anyio.fail_after(100):
            async with turns, turns.following("turn-1") as turn:
                taken = turn.statistics()
                turn.follow("t1")
    assert taken.reads == 0  # taken before: the follower's reads do not change it
    assert turn.statistics().reads == 1
    for value in (taken, turns.statistics()):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            value.reads = 5  # type: ignore[misc]
    assert turns.statistics().turns == (turn.statistics(),)


# --- lanes: every follower its own connection, on the loop's pool ---------------------

CONCURRENT_TURNS = 9


async def send_message(client: httpx.AsyncClient, base: str, n: int) -> str:
    answer = await client.post(
        base,
        json={
            "jsonrpc": "2.0",
            "id": n,
            "method": "message/send",
            "params": {
                "message": {
                    "role": "user",
                    "parts": [{"kind": "text", "text": "go"}],
                    "messageId": f"m{n}",
                    "kind": "message",
                }
            },
        },
    )
    task_id: str = answer.json()["result"]["id"]
    return task_id


async def run_concurrent_turns(
    turns: LiveTurns, task_ids: list[str], until: anyio.Event | None = None
) -> None:
    """Each task in a turn of its own, all at once; each turn waits on ``until`` if given."""

    async def one(i: int, task_id: str) -> None:
        async with turns.following(f"turn-{i}") as turn:
            turn.follow(task_id)
            if until is not None:
                await until.wait()

    async with anyio.create_task_group() as tg:
        for i, task_id in enumerate(task_ids):
            tg.start_soon(one, i, task_id)


@pytest.mark.parametrize("anyio_backend", REAL_BACKENDS)
async def test_concurrent_turns_each_hold_their_own_connection() -> None:
    """Nine turns whose reads hang each hold a connection: none waits on our pool.

    A follower has at most one read in flight, so its lane is one connection: all
    nine reads reach the agent at once. With one client of four connections for
    the whole step (as before), four reads held them and the other five waited
    until ``PoolBusyError``: the agent saw four reads, the turns five pool waits.
    """
    agent, store = ReferenceAgent(script=TaskScript(events=3, interval_seconds=60)), MemoryStore()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as server:
            base = await server.start(serve_agent, agent)
            async with httpx.AsyncClient() as rpc:
                task_ids = [await send_message(rpc, base, n) for n in range(CONCURRENT_TURNS)]
            agent.fault = Fault.silent()  # every read hangs, holding its connection
            with anyio.CancelScope() as step:
                async with (
                    LiveTurns(
                        base + "ext/trajectory", store, PREFIX, poll_interval_seconds=0.05
                    ) as turns,
                    anyio.create_task_group() as body,
                ):
                    body.start_soon(run_concurrent_turns, turns, task_ids, anyio.Event())
                    # Bounded past the pool's 5 s wait, so a read queued behind
                    # another follower's would have given up as PoolBusyError.
                    with anyio.move_on_after(10):
                        await agent.wait_reads(CONCURRENT_TURNS)
                    reads_in_flight = agent.statistics().reads
                    during = turns.statistics()
                    step.cancel()
            server.cancel_scope.cancel()
    assert (reads_in_flight, during.pool_waits) == (CONCURRENT_TURNS, 0)
    assert during.followers_alive == CONCURRENT_TURNS
    after = turns.statistics()
    assert (after.followers_alive, after.pool_waits) == (0, 0)
    assert client_pool().client_count == 0


@pytest.mark.parametrize("anyio_backend", REAL_BACKENDS)
async def test_concurrent_turns_read_to_the_end_without_pool_waits() -> None:
    script = TaskScript(events=20, interval_seconds=0.01)
    agent, store = ReferenceAgent(script=script), MemoryStore()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as server:
            base = await server.start(serve_agent, agent)
            async with httpx.AsyncClient() as rpc:
                task_ids = [await send_message(rpc, base, n) for n in range(CONCURRENT_TURNS)]
            async with LiveTurns(
                base + "ext/trajectory", store, PREFIX, poll_interval_seconds=0.05
            ) as turns:
                await run_concurrent_turns(turns, task_ids)
            server.cancel_scope.cancel()
    stats = turns.statistics()
    assert len(stats.turns) == CONCURRENT_TURNS
    assert stats.pool_waits == 0
    assert stats.failed_reads == 0
    assert stats.complete
    assert all(t.events_stored == script.events for t in stats.turns)
    assert stats.reads == agent.statistics().reads
    assert client_pool().client_count == 0
