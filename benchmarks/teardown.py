"""Teardown: from a step's body ending to its block's exit, per outcome and agent, over many runs.

The cells of ``follower validate``, each run ``--repeats`` times (default 100)
per backend, measured by the same code (``follower/_validate.py``): a step
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

Usage: ``python benchmarks/teardown.py [--repeats 100] [--quick] [--backend
asyncio|trio] [--json PATH]``; ``--quick`` is 10 runs a cell.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from typing import Any

import attrs

from follower._validate import QUICK
from follower._validate_table import (
    CellSummary,
    backends_to_run,
    run_cells,
    table_json,
)

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
    args = parser.parse_args()
    repeats = args.repeats or (QUICK_REPEATS if args.quick else 100)
    backends, not_run = backends_to_run(args.backend)
    for name, reason in not_run.items():
        print(f"teardown: not run on {name}: {reason}", file=sys.stderr)
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
    for cell in report["cells"]:
        cell["target"] = target(cell)
    aims = [cell["target"] for cell in report["cells"] if cell["target"] is not None]
    missed = sum(not aim["met"] for aim in aims)
    print(
        f"teardown: {len(aims) - missed} of {len(aims)} targets met; validate's bounds "
        f"{'kept in every run' if report['ok'] else 'BROKEN in some runs'} ({seconds:.0f} s)"
    )
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump(report, stream, indent=2)
            stream.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
