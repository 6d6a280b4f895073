"""Heartbeats and per-turn costs while following, in temporalio's activity test environment.

No Temporal server; the ready activity's agent is the reference agent on loopback.

asyncio only (temporalio is asyncio-only; the conftest sets the backend).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio
import pytest
from temporalio.converter import DataConverter
from temporalio.testing import ActivityEnvironment

from follower import FilesystemStore, LiveTurns, MemoryStore
from follower.temporal import StepAttempt, run_a2a_step, run_activity_step
from follower.temporal.workflow_types import A2AStepParams, StepTurn, StoreSpec
from follower.testing import ReferenceAgent, TaskScript, serve_agent

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
    nothing = {"turns": 0, "events_stored": 0, "complete": 0}
    assert beats[0][1] == ({"turns": [], "others": nothing},), "the first beat goes out at once"
    assert {
        "turn_id": "turn-1",
        "task_id": "t1",
        "events_stored": 3,
        "complete": False,
    } in [turn for _, (details,) in beats for turn in details["turns"]]
    interval = 0.3 / 3
    assert all(b - a >= interval * 0.9 for (a, _), (b, _) in pairwise(beats))
    assert len(beats) <= elapsed / interval + 1


HEARTBEAT_BYTES = 1024
"""A heartbeat's payload, whatever the step's count of turns (Temporal caps one at 2 MiB)."""


def payload_bytes(details: Any) -> int:
    (payload,) = DataConverter.default.payload_converter.to_payloads([details])
    return int(payload.ByteSize())


async def test_a_heartbeat_stays_small_however_many_turns_the_step_ended() -> None:
    # Only the unfinished turns are listed; those ended for good are summed (their
    # task.json and end mark are in the store, so a retry needs nothing of them).
    agent, store = ScriptedAgent(), MemoryStore()
    turns = 300
    sizes: list[int] = []
    env = ActivityEnvironment()

    async def step(attempt: StepAttempt) -> dict[str, Any]:
        async with attempt.live_turns(
            ENDPOINT, store, "steps/s1/", client=agent.client(), poll_interval_seconds=0.01
        ):
            for n in range(turns):
                agent.add_task(f"t{n}")
                agent.publish(f"t{n}", n)
                agent.finish(f"t{n}")
                async with attempt.following(f"turn-{n}") as turn:
                    turn.follow(f"t{n}")
                    turn.ended("completed")
                sizes.append(payload_bytes(attempt.heartbeat_details()))
            agent.add_task("running")
            async with attempt.following("turn-running") as turn:
                turn.follow("running")
                running = attempt.heartbeat_details()
                agent.finish("running")
                turn.ended("completed")
            return running

    with anyio.fail_after(60):
        running = await env.run(run_activity_step, step)
    assert max(sizes) <= HEARTBEAT_BYTES, f"{sizes[-1]} bytes after {turns} turns"
    assert payload_bytes(running) <= HEARTBEAT_BYTES
    assert running == {
        "turns": [
            {"turn_id": "turn-running", "task_id": "running", "events_stored": 0, "complete": False}
        ],
        "others": {"turns": turns, "events_stored": turns, "complete": turns},
    }


async def test_the_ready_activity_never_walks_every_turn_of_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LiveTurns.progress() costs the turns opened so far: asked once a turn (and once a
    # beat), a 10,000-turn step spent a minute of its loop in it. Neither asks it now.
    walks = 0
    progress = LiveTurns.progress

    def counted(turns: LiveTurns) -> Any:
        nonlocal walks
        walked = progress(turns)
        # A beat before the first turn is opened walks none (its cost does not grow).
        walks += bool(walked)
        return walked

    monkeypatch.setattr(LiveTurns, "progress", counted)
    agent = ReferenceAgent(script=TaskScript(events=1, interval_seconds=0.0))
    turns = 20
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            url = await tg.start(serve_agent, agent)
            params = A2AStepParams(
                agent_url=url,
                store=StoreSpec.filesystem(str(tmp_path)),
                prefix_key="steps/s1/",
                turns=[StepTurn(f"turn-{n}", f"message {n}") for n in range(turns)],
                poll_interval_seconds=0.01,
                task_poll_seconds=0.01,
                heartbeat_interval_seconds=0.05,
            )
            result = await env.run(run_a2a_step, params)
            tg.cancel_scope.cancel()
    assert [(t.state, t.events_stored, t.complete) for t in result.turns] == [
        ("completed", 1, True)
    ] * turns
    assert beats, "the step heartbeated"
    assert walks == 0
    stored = FilesystemStore(tmp_path)
    assert len(await stored.list("steps/s1/turn-19/live/")) == 5


async def test_a_handed_off_turn_stays_in_the_heartbeats_for_the_retry() -> None:
    # Its task may have stored nothing yet (no task.json): only the beat names it.
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t0")
    agent.publish("t0", "a")
    agent.finish("t0")
    agent.add_task("t1")
    env = ActivityEnvironment()

    async def step(attempt: StepAttempt) -> dict[str, Any]:
        async with attempt.live_turns(
            ENDPOINT, store, "steps/s1/", client=agent.client(), poll_interval_seconds=0.01
        ):
            async with attempt.following("turn-0") as turn:
                turn.follow("t0")
                turn.ended("completed")
            with pytest.raises(RuntimeError):
                async with attempt.following("turn-1") as turn:
                    turn.follow("t1")
                    attempt.hand_off()  # as a worker shutting down does
                    raise RuntimeError("the attempt stops here")
            return attempt.heartbeat_details()

    with anyio.fail_after(10):
        details = await env.run(run_activity_step, step)
    assert details == {
        "turns": [{"turn_id": "turn-1", "task_id": "t1", "events_stored": 0, "complete": False}],
        "others": {"turns": 1, "events_stored": 1, "complete": 1},
    }
    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, attempt=2, heartbeat_details=[details])
    assert retry.run(StepAttempt._create().previous_task_ids) == {"turn-1": "t1"}


@pytest.mark.parametrize("ends", ["returns", "raises", "is-cancelled"])
async def test_the_heartbeat_task_ends_with_the_activity(ends: str) -> None:
    # Asked in the activity's own task the moment run_activity_step is done: a heartbeat
    # task only cancelled, not awaited, is still pending then.
    env = ActivityEnvironment()
    beating = anyio.Event()
    env.on_heartbeat = lambda *details: beating.set()
    left: list[set[asyncio.Task[Any]]] = []

    async def step(attempt: StepAttempt) -> str:
        await beating.wait()
        if ends == "raises":
            raise RuntimeError("the step failed")
        if ends == "is-cancelled":
            env.cancel()
            await anyio.sleep_forever()
        return "done"

    async def activity() -> str:
        before = asyncio.all_tasks()
        try:
            return await run_activity_step(step, heartbeat_interval_seconds=0.01)
        finally:
            left.append(asyncio.all_tasks() - before)

    with anyio.fail_after(10):
        if ends == "returns":
            assert await env.run(activity) == "done"
        else:
            expected = RuntimeError if ends == "raises" else asyncio.CancelledError
            with pytest.raises(expected):
                await env.run(activity)
    assert left == [set()], "no task of the activity outlives it"
