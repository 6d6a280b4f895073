"""A caller's misuse is a typed UsageError at the call, and nothing is read or stored for it.

docs/security.md, "A careless caller", lists each misuse. The ones shown elsewhere:
``follow()`` twice or after its block (test_turns.py), a stored turn entered again or
another task's turn resumed (test_resume.py), bad options (test_options.py), bad keys
(test_keys.py), a closed client (test_retries.py). These are the rest: a block or a
``LiveTurns`` entered twice, a turn id used twice in one step, a turn after ``end()``, a
task id that is no string, a bad key where a step names it, and batches handed to the
chunk sink out of order.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from follower import (
    AgentCardError,
    InvalidArgumentError,
    InvalidKeyError,
    LiveTurns,
    MemoryStore,
    TrajectoryState,
    TurnStateError,
    UsageError,
    following_live_trajectory,
)
from follower.lowlevel import LiveTrajectoryChunks, TrajectoryBatch

pytestmark = pytest.mark.anyio

ENDPOINT = "http://agent.test/ext/trajectory"
PREFIX = "steps/s1/"


class NoAgent:
    """A client whose agent must never be asked: every request is recorded and refused."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def client(self) -> httpx.AsyncClient:
        def refuse(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return httpx.Response(500)

        return httpx.AsyncClient(transport=httpx.MockTransport(refuse))


def turns_of(store: MemoryStore, client: httpx.AsyncClient) -> LiveTurns:
    return LiveTurns(ENDPOINT, store, PREFIX, poll_interval_seconds=1.0, client=client)


async def test_a_turns_block_is_entered_once() -> None:
    agent, store = NoAgent(), MemoryStore()
    with anyio.fail_after(10):
        async with agent.client() as client:
            block = following_live_trajectory(
                ENDPOINT, store, PREFIX, "turn-1", poll_interval_seconds=1.0, client=client
            )
            async with block:
                with pytest.raises(TurnStateError) as inside:
                    await block.__aenter__()
            with pytest.raises(TurnStateError):
                async with block:
                    raise AssertionError("the body of a second entry never runs")
    assert isinstance(inside.value, UsageError)
    assert agent.requests == []
    assert await store.list("") == []


async def test_live_turns_are_entered_once() -> None:
    agent, store = NoAgent(), MemoryStore()
    with anyio.fail_after(10):
        async with agent.client() as client:
            turns = turns_of(store, client)
            async with turns:
                with pytest.raises(TurnStateError):
                    await turns.__aenter__()
    assert agent.requests == []


async def test_a_turn_id_is_used_once_in_a_step_and_no_turn_follows_its_end() -> None:
    agent, store = NoAgent(), MemoryStore()
    with anyio.fail_after(10):
        async with agent.client() as client, turns_of(store, client) as turns:
            async with turns.following("turn-1"):
                pass
            # Not even after its block ended: a second block would write the same keys.
            with pytest.raises(TurnStateError):
                turns.following("turn-1")
            async with turns.following("turn-2"):
                pass
            await turns.end()
            with pytest.raises(TurnStateError):
                turns.following("turn-3")
    assert agent.requests == []
    assert await store.list("") == []


@pytest.mark.parametrize("task_id", ["", None, 3])
async def test_follow_in_a_turn_refuses_a_task_id_that_is_no_string(task_id: Any) -> None:
    agent, store = NoAgent(), MemoryStore()
    with anyio.fail_after(10):
        async with (
            agent.client() as client,
            following_live_trajectory(
                ENDPOINT, store, PREFIX, "turn-1", poll_interval_seconds=1.0, client=client
            ) as turn,
        ):
            with pytest.raises(InvalidArgumentError):
                turn.follow(task_id)
            turn.follow("t1")  # the refused call left the turn as it was
            turn.ended("completed")
    stored = await store.list("")
    assert f"{PREFIX}turn-1/live/end.json" in stored
    assert {r.url.path for r in agent.requests} <= {"/ext/trajectory"}
    assert all(b'"t1"' in r.content for r in agent.requests)


@pytest.mark.parametrize(
    ("prefix", "turn_id"), [("steps", "turn-1"), ("/steps/", "turn-1"), (PREFIX, "a/b")]
)
async def test_bad_keys_are_refused_where_a_step_names_them(prefix: str, turn_id: str) -> None:
    agent, store = NoAgent(), MemoryStore()
    with anyio.fail_after(10):
        async with agent.client() as client:
            with pytest.raises(InvalidKeyError):
                async with following_live_trajectory(
                    ENDPOINT, store, prefix, turn_id, poll_interval_seconds=1.0, client=client
                ):
                    raise AssertionError("the body of a refused turn never runs")
            with pytest.raises(InvalidKeyError):
                LiveTrajectoryChunks(store, prefix, turn_id, task_id="t1")
            if prefix != PREFIX:
                with pytest.raises(InvalidKeyError):
                    LiveTurns(ENDPOINT, store, prefix, poll_interval_seconds=1.0)
            else:
                async with turns_of(store, client) as turns:
                    with pytest.raises(InvalidKeyError):
                        turns.following(turn_id)
                    # The refused id was not taken: a good one is still a new turn.
                    async with turns.following("turn-1"):
                        pass
    assert agent.requests == []
    assert await store.list("") == []


def batch(after: int, events: list[int], *, last: bool = False) -> TrajectoryBatch:
    state = TrajectoryState.COMPLETED if last else TrajectoryState.RUNNING
    return TrajectoryBatch(after, after + len(events), events, None, state, last)


async def test_the_chunk_sink_takes_each_page_once_in_order_and_none_after_its_end() -> None:
    store = MemoryStore()
    sink = LiveTrajectoryChunks(store, PREFIX, "turn-1", task_id="t1")
    with anyio.fail_after(10):
        await sink(batch(0, [1, 2]))
        stored = await store.list("")
        with pytest.raises(UsageError):
            await sink(batch(0, [1, 2]))  # again
        with pytest.raises(UsageError):
            await sink(batch(3, [4]))  # a gap
        assert await store.list("") == stored
        await sink(batch(2, [3], last=True))
        await sink.end(TrajectoryState.COMPLETED)
        ended = await store.list("")
        with pytest.raises(UsageError):
            await sink(batch(3, [4]))
    assert await store.list("") == ended


def test_an_agent_without_a_live_trajectory_is_refused_at_once() -> None:
    # agent.trajectory_endpoint is None for an agent whose card has no live read:
    # refused before anything is written or sent, not a turn stored with no endpoint.
    store = MemoryStore()
    for make in (
        lambda: LiveTurns(None, store, "steps/s1/", poll_interval_seconds=1),
        lambda: following_live_trajectory(None, store, "steps/s1/", "t", poll_interval_seconds=1),
    ):
        with pytest.raises(AgentCardError, match="offers no live trajectory"):
            make()
    assert store._objects == {}
