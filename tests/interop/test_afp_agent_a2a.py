"""The library's whole-turn helpers (``connect_agent``, ``run_a2a_turn``) against the
framework's agent: they find its card, send the message, follow the task, wait for it,
and, when the step is cancelled, cancel the agent's task in their cleanup."""

from __future__ import annotations

import json

import anyio
import pytest

import follower
from follower import LiveTurns

from ..support.stored import stored_turn
from .conftest import RunningAgent
from .helpers import POLL, PREFIX, TEST_SECONDS, Agent, WatchedStore

# As test_afp_agent.py: the session's framework agent is started in one process only.
pytestmark = [pytest.mark.anyio, pytest.mark.waiting]


async def test_a_whole_turn_runs_to_completion(afp_agent: RunningAgent) -> None:
    store = WatchedStore()
    script = json.dumps({"events": 12, "interval": 0.02})
    with anyio.fail_after(TEST_SECONDS):
        async with follower.connect_agent(afp_agent.url) as agent:
            assert agent.trajectory_endpoint == afp_agent.url + "/ext/trajectory"
            async with LiveTurns(
                agent.trajectory_endpoint, store, PREFIX, poll_interval_seconds=POLL
            ) as turns:
                task = await follower.run_a2a_turn(
                    agent, turns, "turn-1", script, task_poll_seconds=0.05
                )
        async with Agent.client(afp_agent) as reference:
            served = await reference.served(task.id)
        stored = await stored_turn(store, PREFIX, "turn-1")
    assert task.state == "completed"
    assert served.state == "completed"
    assert len(served.events) == 12
    assert stored.events == served.events
    assert stored.end == {"state": "completed", "next": 12, "complete": True}
    assert stored.next_turn == {"turn": None}


async def test_a_cancelled_whole_turn_cancels_the_agents_task(afp_agent: RunningAgent) -> None:
    store = WatchedStore()
    script = json.dumps({"events": 10_000, "interval": 0.02})
    with anyio.fail_after(TEST_SECONDS):
        with anyio.CancelScope() as step:
            async with (
                follower.connect_agent(afp_agent.url) as agent,
                LiveTurns(
                    agent.trajectory_endpoint, store, PREFIX, poll_interval_seconds=POLL
                ) as turns,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(follower.run_a2a_turn, agent, turns, "turn-1", script)
                await store.wait_events("turn-1", 3)
                step.cancel()
        assert step.cancelled_caught
        stored = await stored_turn(store, PREFIX, "turn-1")
        task_id = stored.events[0]["task"]  # afp_agent.py names the task in each event
        async with Agent.client(afp_agent) as reference:
            # The helper's cleanup sent tasks/cancel before the step's cancel came out.
            assert await reference.state(task_id) == "canceled"
            served = await reference.served(task_id)
    assert served.state == "canceled"
    assert stored.end == {"state": "canceled", "next": len(stored.events), "complete": False}
    assert len(stored.events) >= 3
    assert stored.events == served.events[: len(stored.events)]
