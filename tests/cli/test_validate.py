"""``follower validate``: the operators' table passes for the library, and flags broken followers.

The quick table runs as users run it, in a subprocess (this is the run ``make
test`` relies on). The broken followers are the library with one piece
replaced, handed to the table through its test-only ``open_turn`` hook; each
backend's cells run in an event loop of their own, so those tests are sync.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import follower._cli._fault_table
from follower import TaskSource, Via
from follower._cli._fault_drill import (
    AGENTS,
    BACKENDS,
    OUTCOMES,
    QUICK,
    WAYS,
    Cell,
    CellRun,
    broken_bounds,
)
from follower._cli._fault_table import backends_to_run, run_cells, validate
from follower._cli._main import EXIT_BOUND_BROKEN, EXIT_OK, EXIT_USAGE, main
from follower._format._layout import TurnKeys
from follower._http._clients import leased_client
from follower._options import FollowOptions
from follower._turns._block import _TurnBlock
from follower._turns._ledger import StepLedger

from ..properties.broken_followers import RetryingFollower, UnboundedDrainBlock
from ..support.cli import run_cli

pytestmark = pytest.mark.waiting

EXPECTED_STATE = {"cancelled": "canceled", "raises": "failed", "returns": "completed"}


# --- the library keeps every bound ---------------------------------------------------------


def test_quick_table_passes_on_both_backends_each_way(tmp_path: Path) -> None:
    # About 10 s a way on an idle machine: bounded far above it, for a busy one.
    result = run_cli(["validate", "--quick", "--json", "-"], tmp_path, timeout=300)
    assert result.returncode == EXIT_OK, result.stderr
    report = json.loads(result.stdout)  # stdout holds the JSON alone
    assert report["ok"] is True
    assert report["backends"] == ["asyncio", "trio"]
    assert report["ways"] == list(WAYS) == ["cursor", "stream", "poll"]
    assert report["not_run"] == {}
    cells = {(c["backend"], c["way"], c["outcome"], c["agent"]): c for c in report["cells"]}
    assert set(cells) == {
        (b, w, o, a) for b in BACKENDS for w in WAYS for o in OUTCOMES for a in AGENTS
    }
    for (_, way, outcome, agent), cell in cells.items():
        assert cell["ok"], cell
        assert cell["problems"] == []
        assert cell["ended"]
        assert cell["reads_after_exit"] == 0
        assert cell["followers_alive"] == 0
        assert cell["end_json"] == {
            "written": 1,
            "state": [EXPECTED_STATE[outcome]],
            "complete": [False],  # the task outlives every step: its last page is never read
        }
        exit_ms = cell["exit_ms"]["max"]
        if outcome == "returns":
            assert exit_ms <= (QUICK.drain_seconds + QUICK.prompt_exit_seconds) * 1000
            if agent != "healthy":
                assert cell["reads_after_stop"]["max"] <= 1
                # A silent agent holds a stream it has answered: no read it failed.
                if (way, agent) != ("stream", "silent"):
                    assert cell["failed_reads"]["max"] >= 1
        else:
            assert cell["reads_after_stop"]["max"] == 0
            assert exit_ms <= QUICK.prompt_exit_seconds * 1000
    # The table itself went to stderr: a row a cell, then the verdict.
    lines = result.stderr.splitlines()
    rows = [line.split() for line in lines if line.startswith(("asyncio ", "trio "))]
    assert [row[:4] for row in rows] == [
        [b, w, o, a] for b in BACKENDS for w in WAYS for o in OUTCOMES for a in AGENTS
    ]
    assert lines[-1].startswith("follower validate: ok: every step ended within its bounds")


def test_help_names_its_options_and_its_exit_code(tmp_path: Path) -> None:
    result = run_cli(["validate", "--help"], tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    for mention in (
        "--via",
        "--quick",
        "--repeats",
        "--json",
        "--backend",
        f"{EXIT_BOUND_BROKEN} a follower",
    ):
        assert mention in result.stdout, mention


def test_repeats_must_be_a_count(tmp_path: Path) -> None:
    result = run_cli(["validate", "--repeats", "0"], tmp_path)
    assert result.returncode == EXIT_USAGE
    assert "--repeats: 0 is not a count of 1 or more" in result.stderr


def test_a_json_path_that_cannot_be_written_is_refused_before_running(tmp_path: Path) -> None:
    result = run_cli(["validate", "--json", str(tmp_path / "missing" / "t.json")], tmp_path)
    assert result.returncode == EXIT_USAGE
    assert result.stdout == ""  # not one cell ran
    assert result.stderr.startswith("follower: error: --json ")
    assert "cannot write it" in result.stderr


def test_without_trio_asyncio_runs_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    real = follower._cli._fault_table.importlib.util.find_spec
    monkeypatch.setattr(
        follower._cli._fault_table.importlib.util,
        "find_spec",
        lambda name: None if name == "trio" else real(name),
    )
    backends, not_run = backends_to_run(None)
    assert backends == ["asyncio"]
    assert "trio is not installed" in not_run["trio"]
    assert backends_to_run("trio") == (["trio"], {})  # asked for: main refuses it (exit 2)


def test_a_broken_bound_exits_8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follower._cli._fault_table, "validate_command", lambda args: False)
    assert main(["validate", "--quick", "--backend", "asyncio"]) == EXIT_BOUND_BROKEN


# --- broken followers are flagged ------------------------------------------------------------


class RetryingBlock(_TurnBlock):
    """The library's block with the old follower's loop: after stop, a failed read is retried."""

    async def _run_follower(self, task_id: str) -> None:
        sink = self._sink
        assert sink is not None
        try:
            async with leased_client(self._options.client) as client:
                retrying = RetryingFollower(
                    endpoint=self.endpoint,
                    task_id=task_id,
                    sink=sink,
                    options=self._options,
                    stop=self._stop,
                    progress=self.progress,
                )
                await retrying.run(client, 0)
        finally:
            self._running.ended()


class LeakingBlock(RetryingBlock):
    """The old follower: a free task, outside the block's task group, retrying after stop.

    (A free task that only leaked would end at its next page: the end mark written,
    the sink refuses it. One that retries a gone agent after stop reads on.)
    """

    leaked: asyncio.Task[None] | None = None

    def _start_follower(self, task_id: str) -> None:
        name = f"follower {self.turn_id}"  # as the library names its followers
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio's: a system task runs until the run ends
            import trio

            trio.lowlevel.spawn_system_task(self._run_follower, task_id, name=name)
        else:
            self.leaked = loop.create_task(self._run_follower(task_id), name=name)


def opening(block: type[_TurnBlock]) -> Any:
    """An ``open_turn`` for the table that opens ``block`` where the library opens its own."""

    def open_turn(
        source: TaskSource, store: Any, prefix_key: str, turn_id: str, **options: Any
    ) -> _TurnBlock:
        assert source.via is Via.CURSOR  # the broken followers read cursors
        keys = TurnKeys(prefix_key, turn_id)
        return block(source, store, keys, options=FollowOptions(**options), ledger=StepLedger())

    return open_turn


def problems_by_cell(rows: Any) -> dict[tuple[str, str], list[str]]:
    return {(row.cell.outcome, row.cell.agent): row.problems for row in rows}


@pytest.mark.parametrize("backend", BACKENDS)
def test_retrying_after_stop_is_flagged(backend: str) -> None:
    rows = run_cells(backend, QUICK, outcomes=["returns"], open_turn=opening(RetryingBlock))
    problems = problems_by_cell(rows)
    for agent in ("close", "5xx"):
        # Retried every post-stop pause until the drain's deadline, not ended by the sentinel.
        assert any(
            "reads after stop from an agent that is gone (bound: 1)" in p
            for p in problems["returns", agent]
        ), problems
    assert problems["returns", "healthy"] == []  # a healthy agent answers: nothing to retry


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_follower_left_running_is_flagged(backend: str) -> None:
    rows = run_cells(backend, QUICK, agents=["close", "5xx"], open_turn=opening(LeakingBlock))
    problems = problems_by_cell(rows)
    for agent in ("close", "5xx"):
        # Seen by the agent: it reads on after the block exited, every post-stop pause.
        after_exit = problems["returns", agent]
        assert any("a follower outlived its block" in p for p in after_exit), after_exit
        assert "1 follower task(s) still running after the block" in after_exit
        # Not stopped, it waits out its 5 s backoff: only the task check sees it.
        for outcome in ("cancelled", "raises"):
            assert "1 follower task(s) still running after the block" in problems[outcome, agent]


def test_a_drain_without_deadline_is_flagged_as_not_ending() -> None:
    rows = run_cells(
        "asyncio",
        QUICK,
        outcomes=["returns"],
        agents=["healthy"],
        open_turn=opening(UnboundedDrainBlock),
    )
    (row,) = rows
    assert not row.runs[0].ended
    assert any("did not exit within" in p for p in row.problems), row.problems


def test_the_table_says_broken_and_which_bound(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "table.json"
    ok = validate(
        backend="asyncio",
        ways=["cursor"],
        quick=True,
        repeats=1,
        json_path=str(path),
        verbose=False,
        open_turn=opening(RetryingBlock),
    )
    assert ok is False
    out = capsys.readouterr().out
    broken_rows = [line for line in out.splitlines() if line.endswith("BROKEN")]
    assert [line.split()[1:4] for line in broken_rows] == [
        ["cursor", "returns", "close"],
        ["cursor", "returns", "5xx"],
    ]
    assert "    broken: " in out
    assert out.splitlines()[-1].startswith("follower validate: BROKEN: 2 of 12 cells")
    report = json.loads(path.read_text())
    assert report["ok"] is False
    assert [c["agent"] for c in report["cells"] if not c["ok"]] == ["close", "5xx"]


# --- the bounds, one by one ------------------------------------------------------------------


def run(**changes: Any) -> CellRun:
    fine: dict[str, Any] = {
        "ended": True,
        "exit_seconds": 0.001,
        "reads_after_stop": 0,
        "reads_after_exit": 0,
        "failed_reads": 1,
        "followers_alive": 0,
        "end_mark": {"state": "canceled", "next": 3, "complete": False},
        "problems": (),
    }
    return CellRun(**{**fine, **changes})


@pytest.mark.parametrize(
    ("outcome", "agent", "changes", "says"),
    [
        ("cancelled", "close", {}, None),
        ("cancelled", "close", {"reads_after_stop": 1}, "1 read(s) after the body ended"),
        ("raises", "healthy", {"exit_seconds": 0.3}, "exited 300 ms after the body ended"),
        ("returns", "close", {"reads_after_stop": 1}, None),
        ("returns", "close", {"reads_after_stop": 2}, "2 reads after stop from an agent"),
        ("returns", "healthy", {"reads_after_stop": 9}, None),
        ("returns", "healthy", {"exit_seconds": 0.8}, "the 0.5 s drain"),
        ("cancelled", "silent", {"ended": False}, "a follower outlived its step"),
        ("cancelled", "5xx", {"reads_after_exit": 2}, "2 read(s) after the block exited"),
        ("cancelled", "5xx", {"end_mark": None}, "no end.json"),
        ("raises", "5xx", {}, "end.json says 'canceled', not 'failed'"),
    ],
)
def test_bounds(outcome: str, agent: str, changes: dict[str, Any], says: str | None) -> None:
    if outcome == "returns" and "end_mark" not in changes:
        changes["end_mark"] = {"state": "completed", "next": 3, "complete": False}
    broken = broken_bounds(Cell("asyncio", outcome, agent), run(**changes), QUICK)
    if says is None:
        assert broken == ()
    else:
        assert any(says in line for line in broken), broken
