"""``follower validate``, the table: every cell on every backend, its figures and its verdict.

Each backend runs in its own event loop (``anyio.run``), its cells one after
the other, each against its own agent; a cell may run several times
(``--repeats``), and its row then gives the median and the worst. The cells
are measured by :mod:`follower._cli._fault_drill`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import statistics
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from .._errors import UsageError
from .._extras import install_hint
from .._http._clients import leased_client
from .._turns._step import following_live_trajectory
from ._fault_drill import (
    AGENTS,
    BACKENDS,
    FULL,
    OUTCOMES,
    QUICK,
    WAYS,
    Cell,
    CellRun,
    measure_cell,
)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

    from ._fault_drill import OpenTurn, Timings

logger = logging.getLogger("follower")


@attrs.frozen
class CellSummary:
    """A cell's runs, summed up for its row."""

    cell: Cell
    runs: tuple[CellRun, ...]

    @property
    def problems(self) -> list[str]:
        """Each bound broken, once, with how many runs broke it when there were several."""
        lines: dict[str, int] = {}
        for run in self.runs:
            for line in run.problems:
                lines[line] = lines.get(line, 0) + 1
        if len(self.runs) == 1:
            return list(lines)
        return [f"{line} ({n} of {len(self.runs)} runs)" for line, n in lines.items()]

    @property
    def ok(self) -> bool:
        return not any(run.problems for run in self.runs)

    def figures(self) -> dict[str, Any]:
        runs = self.runs
        exits = [run.exit_seconds * 1000 for run in runs]
        marks = [run.end_mark for run in runs if run.end_mark is not None]
        return {
            "backend": self.cell.backend,
            "way": self.cell.way,
            "outcome": self.cell.outcome,
            "agent": self.cell.agent,
            "runs": len(runs),
            "ended": all(run.ended for run in runs),
            "exit_ms": {"median": statistics.median(exits), "max": max(exits)},
            "reads_after_stop": _spread(run.reads_after_stop for run in runs),
            "reads_after_exit": max(run.reads_after_exit for run in runs),
            "failed_reads": _spread(run.failed_reads for run in runs),
            "followers_alive": max(run.followers_alive for run in runs),
            "end_json": {
                "written": len(marks),
                "state": sorted({mark["state"] for mark in marks}),
                "complete": sorted({mark["complete"] for mark in marks}),
            },
            "ok": self.ok,
            "problems": self.problems,
        }


def _spread(values: Any) -> dict[str, float]:
    numbers = list(values)
    return {"median": statistics.median(numbers), "max": max(numbers)}


def run_cells(
    backend: str,
    timings: Timings,
    *,
    ways: Sequence[str] = (WAYS[0],),
    outcomes: Sequence[str] = OUTCOMES,
    agents: Sequence[str] = AGENTS,
    repeats: int = 1,
    open_turn: OpenTurn = following_live_trajectory,
    on_row: Callable[[CellSummary], None] | None = None,
) -> list[CellSummary]:
    """The cells of ``backend``, each way's in turn, ``repeats`` times each, in an event loop
    of its own."""
    cells = [
        Cell(backend, outcome, agent, way)
        for way in ways
        for outcome in outcomes
        for agent in agents
    ]
    return anyio.run(_run_cells, cells, timings, repeats, open_turn, on_row, backend=backend)


async def _run_cells(
    cells: Sequence[Cell],
    timings: Timings,
    repeats: int,
    open_turn: OpenTurn,
    on_row: Callable[[CellSummary], None] | None,
) -> list[CellSummary]:
    rows = []
    # One client for the steps' messages, as a worker keeps its pool from step to step
    # (making one costs tens of milliseconds, more than most cells' teardown).
    async with leased_client(None) as a2a_client:
        for cell in cells:
            runs = []
            for repeat in range(repeats):
                # A turn id of its own: a follower left from another run is not this one's.
                turn_id = f"{cell.way}-{cell.outcome}-{cell.agent}-{repeat + 1}"
                run = await measure_cell(
                    cell, timings, turn_id=turn_id, a2a_client=a2a_client, open_turn=open_turn
                )
                runs.append(run)
            row = CellSummary(cell, tuple(runs))
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


# --- the command ---------------------------------------------------------------------


def backends_to_run(asked: str | None) -> tuple[list[str], dict[str, str]]:
    """The backends to run, and those left out with the reason; trio only when installed."""
    if asked is not None:
        return [asked], {}
    if importlib.util.find_spec("trio") is None:
        return ["asyncio"], {"trio": f"trio is not installed ({install_hint('trio')})"}
    return list(BACKENDS), {}


def validate_command(args: argparse.Namespace) -> bool:
    """``follower validate``'s arguments run: whether every cell kept within its bounds."""
    return validate(
        backend=args.backend,
        ways=args.via or WAYS,
        quick=args.quick,
        repeats=args.repeats,
        json_path=args.json,
        verbose=args.verbose,
    )


def validate(
    *,
    backend: str | None,
    ways: Sequence[str] = WAYS,
    quick: bool,
    repeats: int,
    json_path: str | None,
    verbose: bool,
    open_turn: OpenTurn = following_live_trajectory,
) -> bool:
    """Run the table, print it (and its JSON); whether every cell kept within its bounds."""
    if importlib.util.find_spec("hypercorn") is None:
        raise UsageError(
            f"validate serves the reference agent, which needs hypercorn: {install_hint('testing')}"
        )
    _check_writable(json_path)
    timings = QUICK if quick else FULL
    backends, not_run = backends_to_run(backend)
    # With the JSON on stdout, the table goes to stderr.
    out = sys.stderr if json_path == "-" else sys.stdout
    for name, reason in not_run.items():
        print(f"follower validate: not run on {name}: {reason}", file=sys.stderr)
    ways = [way for way in WAYS if way in ways]  # each once, in the table's order
    print(textwrap.fill(describe(timings, repeats, ways), width=100), file=out)
    print(_HEADER, file=out, flush=True)
    started = time.monotonic()
    rows: list[CellSummary] = []
    library_logger = logging.getLogger("follower")
    level = library_logger.level
    if not verbose:
        # Every failed read is logged; here they are the point, and the table counts them.
        library_logger.setLevel(logging.ERROR)
    try:
        for name in backends:
            rows += run_cells(
                name,
                timings,
                ways=ways,
                repeats=repeats,
                open_turn=open_turn,
                on_row=lambda row: print(_row(row), file=out, flush=True),
            )
    finally:
        library_logger.setLevel(level)
    seconds = time.monotonic() - started
    ok = all(row.ok for row in rows)
    print(verdict(rows, seconds), file=out, flush=True)
    if json_path is not None:
        report = table_json(rows, timings, repeats, not_run, seconds, ways)
        _write_json(report, json_path)
    return ok


_WAY_WORDS = {
    "cursor": "cursor reads of its live trajectory",
    "stream": "its stream (a stream is one read, cut or held when the agent turns bad)",
    "poll": "polls of its task",
}


def describe(timings: Timings, repeats: int, ways: Sequence[str] = WAYS) -> str:
    runs = "1 run" if repeats == 1 else f"{repeats} runs, median / max"
    return (
        "follower validate: each step follows a task of the reference agent on loopback, "
        f"by {'; by '.join(f'{_WAY_WORDS[way]} ({way})' for way in ways)}. "
        f"The agent answers {timings.healthy_reads} reads, then turns bad (close: closes every "
        "connection; silent: never answers; 5xx: answers 503; healthy: stays healthy), and "
        "the body ends once the follower has met the fault. "
        f"Poll {timings.poll_interval_seconds:g} s, read timeout "
        f"{timings.read_timeout_seconds:g} s, drain {timings.drain_seconds:g} s; reads after "
        f"the exit watched for {timings.grace_seconds:g} s; {runs} a cell. Exit ms: from the "
        "body's end to the block's exit; after stop, after exit: the follower's reads the agent "
        "saw after the body ended, after the block exited; failed: those it failed."
    )


_COLUMNS = (
    ("backend", 7),
    ("way", 6),
    ("step", 9),
    ("agent", 7),
    ("ended", 5),
    ("exit ms", 13),
    ("after stop", 10),
    ("after exit", 10),
    ("failed", 6),
    ("end.json", 21),
    ("bounds", 6),
)
_HEADER = "  ".join(name.ljust(width) for name, width in _COLUMNS).rstrip()


def _row(row: CellSummary) -> str:
    figures = row.figures()
    several = figures["runs"] > 1
    exits = figures["exit_ms"]
    exit_ms = f"{exits['median']:.1f} / {exits['max']:.1f}" if several else f"{exits['max']:.1f}"
    mark = figures["end_json"]
    if mark["written"] < figures["runs"]:
        end = (
            "missing" if not mark["written"] else f"missing in {figures['runs'] - mark['written']}"
        )
    else:
        complete = {(True,): "complete", (False,): "incomplete"}.get(
            tuple(mark["complete"]), "mixed"
        )
        end = f"{'/'.join(mark['state'])}, {complete}"
    cells = (
        figures["backend"],
        figures["way"],
        figures["outcome"],
        figures["agent"],
        "yes" if figures["ended"] else "NO",
        exit_ms,
        _count(figures["reads_after_stop"], several),
        str(figures["reads_after_exit"]),
        _count(figures["failed_reads"], several),
        end,
        "ok" if figures["ok"] else "BROKEN",
    )
    line = "  ".join(text.ljust(width) for text, (_, width) in zip(cells, _COLUMNS, strict=True))
    broken = "".join(f"\n    broken: {problem}" for problem in figures["problems"])
    return line.rstrip() + broken


def _count(spread: dict[str, float], several: bool) -> str:
    if several:
        return f"{spread['median']:g} / {spread['max']:g}"
    return f"{spread['max']:g}"


def verdict(rows: Sequence[CellSummary], seconds: float) -> str:
    broken = [row for row in rows if not row.ok]
    if not broken:
        return (
            f"follower validate: ok: every step ended within its bounds and no follower "
            f"outlived its step ({len(rows)} cells, {seconds:.1f} s)"
        )
    return (
        f"follower validate: BROKEN: {len(broken)} of {len(rows)} cells broke a bound "
        f"(see 'broken:' above; {seconds:.1f} s)"
    )


def table_json(
    rows: Sequence[CellSummary],
    timings: Timings,
    repeats: int,
    not_run: dict[str, str],
    seconds: float,
    ways: Sequence[str] = WAYS,
) -> dict[str, Any]:
    return {
        "ok": all(row.ok for row in rows),
        "timings": attrs.asdict(timings),
        "repeats": repeats,
        "backends": sorted({row.cell.backend for row in rows}),
        "ways": list(ways),
        "not_run": not_run,
        "seconds": round(seconds, 3),
        "cells": [row.figures() for row in rows],
    }


def _write_json(report: dict[str, Any], path: str) -> None:
    text = json.dumps(report, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)


def _check_writable(path: str | None) -> None:
    """Refuse a JSON path that cannot be written before the table runs, not after."""
    if path is None or path == "-":
        return
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"--json {path}: cannot write it: {exc.strerror}") from None
