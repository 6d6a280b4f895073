"""Steps as Temporal activities, on a real dev server, against the reference agent on loopback.

asyncio only (temporalio is asyncio-only; the conftest sets the backend). Each
test bounds itself with ``anyio.fail_after``; order comes from stored objects
and the agent's statistics, polled, never from sleeps.
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from follower import FilesystemStore, StoredEvent, read_live_trajectory
from follower.temporal import run_a2a_step
from follower.temporal.workflow_types import (
    TURN_OF_ANOTHER_RUN,
    A2AStepParams,
    A2AStepResult,
    StepTurn,
    StoreSpec,
)
from follower.testing import ReferenceAgent, TaskScript, serve_agent

from ..support.stored import stored_turn
from .workflows import StepWorkflow

pytestmark = [pytest.mark.anyio, pytest.mark.waiting]

PREFIX = "steps/s1/"
POLL = 0.05
LONG_TURN = 250
"""Events of a turn that is stopped or killed mid-way: 5 s of them, so it is still running
when the worker goes, however busy the machine (a shorter one could end first)."""


@asynccontextmanager
async def served(agent: ReferenceAgent) -> AsyncIterator[str]:
    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_agent, agent)
        yield url
        tg.cancel_scope.cancel()


def worker(client: Client, queue: str) -> Worker:
    return Worker(client, task_queue=queue, workflows=[StepWorkflow], activities=[run_a2a_step])


def params(url: str, root: Path, *turns: str) -> A2AStepParams:
    return A2AStepParams(
        agent_url=url,
        store=StoreSpec.filesystem(str(root)),
        prefix_key=PREFIX,
        turns=[StepTurn(turn, f"message of {turn}") for turn in turns],
        poll_interval_seconds=POLL,
        task_poll_seconds=POLL,
    )


async def start(client: Client, queue: str, p: A2AStepParams) -> Any:
    return await client.start_workflow(
        StepWorkflow.run, p, id=f"step-{uuid.uuid4().hex}", task_queue=queue
    )


async def until(condition: Callable[[], Any]) -> None:
    """Poll what the store or the agent holds until ``condition()`` is true."""
    # A file store has no change notice: the objects are polled at the follower's pace.
    while True:
        if await condition():
            return
        await anyio.sleep(POLL)


def stored_events(store: FilesystemStore, turn: str) -> Callable[[], Any]:
    async def count() -> int:
        names = await store.list(f"{PREFIX}{turn}/live/")
        return max((int(n[-14:-6]) for n in names if n.endswith(".jsonl")), default=0)

    return count


async def test_a_workflow_runs_the_step_and_stores_every_event_once(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    agent = ReferenceAgent(script=TaskScript(events=12, interval_seconds=0.02))
    queue = uuid.uuid4().hex
    store = FilesystemStore(tmp_path)
    with anyio.fail_after(30):
        async with served(agent) as url, worker(temporal_env.client, queue):
            handle = await start(temporal_env.client, queue, params(url, tmp_path, "t-1", "t-2"))
            result: A2AStepResult = await handle.result()
    assert [(t.turn_id, t.state, t.events_stored, t.complete) for t in result.turns] == [
        ("t-1", "completed", 12, True),
        ("t-2", "completed", 12, True),
    ]
    first, second = [await stored_turn(store, PREFIX, t) for t in ("t-1", "t-2")]
    assert first.events == [agent.script.event(i) for i in range(12)]
    assert second.events == first.events
    assert first.end == {"state": "completed", "next": 12, "complete": True}
    assert first.next_turn == {"turn": "t-2"}
    assert second.next_turn == {"turn": None}
    assert first.task is not None
    assert first.task["task_id"] == result.turns[0].task_id


def stored_objects(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, by its path: what a file store holds, byte for byte."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


async def run_marker(store: FilesystemStore, turn: str) -> Any:
    return json.loads(await store.get(f"{PREFIX}{turn}/temporal-run.json"))


async def activity_attempts(handle: Any) -> list[int]:
    return [
        event.activity_task_started_event_attributes.attempt
        async for event in handle.fetch_history_events()
        if event.HasField("activity_task_started_event_attributes")
    ]


async def test_a_new_run_given_a_stored_prefix_is_refused_and_sends_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # Every attempt resumes its turns; a second workflow run given the first one's prefix
    # must not take the first run's turns for its own (and return their results).
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.01))
    queue = uuid.uuid4().hex
    store = FilesystemStore(tmp_path)
    with anyio.fail_after(30):
        async with served(agent) as url, worker(temporal_env.client, queue):
            p = params(url, tmp_path, "t-1", "t-2")
            first = await start(temporal_env.client, queue, p)
            done: A2AStepResult = await first.result()
            before = stored_objects(tmp_path)
            second = await start(temporal_env.client, queue, p)
            with pytest.raises(WorkflowFailureError) as caught:
                await second.result()
            attempts = await activity_attempts(second)
            stats = agent.statistics()
    assert [t.state for t in done.turns] == ["completed", "completed"]
    assert isinstance(caught.value.cause, ActivityError)
    refusal = caught.value.cause.cause
    assert isinstance(refusal, ApplicationError)
    assert refusal.type == TURN_OF_ANOTHER_RUN
    assert refusal.non_retryable
    assert first.id in refusal.message
    assert attempts == [1], "refused for good, not retried"
    assert stats.tasks == 2, "the second run sent no message"
    assert stored_objects(tmp_path) == before, "nothing of the first run was changed"
    assert await run_marker(store, "t-1") == {
        "namespace": temporal_env.client.namespace,
        "workflow_id": first.id,
        "run_id": first.result_run_id,
        "activity_id": "1",
    }


async def test_a_workflow_cancel_mid_turn_marks_it_canceled_and_cancels_the_agents_task(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    agent = ReferenceAgent(script=TaskScript(events=1000, interval_seconds=0.02))
    queue = uuid.uuid4().hex
    store = FilesystemStore(tmp_path)
    with anyio.fail_after(30):
        async with served(agent) as url, worker(temporal_env.client, queue):
            handle = await start(temporal_env.client, queue, params(url, tmp_path, "t-1", "t-2"))
            count = stored_events(store, "t-1")
            await until(lambda: _at_least(count, 5))
            await handle.cancel()
            with pytest.raises(WorkflowFailureError) as caught:
                await handle.result()
            assert isinstance(caught.value.cause, CancelledError)
            stats = agent.statistics()
    turn = await stored_turn(store, PREFIX, "t-1")  # checks the chunks are contiguous from 0
    assert turn.end is not None
    assert turn.end["state"] == "canceled"
    assert turn.end["complete"] is False
    # end.json's next means "at least this many are stored": a chunk whose put was in
    # flight at the cancel may land after the end mark, past its next.
    assert turn.end["next"] <= len(turn.events)
    assert len(turn.events) >= 5
    assert turn.events == [agent.script.event(i) for i in range(len(turn.events))]
    with anyio.fail_after(30):
        read_back = [
            item.event
            async for item in read_live_trajectory(
                store, PREFIX, "t-1", poll_interval_seconds=POLL, idle_timeout_seconds=10
            )
            if isinstance(item, StoredEvent)
        ]
    # The library's reader reads every stored event, those past next too (and any that
    # landed since), in order.
    assert read_back[: len(turn.events)] == turn.events
    assert read_back == [agent.script.event(i) for i in range(len(read_back))]
    assert turn.next_turn == {"turn": None}, "the step ended for good: its last turn is marked"
    assert stats.canceled_tasks == 1, "the agent was told to cancel its task"
    assert await store.list(f"{PREFIX}t-2/") == [], "the second turn never started"


async def test_a_worker_stopped_mid_turn_hands_off_and_the_retry_on_another_resumes(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    agent = ReferenceAgent(script=TaskScript(events=LONG_TURN, interval_seconds=0.02))
    queue = uuid.uuid4().hex
    store = FilesystemStore(tmp_path)
    count = stored_events(store, "t-1")
    with anyio.fail_after(45):
        async with served(agent) as url:
            async with worker(temporal_env.client, queue):
                handle = await start(temporal_env.client, queue, params(url, tmp_path, "t-1"))
                await until(lambda: _at_least(count, 5))
            # The first worker has shut down: its attempt handed the turn off.
            handed_off = await stored_turn(store, PREFIX, "t-1")
            assert handed_off.end is None
            assert handed_off.next_turn is None
            assert 5 <= len(handed_off.events) < LONG_TURN
            async with worker(temporal_env.client, queue):
                result: A2AStepResult = await handle.result()
            stats = agent.statistics()
            attempts = await activity_attempts(handle)
    turn = await stored_turn(store, PREFIX, "t-1")
    expected = [agent.script.event(i) for i in range(LONG_TURN)]
    assert turn.events == expected, "each event once, in order"
    assert turn.chunks[0][0] == 0
    assert turn.end == {"state": "completed", "next": LONG_TURN, "complete": True}
    assert turn.next_turn == {"turn": None}
    assert handed_off.task is not None
    assert result.turns[0].task_id == handed_off.task["task_id"]
    assert stats.tasks == 1, "the retry followed the same task on"
    assert stats.canceled_tasks == 0, "a handed-off turn's task goes on"
    assert (await run_marker(store, "t-1"))["workflow_id"] == handle.id
    assert attempts == [2], "the attempt that finished was the retry"


async def _at_least(count: Callable[[], Any], n: int) -> bool:
    return bool(await count() >= n)


WORKER = Path(__file__).parent / "activity_worker.py"


async def test_a_worker_killed_mid_turn_leaves_the_turn_to_the_retry_on_another(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    agent = ReferenceAgent(script=TaskScript(events=LONG_TURN, interval_seconds=0.02))
    queue = uuid.uuid4().hex
    client = temporal_env.client
    store = FilesystemStore(tmp_path / "store")
    count = stored_events(store, "t-1")
    command = [
        sys.executable,
        str(WORKER),
        client.service_client.config.target_host,
        client.namespace,
        queue,
    ]
    with anyio.fail_after(45), (tmp_path / "worker.log").open("wb") as log:
        # The test process runs the workflow; the activity runs in the doomed worker alone.
        async with (
            served(agent) as url,
            Worker(client, task_queue=queue, workflows=[StepWorkflow]),
        ):
            handle = await start(client, queue, params(url, tmp_path / "store", "t-1"))
            async with await anyio.open_process(command, stdout=log, stderr=log) as doomed:
                try:
                    await until(lambda: _at_least(count, 5))
                finally:
                    doomed.send_signal(signal.SIGKILL)
                    await doomed.wait()
            assert doomed.returncode == -signal.SIGKILL
            left = await stored_turn(store, PREFIX, "t-1")
            assert left.end is None, "a killed worker writes nothing more"
            assert left.next_turn is None
            assert 5 <= len(left.events) < LONG_TURN
            # The retry comes after the heartbeat timeout, on the only worker left.
            async with Worker(client, task_queue=queue, activities=[run_a2a_step]):
                result: A2AStepResult = await handle.result()
            stats = agent.statistics()
            attempts = await activity_attempts(handle)
    turn = await stored_turn(store, PREFIX, "t-1")
    expected = [agent.script.event(i) for i in range(LONG_TURN)]
    assert turn.events == expected, "each event once, in order"
    assert turn.chunks[0][0] == 0
    assert turn.chunks[: len(left.chunks)] == left.chunks, "the retry continued after them"
    assert turn.end == {"state": "completed", "next": LONG_TURN, "complete": True}
    assert turn.next_turn == {"turn": None}
    assert left.task is not None
    assert turn.task == left.task
    assert result.turns[0].task_id == left.task["task_id"]
    assert stats.tasks == 1, "the retry followed the same task on"
    assert stats.canceled_tasks == 0
    assert attempts == [2], "the attempt that finished was the retry"
