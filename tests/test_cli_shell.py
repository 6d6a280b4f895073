"""The command line is a thin shell over the A2A turn.

``follow --task`` gives up on a task the way ``run_a2a_turn`` does: it asks the
agent to cancel it. Real-socket tests run on real time, bounded; the others on
virtual time.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from follower import LiveTurns, MemoryStore, TaskTimeoutError, connect_agent
from follower._a2a import follow_a2a_task
from follower._cli import EXIT_ERROR, EXIT_INTERRUPTED
from follower.testing import ReferenceAgent, TaskScript

from .support.cli import (
    StoredTurn,
    assert_no_traceback,
    assert_one_line_error,
    json_lines,
    read_turn,
    run_cli_async,
    run_until_first_line_then_interrupt,
    send_message,
    serving,
)
from .support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

# About 100 s: it outlives every test here, so only a cancel ends it early.
LONG = TaskScript(events=10_000, interval_seconds=0.01)


def assert_closed(step: Path) -> StoredTurn:
    """The step's one turn, ended and marked last (its events are another test's business)."""
    turn = read_turn(step, "turn-1")
    assert turn.end is not None
    assert turn.next_turn == {"turn": None}
    return turn


def follow_task_args(backend: str, url: str, task_id: str, *more: str) -> list[str]:
    return ["--backend", backend, "follow", url, "--poll", "0.05", "--task", task_id, *more]


# --- follow --task: the agent is asked to cancel the task it gave up on ------------------


async def test_follow_task_past_its_deadline_cancels_the_task(
    anyio_backend: str, tmp_path: Path
) -> None:
    agent = ReferenceAgent(script=LONG)
    with anyio.fail_after(60):
        async with serving(agent) as url:
            task_id = await send_message(url, "started elsewhere")
            args = follow_task_args(anyio_backend, url, task_id, "--deadline", "0.5")
            result = await run_cli_async([*args, "--store", "out"], tmp_path)
    message = assert_one_line_error(result, EXIT_ERROR)
    assert message == f"task {task_id} did not end within 0.5 s"
    assert agent.statistics().canceled_tasks == 1
    assert_closed(tmp_path / "out" / "follow")


async def test_follow_task_interrupted_cancels_the_task(anyio_backend: str, tmp_path: Path) -> None:
    agent = ReferenceAgent(script=LONG)
    with anyio.fail_after(60):
        async with serving(agent) as url:
            task_id = await send_message(url, "started elsewhere")
            run = await run_until_first_line_then_interrupt(
                follow_task_args(anyio_backend, url, task_id, "--store", "out"), tmp_path
            )
    assert agent.statistics().canceled_tasks == 1
    turn = assert_closed(tmp_path / "out" / "follow")
    printed = json_lines(run.first_line + "\n" + run.stdout)
    assert printed == turn.events[: len(printed)]
    assert_no_traceback(run)
    assert run.stderr.splitlines()[-1:] == ["follower: interrupted"], run.stderr
    assert run.returncode == EXIT_INTERRUPTED


# --- follow_a2a_task: the one piece both turns share -------------------------------------


@pytest.mark.parametrize("anyio_backend", virtual_time_backends())
@pytest.mark.parametrize("ends", ["by-itself", "past-the-deadline"])
async def test_following_a_started_task_cancels_it_only_when_giving_up(
    anyio_backend: Any, ends: str
) -> None:
    script = TaskScript(events=5, interval_seconds=1.0) if ends == "by-itself" else LONG
    agent, store = ReferenceAgent(script=script), MemoryStore()
    with anyio.fail_after(600):  # virtual
        async with (
            agent.client() as client,
            connect_agent("http://agent.test/", client=client) as a2a,
        ):
            assert a2a.trajectory_endpoint is not None
            started = await a2a.send_message("started elsewhere")
            async with LiveTurns(
                a2a.trajectory_endpoint, store, "s/", poll_interval_seconds=1, client=client
            ) as turns:
                follow = partial(
                    follow_a2a_task, a2a, turns, "t", started.id, task_deadline_seconds=60
                )
                if ends == "by-itself":
                    assert (await follow()).state == "completed"
                else:
                    with pytest.raises(TaskTimeoutError):  # as itself, not in a group
                        await follow()
    assert agent.statistics().tasks == 1  # followed, never sent again
    assert agent.statistics().canceled_tasks == (ends == "past-the-deadline")
    assert "s/t/live/end.json" in await store.list("s/t/live/")
