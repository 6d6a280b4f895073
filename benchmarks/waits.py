"""CPU of a follower's wait for its next read, by how it waits: what bounds a loop of thousands.

A follower of cursor reads waits once a read, so at 5,000 followers and a 1 s poll a
loop makes 5,000 waits a second, and what one costs is paid 5,000 times. N tasks
(default 1,000) each wait ``--waits`` times for deadlines ``--interval`` apart, their
first deadlines spread over the interval as a loop's followers' are, in three ways:

- ``timekeeper``: the library's wait with a turn's own stop (``follower._reading._keeper``):
  the waiting task parks on an event of its own in the loop's heap of waits, one of
  the parked tasks in turn sleeps until the earliest deadline and wakes every wait due,
  and setting stop wakes the task at once;
- ``scope``: the library's wait with a caller's event (``follow_trajectory(stop=)``),
  and every wait's before the timekeeper: a cancel scope with the deadline around the
  event, which the deadline ends by cancelling the wait;
- ``sleep``: ``anyio.sleep_until``: a timer each and no way to end early (stop would
  not wake it): the floor of a loop with a task and a timer for each follower.

Each figure is the process's CPU (``time.process_time()``) over the waits, per wait,
the median of ``--repeats`` runs, on asyncio and trio; ratios are against
``scope`` on the same backend, in the same run. Figures, never assertions.

Usage: ``python benchmarks/waits.py [--tasks 1000] [--waits 20] [--interval 0.05]
[--repeats 3] [--quick] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from _measure import machine, run_about

from follower._reading._keeper import TurnStop
from follower._reading._shell import wait_or_stop

BACKENDS = ("asyncio", "trio")


Way = Callable[[float], Awaitable[None]]


def ways() -> dict[str, Callable[[], Way]]:
    """Each way, made afresh for each waiting task (on that run's event loop)."""

    def timekeeper() -> Way:
        stop = TurnStop()

        async def wait(due: float) -> None:
            await wait_or_stop(stop, due - anyio.current_time())

        return wait

    def scope() -> Way:
        stop = anyio.Event()

        async def wait(due: float) -> None:
            await wait_or_stop(stop, due - anyio.current_time())

        return wait

    def sleep() -> Way:
        return anyio.sleep_until

    return {"timekeeper": timekeeper, "scope": scope, "sleep": sleep}


async def one_run(make: Callable[[], Way], tasks: int, waits: int, interval: float) -> float:
    """CPU µs per wait of ``tasks`` tasks waiting ``waits`` times each."""
    spread = random.Random(0)

    async def waiter(first: float) -> None:
        wait = make()  # a wait of its own, as each follower has its turn's stop
        due = anyio.current_time() + first
        for _ in range(waits):
            await wait(due)
            due += interval

    began = time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(tasks):
            tg.start_soon(waiter, spread.random() * interval)
    return (time.process_time() - began) / (tasks * waits) * 1e6


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for backend in BACKENDS:
        runs: dict[str, list[float]] = {name: [] for name in ways()}
        for _ in range(args.repeats):  # the ways alternate, so drift falls on each
            for name, make in ways().items():
                cpu = anyio.run(
                    one_run, make, args.tasks, args.waits, args.interval, backend=backend
                )
                runs[name].append(cpu)
        scope = statistics.median(runs["scope"])
        for name, figures in runs.items():
            median = statistics.median(figures)
            rows.append(
                {
                    "backend": backend,
                    "way": name,
                    "cpu_us_per_wait": median,
                    "runs": figures,
                    "vs_scope": median / scope,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=1000, help="waiting tasks (default 1,000)")
    parser.add_argument("--waits", type=int, default=20, help="waits a task (default 20)")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between deadlines")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each way (default 3)")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 50 tasks, 5 waits, 1 run"
    )
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.waits, args.repeats = 50, 5, 1
    print(
        f"waits: {args.tasks:,} tasks, {args.waits} waits each, deadlines {args.interval:g} s "
        f"apart, median of {args.repeats} run(s); CPU µs per wait"
    )
    rows = measure(args)
    print(f"\n{'backend':8} {'way':11} {'µs/wait':>8} {'vs scope':>9}")
    for row in rows:
        print(
            f"{row['backend']:8} {row['way']:11} {row['cpu_us_per_wait']:8.1f} "
            f"{row['vs_scope']:8.2f}x"
        )
    if args.json:
        with open(args.json, "w") as out:
            document = {
                "benchmark": "waits",
                "tasks": args.tasks,
                "waits": args.waits,
                "interval": args.interval,
                "repeats": args.repeats,
                "machine": machine(),
                "about": run_about(),
                "results": rows,
            }
            json.dump(document, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
