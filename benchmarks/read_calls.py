"""Python calls per read of a turn's follower, counted by cProfile: a figure no busy machine moves.

CPU per read moves with the machine by a quarter from run to run on these shared cores
(docs/benchmarks.md), so a change of a few per cent cannot be seen in it. The calls a
read makes can: ``--turns`` turns (default 20) follow the lean agent (``lean_agent.py``,
another process) at a ``--poll`` of 0.2 s into a store that keeps nothing, and once they
have run ``--warm`` seconds, cProfile counts every Python call (and every call of a C
function) of the process for ``--seconds`` seconds. The figure is the calls over the
reads made meanwhile: the whole of a read's path (the wait, the beat's check, the
exchange, the page, the sink, the policy), the event loop's share included, on asyncio
and trio. The profiler slows every call, so it says nothing of time: the functions called
most often are listed as where a read's calls go. Figures, never assertions.

Usage: ``python benchmarks/read_calls.py [--turns 20] [--poll 0.2] [--warm 2]
[--seconds 4] [--top 12] [--quick] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import re
import sys
from typing import Any

import anyio
import anyio.lowlevel
from _counting_store import NullStore
from _measure import machine, run_about
from streams import Agent

from follower import LiveTurns

BACKENDS = ("asyncio", "trio")


async def profiled_reads(url: str, args: argparse.Namespace, profile: cProfile.Profile) -> int:
    """The reads ``args.turns`` turns made while ``profile`` counted."""
    reads: list[int] = []
    counting = anyio.Event()
    counted = anyio.Event()

    async def turn(turns: LiveTurns, index: int) -> None:
        async with turns.following(f"turn-{index}") as live:
            live.follow(f"task-{index}")
            await counting.wait()
            before = live.statistics().reads
            await counted.wait()
            reads.append(live.statistics().reads - before)

    async with (
        LiveTurns(
            url + "/ext/trajectory",
            NullStore(),
            "s/",
            poll_interval_seconds=args.poll,
            drain_seconds=args.poll,  # the agent's tasks never end: the drain does
        ) as turns,
        anyio.create_task_group() as tg,
    ):
        for index in range(args.turns):
            tg.start_soon(turn, turns, index)
        await anyio.sleep(args.warm)
        counting.set()
        await anyio.lowlevel.checkpoint()  # each turn notes its reads so far
        profile.enable()
        await anyio.sleep(args.seconds)
        profile.disable()
        counted.set()
    return sum(reads)


def measure(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    agent = Agent(interval=0.1)
    try:
        profile = cProfile.Profile()
        reads = anyio.run(profiled_reads, agent.url, args, profile, backend=backend)
    finally:
        agent.close()
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    calls = sum(row[1] for row in stats.values())
    most = sorted(stats.items(), key=lambda item: -item[1][1])[: args.top]
    return {
        "backend": backend,
        "reads": reads,
        "calls": calls,
        "calls_per_read": calls / reads if reads else None,
        "most_called": [
            {"function": f"{_short(where)}:{line} {name}", "calls_per_read": row[1] / reads}
            for (where, line, name), row in most
            if reads
        ],
    }


def _short(path: str) -> str:
    """A function's file from its package down (the stdlib's, site-packages', the library's)."""
    return re.sub(r"^.*/(site-packages|lib/python3\.[0-9]+)/|^.*/(?=follower/)", "", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--turns", type=int, default=20, help="turns following (default 20)")
    parser.add_argument("--poll", type=float, default=0.2, help="poll interval, s (0.2)")
    parser.add_argument("--warm", type=float, default=2.0, help="seconds before counting (2)")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds counted (4)")
    parser.add_argument("--top", type=int, default=12, help="functions listed (12)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3 turns, 1 s")
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.turns, args.warm, args.seconds, args.top = 3, 0.5, 1.0, 5
    print(
        f"read_calls: {args.turns} turns of the lean agent at a {args.poll:g} s poll, calls "
        f"counted for {args.seconds:g} s after {args.warm:g} s"
    )
    rows = [measure(backend, args) for backend in BACKENDS]
    for row in rows:
        per_read = row["calls_per_read"]
        shown = "no read" if per_read is None else f"{per_read:.0f} calls a read"
        print(f"\n{row['backend']}: {row['reads']} reads, {shown}; called most, a read:")
        for most in row["most_called"]:
            print(f"  {most['calls_per_read']:6.1f}  {most['function']}")
    if args.json:
        with open(args.json, "w") as out:
            document = {
                "benchmark": "read_calls",
                "turns": args.turns,
                "poll": args.poll,
                "seconds": args.seconds,
                "machine": machine(),
                "about": run_about(),
                "results": rows,
            }
            json.dump(document, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
