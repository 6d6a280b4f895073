"""Teardown: from a step's body ending to its block's exit, per outcome and agent, over many runs.

The cells of ``follower validate``, each run ``--repeats`` times (default 100)
per backend, measured by the same code (``follower/_cli/_fault_drill.py``): a step
follows a task of the reference agent on loopback; the agent answers two reads,
then closes every connection (close), never answers (silent), answers 503
(5xx), or stays healthy; the body is cancelled, raises or returns once the
follower has met the fault. Per cell it reports the median and the worst of the
time from the body's end to the block's exit, and the reads the agent saw after
the body ended.

Figures, not tests: nothing is asserted. The targets (issue 10) are printed
beside them: cancelled / raises: no read after the body ended, exit under 5 ms
median; returns against an agent that is gone: at most 1 read after stop, exit
under 20 ms median. (Against a silent agent the step's last read is still in
flight when the body returns: the exit waits for its read timeout, by design.)

The old follower (agentenv-framework 0.9.1364, ``--old-python``: the venv
``tools/old-follower-venv`` makes; absent, named as not run) runs the same cells
on asyncio in a child on its venv (``_old_teardown.py``; ``follower`` is not
installed there), against a reference agent served here on asyncio. Its reads
after stop are counted by when they reached the agent's log, the body's end and the
exit coming from the child on the same monotonic clock; ours are counted by marks in
the log (``_fault_drill``), which a busy machine cannot shift. It keeps its own read timeout (30 s)
and drain (60 s), and after stop retries a failed read every 0.2 s: each of its
runs is awaited at most ``--old-cap`` seconds (default 2) and shown as "> cap"
with the reads counted until then; it runs ``--old-repeats`` times a cell
(default 20). Each of our asyncio cells is also given as a ratio to the old one
("<" where the old block was still running at the cap), and one target per
outcome goes into the JSON's ``"targets"`` for ``summary.py``.

Usage: ``python benchmarks/teardown.py [--repeats 100] [--quick] [--backend
asyncio|trio] [--old-python PATH] [--old-repeats 20] [--old-cap 2] [--json
PATH]``; ``--quick`` is 10 runs a cell (3 of the old). With the defaults the
old side is bounded by 12 cells x 20 runs x (the 2 s cap + set-up), and most
cells are cut at the cap: that bound, not our side, sets how long a run takes
(docs/benchmarks.md has the times of a run).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import attrs
from _measure import run_about
from anyio.streams.buffered import BufferedByteReceiveStream

from follower._a2a._client import connect_agent
from follower._cli._fault_drill import AGENTS, OUTCOMES, QUICK, _failed, _fault
from follower._cli._fault_table import (
    CellSummary,
    backends_to_run,
    run_cells,
    table_json,
)
from follower._http._clients import leased_client
from follower.testing import ReferenceAgent, TaskScript, serve_agent

HERE = Path(__file__).resolve().parent
DEFAULT_OLD_PYTHON = HERE.parent / ".venvs" / "old-follower" / "bin" / "python"

# Shorter than validate's --quick, so that 100 runs a cell take minutes: the teardown
# of a cancelled, raising or gone-agent step does not depend on them.
BENCH = attrs.evolve(
    QUICK,
    poll_interval_seconds=0.02,
    read_timeout_seconds=0.1,
    drain_seconds=0.2,
    grace_seconds=0.05,
)
QUICK_REPEATS = 10
# The old follower retries a failed read every 0.2 s after stop, for up to its 60 s drain
# (or forever once a cancel is lost): each of its runs is cut at the cap, and fewer are run.
OLD_REPEATS = 20
QUICK_OLD_REPEATS = 3
OLD_CAP_SECONDS = 2.0
PROMPT_TARGET_MS = 5.0
GONE_RETURN_TARGET_MS = 20.0


def target(figures: dict[str, Any]) -> dict[str, Any] | None:
    """The issue's target for this cell, and whether the figures meet it; None if it has none."""
    outcome, agent = figures["outcome"], figures["agent"]
    median_ms = figures["exit_ms"]["median"]
    reads = figures["reads_after_stop"]["max"]
    if outcome in ("cancelled", "raises"):
        wanted = f"0 reads after the body ended, exit < {PROMPT_TARGET_MS:g} ms median"
        met = reads == 0 and median_ms < PROMPT_TARGET_MS
    elif agent in ("close", "5xx"):
        wanted = f"<= 1 read after stop, exit < {GONE_RETURN_TARGET_MS:g} ms median"
        met = reads <= 1 and median_ms < GONE_RETURN_TARGET_MS
    else:
        return None
    return {"target": wanted, "met": met}


def row(figures: dict[str, Any]) -> str:
    exits, reads = figures["exit_ms"], figures["reads_after_stop"]
    aim = target(figures)
    verdict = "-" if aim is None else ("met" if aim["met"] else "MISSED")
    bounds = "ok" if figures["ok"] else "BROKEN"
    return (
        f"{figures['backend']:<8} {figures['outcome']:<10} {figures['agent']:<8} "
        f"{exits['median']:>10.2f} {exits['max']:>9.2f} {reads['median']:>7g} {reads['max']:>5g} "
        f"{figures['failed_reads']['median']:>7g}  {bounds:<6} {verdict}"
    )


# --- the old follower, in a child on its venv (_old_teardown.py) ---------------------


async def old_cells(python: Path, repeats: int, cap: float, on_row: Any) -> list[dict[str, Any]]:
    """Every cell ``repeats`` times for the old follower; its figures, as ``CellSummary``'s."""
    command = [str(python), str(HERE / "_old_teardown.py")]
    command += ["--poll", str(BENCH.poll_interval_seconds), "--cap", str(cap)]
    rows = []
    async with await anyio.open_process(command) as child, leased_client(None) as a2a:
        assert child.stdin is not None
        assert child.stdout is not None
        lines = BufferedByteReceiveStream(child.stdout)

        async def say(line: str) -> None:
            await child.stdin.send(line.encode() + b"\n")  # type: ignore[union-attr]

        async def hear() -> str:
            with anyio.fail_after(cap + 30):
                return (await lines.receive_until(b"\n", 1 << 20)).decode()

        if await hear() != "READY":
            raise RuntimeError("the old follower's child did not start")
        for outcome in OUTCOMES:
            for agent in AGENTS:
                runs = []
                for repeat in range(repeats):
                    turn_id = f"{outcome}-{agent}-{repeat + 1}"
                    runs.append(await old_run(outcome, agent, turn_id, cap, a2a, say, hear))
                rows.append(old_figures(outcome, agent, runs, cap))
                on_row(rows[-1])
        await say("EXIT")
    return rows


async def old_run(
    outcome: str, agent_name: str, turn_id: str, cap: float, a2a: Any, say: Any, hear: Any
) -> dict[str, Any]:
    """One run of a cell against a fresh reference agent served here, on asyncio."""
    # Served on asyncio, the agent stamps its log with time.monotonic(), as the child does.
    agent = ReferenceAgent(
        script=TaskScript(events=100_000, interval_seconds=BENCH.poll_interval_seconds / 4),
        log_requests=True,
    )
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(BENCH.setup_seconds):
            url = await tg.start(serve_agent, agent)
            async with connect_agent(url, client=a2a) as session:
                task = await session.send_message("teardown")
                endpoint = session.trajectory_endpoint
            assert endpoint is not None
            order = {"endpoint": endpoint, "task_id": task.id, "turn_id": turn_id}
            await say("RUN " + json.dumps({**order, "outcome": outcome, "agent": agent_name}))
            await agent.wait_reads(BENCH.healthy_reads)
            agent.fault = _fault(agent_name)
            await agent.wait_requests(len(agent.request_log()) + 1)
        await say("BAD")
        answer = json.loads(await hear())
        tg.cancel_scope.cancel()
    path = urlsplit(endpoint).path
    log = [r for r in agent.request_log() if r.path in (None, path)]
    until = answer["exited"] if answer["exited"] is not None else answer["body_ended"] + cap
    return {
        **answer,
        "exit_ms": None if answer["exited"] is None else 1000 * (until - answer["body_ended"]),
        "reads_after_stop": sum(answer["body_ended"] <= r.at < until for r in log),
        "failed_reads": sum(_failed(r) for r in log),
    }


def old_figures(outcome: str, agent: str, runs: list[dict[str, Any]], cap: float) -> dict[str, Any]:
    """A cell's runs summed up as ours are: median and max; a capped run counts as > cap."""
    capped = sum(run["capped"] for run in runs)
    # A capped run's exit is later than the cap: it sorts last, and is shown as "> cap".
    exits = sorted(run["exit_ms"] if run["exit_ms"] is not None else float("inf") for run in runs)
    reads = [run["reads_after_stop"] for run in runs]
    failed = [run["failed_reads"] for run in runs]
    return {
        "backend": "asyncio",
        "outcome": outcome,
        "agent": agent,
        "runs": len(runs),
        "capped": capped,
        "cap_ms": 1000 * cap,
        "leaked": sum(run["leaked"] for run in runs),
        "exit_ms": {"median": _finite(statistics.median(exits)), "max": _finite(exits[-1])},
        "reads_after_stop": {"median": statistics.median(reads), "max": max(reads)},
        "failed_reads": {"median": statistics.median(failed), "max": max(failed)},
        "end_json": sorted({json.dumps(run["end"]) for run in runs}),
    }


def _finite(ms: float) -> float | None:
    """None for a run cut at the cap (JSON has no infinity)."""
    return None if ms == float("inf") else ms


def exit_text(ms: float | None, cap_ms: float) -> str:
    return f"> {cap_ms:.0f}" if ms is None else f"{ms:.2f}"


def old_row(figures: dict[str, Any]) -> str:
    exits, reads = figures["exit_ms"], figures["reads_after_stop"]
    cap = figures["cap_ms"]
    capped = f"{figures['capped']} of {figures['runs']} capped" if figures["capped"] else ""
    return (
        f"{'old':<8} {figures['outcome']:<10} {figures['agent']:<8} "
        f"{exit_text(exits['median'], cap):>10} {exit_text(exits['max'], cap):>9} "
        f"{reads['median']:>7g} {reads['max']:>5g} {figures['failed_reads']['median']:>7g}  "
        f"{capped}"
    )


def ratios(ours: list[dict[str, Any]], old: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell, ours on asyncio / old: exit median and max (None where old was capped)."""
    theirs = {(cell["outcome"], cell["agent"]): cell for cell in old}
    out = []
    for cell in ours:
        other = theirs.get((cell["outcome"], cell["agent"]))
        if cell["backend"] != "asyncio" or other is None:
            continue
        ratio: dict[str, Any] = {"outcome": cell["outcome"], "agent": cell["agent"]}
        for key in ("median", "max"):
            old_ms = other["exit_ms"][key]
            ratio[f"exit_{key}"] = cell["exit_ms"][key] / old_ms if old_ms else None
            # A capped old run: ours is at most this fraction of it.
            ratio[f"exit_{key}_at_most"] = old_ms is None
            if old_ms is None:
                ratio[f"exit_{key}"] = cell["exit_ms"][key] / other["cap_ms"]
        ratio["reads_after_stop_ours"] = cell["reads_after_stop"]["max"]
        ratio["reads_after_stop_old"] = other["reads_after_stop"]["max"]
        out.append(ratio)
    return out


def ratio_line(ratio: dict[str, Any]) -> str:
    def shown(key: str) -> str:
        return ("< " if ratio[f"{key}_at_most"] else "") + f"{ratio[key]:.3g}x"

    return (
        f"  {ratio['outcome']:<10} {ratio['agent']:<8} exit median {shown('exit_median'):>10}, "
        f"max {shown('exit_max'):>10}; reads after stop (max) ours "
        f"{ratio['reads_after_stop_ours']:g}, old {ratio['reads_after_stop_old']:g}"
    )


# --- the summary's targets ---------------------------------------------------------------


TARGET_IDS = {
    "cancelled": ("teardown.cancelled", "cancelled: reads after the body, exit median"),
    "raises": ("teardown.raises", "raises: reads after the body, exit median"),
    "returns": (
        "teardown.returns_dead_agent",
        "returns, dead agent: reads after stop, exit median",
    ),
}


def targets(cells: list[dict[str, Any]], old: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One target per outcome, over every cell it covers, on every backend: the worst of them."""
    out = []
    for outcome, (id_, what) in TARGET_IDS.items():
        covered = [c for c in cells if c["outcome"] == outcome and c["target"] is not None]
        bound = (
            f"0 reads, < {PROMPT_TARGET_MS:g} ms"
            if outcome != "returns"
            else f"<= 1 read, < {GONE_RETURN_TARGET_MS:g} ms"
        )
        if not covered:
            out.append(
                {
                    "id": id_,
                    "what": what,
                    "bound": bound,
                    "measured": None,
                    "shown": "not measured",
                    "met": None,
                }
            )
            continue
        worst = max(covered, key=lambda c: c["exit_ms"]["median"])
        reads = max(c["reads_after_stop"]["max"] for c in covered)
        shown = f"{reads:g} reads, {worst['exit_ms']['median']:.2f} ms ({worst['agent']})"
        theirs = [
            c
            for c in old
            if c["outcome"] == outcome and any(c["agent"] == mine["agent"] for mine in covered)
        ]
        if theirs:
            # The old follower's worst cell of those: a lost cancel shows here, not its best.
            slow = max(theirs, key=lambda c: c["exit_ms"]["median"] or float("inf"))
            old_reads = max(c["reads_after_stop"]["max"] for c in theirs)
            shown += (
                f"; old: {old_reads:g} reads, "
                f"{exit_text(slow['exit_ms']['median'], slow['cap_ms'])} ms ({slow['agent']})"
            )
        out.append(
            {
                "id": id_,
                "what": what,
                "bound": bound,
                "measured": {
                    "reads_after_stop_max": reads,
                    "exit_ms_median": worst["exit_ms"]["median"],
                },
                "shown": shown,
                "met": all(c["target"]["met"] for c in covered),
            }
        )
    return out


HEADER = (
    f"{'backend':<8} {'step':<10} {'agent':<8} {'exit ms p50':>10} {'max':>9} "
    f"{'reads/stop p50':>7} {'max':>5} {'failed':>7}  {'bounds':<6} target"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=None, help="runs a cell (default: 100)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REPEATS} runs a cell")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default=None)
    parser.add_argument("--json", metavar="PATH", default=None, help="write the figures here")
    parser.add_argument(
        "--old-python",
        type=Path,
        default=DEFAULT_OLD_PYTHON,
        help="the old follower's venv python (tools/old-follower-venv); absent: ours only",
    )
    parser.add_argument(
        "--old-repeats",
        type=int,
        default=None,
        help=f"runs a cell of the old follower (default: {OLD_REPEATS}; --quick: "
        f"{QUICK_OLD_REPEATS})",
    )
    parser.add_argument(
        "--old-cap",
        type=float,
        default=OLD_CAP_SECONDS,
        help=f"longest wait for an old block's exit, seconds (default: {OLD_CAP_SECONDS:g})",
    )
    args = parser.parse_args()
    repeats = args.repeats or (QUICK_REPEATS if args.quick else 100)
    old_repeats = args.old_repeats or (QUICK_OLD_REPEATS if args.quick else OLD_REPEATS)
    backends, not_run = backends_to_run(args.backend)
    for name, reason in not_run.items():
        print(f"teardown: not run on {name}: {reason}", file=sys.stderr)
    has_old = args.old_python.exists()
    if not has_old:
        not_run["old"] = f"no {args.old_python} (tools/old-follower-venv)"
        print(f"teardown: old follower not run: {not_run['old']}", file=sys.stderr)
    # A failed read is logged each time; here they are counted instead.
    logging.getLogger("follower").setLevel(logging.ERROR)
    print(
        f"teardown: {repeats} runs a cell; poll {BENCH.poll_interval_seconds:g} s, read "
        f"timeout {BENCH.read_timeout_seconds:g} s, drain {BENCH.drain_seconds:g} s; "
        f"Python {platform.python_version()}",
        flush=True,
    )
    print(HEADER, flush=True)
    started = time.monotonic()
    rows: list[CellSummary] = []
    for backend in backends:
        rows += run_cells(
            backend,
            BENCH,
            repeats=repeats,
            on_row=lambda summary: print(row(summary.figures()), flush=True),
        )
    seconds = time.monotonic() - started
    report = table_json(rows, BENCH, repeats, not_run, seconds)
    report["benchmark"] = "teardown"
    report["python"] = platform.python_version()
    report["machine"] = platform.machine()
    report["about"] = run_about()
    for cell in report["cells"]:
        cell["target"] = target(cell)
    old: list[dict[str, Any]] = []
    if has_old:
        print(
            f"\nthe old follower (agentenv-framework 0.9.1364, asyncio): {old_repeats} runs a "
            f"cell, poll {BENCH.poll_interval_seconds:g} s, its own read timeout (30 s) and "
            f"drain (60 s); each exit awaited at most {args.old_cap:g} s",
            flush=True,
        )
        print(HEADER, flush=True)
        began = time.monotonic()
        old = anyio.run(
            old_cells,
            args.old_python,
            old_repeats,
            args.old_cap,
            lambda figures: print(old_row(figures), flush=True),
            backend="asyncio",
        )
        report["old_seconds"] = round(time.monotonic() - began, 3)
    by_cell = ratios(report["cells"], old)
    if by_cell:
        print("\nours on asyncio / old, same run (< : the old block was still running at the cap):")
        for ratio in by_cell:
            print(ratio_line(ratio))
    report["old"] = {"repeats": old_repeats, "cap_seconds": args.old_cap, "cells": old}
    report["ratio_to_old"] = by_cell
    report["targets"] = targets(report["cells"], old)
    aims = [cell["target"] for cell in report["cells"] if cell["target"] is not None]
    missed = sum(not aim["met"] for aim in aims)
    print(
        f"teardown: {len(aims) - missed} of {len(aims)} targets met; validate's bounds "
        f"{'kept in every run' if report['ok'] else 'BROKEN in some runs'} "
        f"({time.monotonic() - started:.0f} s)"
    )
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump(report, stream, indent=2)
            stream.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
