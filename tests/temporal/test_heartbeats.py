"""Heartbeats while following, in temporalio's activity test environment (no server).

asyncio only (temporalio is asyncio-only; the conftest sets the backend).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from itertools import pairwise
from typing import Any

import anyio
import pytest
from temporalio.testing import ActivityEnvironment

from follower import MemoryStore
from follower.temporal import StepAttempt, run_activity_step

from ..support.agents import ENDPOINT, ScriptedAgent

pytestmark = pytest.mark.anyio


async def test_heartbeats_carry_each_turns_progress_at_a_bounded_rate() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "a", "b", "c")
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.3))
    beats: list[tuple[float, Any]] = []
    seen_stored = anyio.Event()

    def on_heartbeat(*details: Any) -> None:
        beats.append((anyio.current_time(), details))
        turns = details[0]["turns"]
        if turns and turns[0]["events_stored"] == 3:
            seen_stored.set()

    env.on_heartbeat = on_heartbeat

    async def step(attempt: StepAttempt) -> None:
        async with (
            attempt.live_turns(
                ENDPOINT, store, "steps/s1/", client=agent.client(), poll_interval_seconds=0.01
            ),
            attempt.following("turn-1") as turn,
        ):
            turn.follow("t1")
            await seen_stored.wait()
            agent.finish("t1")
            turn.ended("completed")

    with anyio.fail_after(10):
        started = anyio.current_time()
        await env.run(run_activity_step, step)
        elapsed = anyio.current_time() - started
    assert beats[0][1] == ({"turns": []},), "the first beat goes out at once"
    assert {
        "turn_id": "turn-1",
        "task_id": "t1",
        "events_stored": 3,
        "complete": False,
    } in [turn for _, (details,) in beats for turn in details["turns"]]
    interval = 0.3 / 3
    assert all(b - a >= interval * 0.9 for (a, _), (b, _) in pairwise(beats))
    assert len(beats) <= elapsed / interval + 1
