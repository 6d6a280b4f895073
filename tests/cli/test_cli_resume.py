"""The command line never mixes runs: a prefix per task, a typed refusal, and resume.

Real processes against the reference agent on a loopback socket, both backends.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import anyio
import pytest

from follower._cli._main import EXIT_BAD_STORE, EXIT_OK, EXIT_TURN_EXISTS
from follower.testing import ReferenceAgent, TaskScript

from ..support.cli import (
    assert_no_traceback,
    assert_one_line_error,
    printed_events,
    run_cli_async,
    run_until_first_line_then_interrupt,
    serving,
)
from ..support.stored import read_linked_turns

pytestmark = pytest.mark.anyio


def follow(backend: str, url: str, *args: str) -> list[str]:
    return ["--backend", backend, "follow", url, "--poll", "0.05", "--store", "out", *args]


def named_task(stderr: str) -> str:
    """The task id a run names first, so that it can be resumed."""
    said = re.match(r"follower: task (\S+)\n", stderr)
    assert said, stderr
    return said.group(1)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def test_two_runs_store_two_tasks_apart(anyio_backend: str, tmp_path: Path) -> None:
    agent = ReferenceAgent(script=TaskScript(events=5, interval_seconds=0))
    with anyio.fail_after(60):
        async with serving(agent) as url:
            first = await run_cli_async(follow(anyio_backend, url, "--message", "one"), tmp_path)
            second = await run_cli_async(follow(anyio_backend, url, "--message", "two"), tmp_path)
    assert (first.returncode, second.returncode) == (EXIT_OK, EXIT_OK), second.stderr
    ids = [named_task(first.stderr), named_task(second.stderr)]
    assert ids[0] != ids[1]
    for run, task_id in zip((first, second), ids, strict=True):
        [turn] = read_linked_turns(tmp_path / "out" / "follow" / task_id, "turn-1")
        assert turn.task is not None
        assert turn.task["task_id"] == task_id
        assert printed_events(run.stdout) == turn.events  # each run prints its own task
    assert sorted(p.name for p in (tmp_path / "out" / "follow").iterdir()) == sorted(ids)


async def test_a_clashing_prefix_and_turn_are_refused_and_change_nothing(
    anyio_backend: str, tmp_path: Path
) -> None:
    # About a second a task: the refused run's task is still running when it is refused.
    agent = ReferenceAgent(script=TaskScript(events=5, interval_seconds=0.2))
    clash = ["--prefix", "run/", "--turn", "t1"]
    with anyio.fail_after(60):
        async with serving(agent) as url:
            first = await run_cli_async(
                follow(anyio_backend, url, "--message", "one", *clash), tmp_path
            )
            assert first.returncode == EXIT_OK, first.stderr
            before = snapshot(tmp_path / "out")
            second = await run_cli_async(
                follow(anyio_backend, url, "--message", "two", *clash), tmp_path
            )
    message = assert_one_line_error(second, EXIT_TURN_EXISTS)
    assert "turn 't1'" in message
    assert named_task(first.stderr) in message
    assert second.stdout == ""
    assert snapshot(tmp_path / "out") == before
    # The refused run's own task was started, and is not left running.
    assert agent.statistics().canceled_tasks == 1


async def test_a_killed_run_is_resumed_with_task(anyio_backend: str, tmp_path: Path) -> None:
    # About 3 s of events: the first run is killed (a worker that died) after one.
    agent = ReferenceAgent(script=TaskScript(events=60, interval_seconds=0.05))
    with anyio.fail_after(60):
        async with serving(agent) as url:
            killed = await run_until_first_line_then_interrupt(
                follow(anyio_backend, url, "--message", "hi"),
                tmp_path,
                signal_number=signal.SIGKILL,
            )
            task_id = named_task(killed.stderr)
            live = tmp_path / "out" / "follow" / task_id / "turn-1" / "live"
            assert (live / "task.json").is_file()
            assert not (live / "end.json").exists(), "a killed run ends nothing"
            resumed = await run_cli_async(follow(anyio_backend, url, "--task", task_id), tmp_path)
    assert resumed.returncode == EXIT_OK, resumed.stderr
    assert_no_traceback(resumed)
    [turn] = read_linked_turns(tmp_path / "out" / "follow" / task_id, "turn-1")
    script = [agent.script.event(i) for i in range(agent.script.events)]
    assert turn.events == script, "every event stored exactly once, in order"
    assert turn.end == {"state": "completed", "next": len(script), "complete": True}
    assert printed_events(resumed.stdout) == script  # what is stored, from the start
    assert agent.statistics().tasks == 1


async def test_follow_into_an_unwritable_store_exits_6_and_never_hangs(
    anyio_backend: str, tmp_path: Path
) -> None:
    # A path blocked by a file: the turn's folder cannot be made.
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "follow").write_text("in the way")
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0))
    with anyio.fail_after(30):
        async with serving(agent) as url:
            result = await run_cli_async(follow(anyio_backend, url, "--message", "hi"), tmp_path)
    assert result.returncode == EXIT_BAD_STORE, result.stderr
    assert_no_traceback(result)
    last = result.stderr.splitlines()[-1]
    assert last.startswith("follower: error: store: "), result.stderr
    assert (tmp_path / "out" / "follow").read_text() == "in the way"
