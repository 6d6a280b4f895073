"""The command line is a thin shell over the demo and the A2A turn.

``follow --task`` gives up on a task the way ``run_a2a_turn`` does: it asks the
agent to cancel it. The demo's functions take plain arguments, and the demo
never imports the command line. Real-socket tests run on real time, bounded.
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from follower import (
    FilesystemStore,
    InvalidArgumentError,
    LiveTurns,
    MemoryStore,
    TaskTimeoutError,
    connect_agent,
)
from follower._a2a._turn import follow_a2a_task
from follower._cli._demo import run_demo, serve_reference_agent
from follower._cli._main import EXIT_ERROR, EXIT_INTERRUPTED
from follower.testing import Fault, ReferenceAgent, TaskScript

from ..support.cli import (
    VERDICT,
    assert_no_traceback,
    assert_one_line_error,
    only_step,
    printed_events,
    run_cli_async,
    run_until_first_line_then_interrupt,
    send_message,
    serving,
)
from ..support.stored import StoredTurn, read_linked_turns, read_turn
from ..support.virtual_time import virtual_time_backends

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
    # The agent's JSON-RPC URL, which its card names: its base URL.
    assert message == f"task {task_id!r} at {url.rstrip('/')}/ did not end within 0.5 s"
    assert agent.statistics().canceled_tasks == 1
    assert_closed(tmp_path / "out" / "follow" / task_id)


async def test_follow_task_interrupted_cancels_the_task(anyio_backend: str, tmp_path: Path) -> None:
    agent = ReferenceAgent(script=LONG)
    with anyio.fail_after(60):
        async with serving(agent) as url:
            task_id = await send_message(url, "started elsewhere")
            run = await run_until_first_line_then_interrupt(
                follow_task_args(anyio_backend, url, task_id, "--store", "out"), tmp_path
            )
    assert agent.statistics().canceled_tasks == 1
    turn = assert_closed(tmp_path / "out" / "follow" / task_id)
    printed = printed_events(run.first_line + "\n" + run.stdout)
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


# --- the demo's functions take plain arguments -------------------------------------------


async def test_run_demo_stores_and_checks_a_step(tmp_path: Path) -> None:
    out = io.StringIO()
    with anyio.fail_after(60):
        ok = await run_demo(
            FilesystemStore(tmp_path), turns=2, events=5, interval_seconds=0.0, out=out
        )
    lines = out.getvalue().splitlines()
    assert ok, lines
    assert lines[0].endswith("(fault: none)")
    assert VERDICT in lines
    assert "  read back: 10 events across 2 turns" in lines
    turns = read_linked_turns(only_step(tmp_path), "turn-1")
    assert [turn.turn_id for turn in turns] == ["turn-1", "turn-2"]


async def test_run_demo_names_its_fault_by_its_kind_unless_told(tmp_path: Path) -> None:
    out = io.StringIO()
    with anyio.fail_after(60):
        ok = await run_demo(
            FilesystemStore(tmp_path),
            turns=1,
            events=5,
            interval_seconds=0.0,
            fault=Fault.not_json(),
            out=out,
        )
    lines = out.getvalue().splitlines()
    assert ok, lines
    assert lines[0].endswith("(fault: not-json)")


@pytest.mark.parametrize(
    "numbers",
    [
        {"turns": 0, "events": 5, "interval_seconds": 0.0},
        {"turns": 1, "events": -1, "interval_seconds": 0.0},
        {"turns": 1, "events": 5, "interval_seconds": -1.0},
    ],
    ids=["no-turns", "negative-events", "negative-interval"],
)
async def test_run_demo_refuses_bad_numbers_before_serving(
    numbers: dict[str, Any], tmp_path: Path
) -> None:
    out = io.StringIO()
    with pytest.raises(InvalidArgumentError):
        await run_demo(FilesystemStore(tmp_path), out=out, **numbers)
    assert out.getvalue() == ""
    assert [path async for path in anyio.Path(tmp_path).iterdir()] == []


async def test_serve_reference_agent_serves_until_cancelled() -> None:
    out = io.StringIO()
    serve = partial(
        serve_reference_agent,
        host="127.0.0.1",
        port=0,
        events=3,
        interval_seconds=0.0,
        event_bytes=0,
        final_state="failed",
        out=out,
    )
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            url = await tg.start(serve)
            async with connect_agent(url) as a2a:
                started = await a2a.send_message("hi")
                final = await a2a.wait_for_task(started.id, poll_interval_seconds=0.05)
            tg.cancel_scope.cancel()
    assert final.state == "failed"
    assert out.getvalue().splitlines() == [
        f"reference agent serving on {url}",
        f"  card: {url}.well-known/agent-card.json",
    ]


async def test_serve_reference_agent_on_a_taken_port_raises_the_os_error() -> None:
    out = io.StringIO()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port: int = taken.getsockname()[1]
        with anyio.fail_after(60), pytest.RaisesGroup(OSError):
            await serve_reference_agent(
                host="127.0.0.1",
                port=port,
                events=3,
                interval_seconds=0.0,
                event_bytes=0,
                final_state="completed",
                out=out,
            )
    assert out.getvalue() == ""


# --- no import circle --------------------------------------------------------------------


def imported_after(statement: str) -> set[str]:
    """The ``follower`` modules a fresh interpreter holds after ``statement``, and hypercorn."""
    code = (
        f"import sys; {statement}; "
        "print(*sorted(m for m in sys.modules if m.split('.')[0] in ('follower', 'hypercorn')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return set(done.stdout.split())


def test_the_demo_does_not_import_the_command_line() -> None:
    modules = imported_after("import follower._cli._demo")
    assert "follower.testing" in modules
    assert "follower._cli._main" not in modules


def test_the_command_line_imports_no_demo_until_it_runs_one() -> None:
    modules = imported_after("import follower._cli._main")
    assert not modules & {"follower._cli._demo", "follower.testing", "hypercorn"}
