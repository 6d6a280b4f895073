"""Throughput: one follower draining a long trajectory of small events into a store.

End to end through ``following_live_trajectory``: the agent serves full pages
(1,000 events each, the most a read returns) as fast as it is asked, the
follower validates each page, encodes its chunk and stores it, write-once, until
the terminal page. Per store it prints events/s and MB/s (of chunk bytes
stored), the follower process's CPU per event, and checks that the end mark
counts every event. Nothing is asserted against a target.

The old follower (agentenv-framework 0.9.1364, ``--old-python``: the venv
``tools/old-follower-venv`` makes; absent, its side is named as not run) drains
the same trajectory from the same agent in a child process on its venv
(``_old_throughput.py``, whose docstring says what it changes for the run: its
60 s drain bound, and with the mock agent the transport its own
``httpx.AsyncClient()`` reads from), into its own kind of store: a dict behind
its ``ObjectStore`` ABC, and its ``LocalFilesystemObjectStore`` (which does not
fsync; ours does, before its write-once link). The sides alternate which goes
first, store by store; each figure is also printed and written as a ratio
ours / old, and the targets (issue 10) go into the JSON's ``"targets"``.

Agents (``--agent``):

- ``mock`` (default): in the follower's process, an ``httpx.MockTransport`` that
  answers each read with a page encoded before the clock starts. What is
  measured is the follower alone (httpx's client layer included, no socket):
  the reference agent builds and encodes every page on each read, which costs
  it more than the follower spends storing one, so behind it the figure would
  be the agent's.
- ``reference``: the reference agent in another process (``python -m follower
  agent``), over loopback: what a real deployment adds, HTTP and the agent
  included.

    python benchmarks/throughput.py                      # 1,000,000 events, both stores
    python benchmarks/throughput.py --quick              # 20,000 events, a few seconds
    python benchmarks/throughput.py --agent reference --json out.json
    python benchmarks/throughput.py --old-python .venvs/old-follower/bin/python
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
from _measure import CANNED_TASK, PAGE_EVENTS, RESULT_MARK, canned_agent, run_about

from follower import FilesystemStore, MemoryStore, ObjectStore, following_live_trajectory

HERE = Path(__file__).resolve().parent
DEFAULT_OLD_PYTHON = HERE.parent / ".venvs" / "old-follower" / "bin" / "python"
PREFIX = "bench/"
TURN = "turn-1"


@contextmanager
def reference_agent(events: int) -> Iterator[str]:
    """``python -m follower agent`` in a child process, every event visible at once."""
    command = [sys.executable, "-m", "follower", "agent", "--port", "0"]
    command += ["--events", str(events), "--interval", "0", "--event-bytes", "0"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if "serving on" not in line:
            raise RuntimeError(f"the reference agent did not start: {line!r}")
        yield line.split("serving on", 1)[1].strip()
    finally:
        child.terminate()
        child.wait(timeout=10)


async def start_reference_task(url: str) -> tuple[str, str]:
    from follower._a2a._client import connect_agent

    async with connect_agent(url) as agent:
        if agent.trajectory_endpoint is None:
            raise RuntimeError("the reference agent offers no live trajectory")
        task = await agent.send_message("go")
        return agent.trajectory_endpoint, task.id


async def stored_chunk_bytes(store: ObjectStore) -> int:
    keys = await store.list(f"{PREFIX}{TURN}/live/")
    return sum([len(await store.get(key)) for key in keys if key.endswith(".jsonl")])


async def drain_once(
    store: ObjectStore, endpoint: str, task_id: str, client: httpx.AsyncClient | None
) -> tuple[float, float]:
    """Wall and CPU seconds of one turn's block, from entry to exit."""
    wall, cpu = time.perf_counter(), time.process_time()
    async with following_live_trajectory(
        endpoint,
        store,
        PREFIX,
        TURN,
        poll_interval_seconds=1.0,
        drain_seconds=3600.0,
        client=client,
    ) as turn:
        turn.follow(task_id)
        # The body returns at once: the drain reads every page, has_more after has_more.
    return time.perf_counter() - wall, time.process_time() - cpu


async def run_one(kind: str, args: argparse.Namespace, url: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=args.tmp) as folder:
        root = Path(folder) if kind == "filesystem" else None
        store: ObjectStore = MemoryStore() if root is None else FilesystemStore(root)
        client: httpx.AsyncClient | None = None
        if url is None:
            client = httpx.AsyncClient(transport=canned_agent(args.events))
            endpoint, task_id = "http://agent.test/ext/trajectory", CANNED_TASK
        else:
            endpoint, task_id = await start_reference_task(url)
        try:
            wall, cpu = await drain_once(store, endpoint, task_id, client)
        finally:
            if client is not None:
                await client.aclose()
        end = json.loads(await store.get(f"{PREFIX}{TURN}/live/end.json"))
        stored = await stored_chunk_bytes(store)
    return {
        "side": "ours",
        "store": kind,
        "events": args.events,
        "seconds": wall,
        "events_per_second": args.events / wall,
        "mb_per_second": stored / wall / 1e6,
        "cpu_us_per_event": cpu / args.events * 1e6,
        "chunk_bytes": stored,
        "end": end,
        "all_stored": end == {"state": "completed", "next": args.events, "complete": True},
    }


def run_old(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """The old follower's drain into its own kind of store, in a child on its venv."""
    command = [str(args.old_python), str(HERE / "_old_throughput.py")]
    command += ["--store", kind, "--events", str(args.events)]
    if args.tmp is not None:
        command += ["--tmp", args.tmp]
    with contextlib.ExitStack() as stack:
        if args.agent == "reference":
            url = stack.enter_context(reference_agent(args.events))
            endpoint, task_id = anyio.run(start_reference_task, url)
            command += ["--endpoint", endpoint, "--task-id", task_id]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return dict(json.loads(line[len(RESULT_MARK) :]))
    raise RuntimeError(f"the old follower's drain into {kind} exited {done.returncode}")


def run_ours(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    async def one() -> dict[str, Any]:
        if args.agent == "reference":
            # A fresh agent a run: its tasks are kept, and one task is read once.
            with reference_agent(args.events) as url:
                return await run_one(kind, args, url)
        return await run_one(kind, args, None)

    return anyio.run(one, backend=args.backend)


def ratios(ours: list[dict[str, Any]], old: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per store, ours / old: events/s (higher is better) and CPU per event (lower is better)."""
    theirs = {row["store"]: row for row in old}
    out = []
    for row in ours:
        other = theirs.get(row["store"])
        if other is None:
            continue
        out.append(
            {
                "store": row["store"],
                "events_per_second": row["events_per_second"] / other["events_per_second"],
                "cpu_us_per_event": row["cpu_us_per_event"] / other["cpu_us_per_event"],
            }
        )
    return out


TARGETS = {"memory": 200_000, "filesystem": 100_000}
STORE_NAMES = {"memory": "MemoryStore", "filesystem": "FilesystemStore"}


def targets(ours: list[dict[str, Any]], by_store: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 10's targets for this benchmark, for ``summary.py``; the ratio to old in ``shown``."""
    measured = {row["store"]: row for row in ours}
    ratio = {row["store"]: row["events_per_second"] for row in by_store}
    out = []
    for kind, bound in TARGETS.items():
        row = measured.get(kind)
        rate = None if row is None else row["events_per_second"]
        shown = "not measured" if rate is None else f"{rate:,.0f}/s"
        if kind in ratio:
            shown += f" ({ratio[kind]:.2f}x old)"
        out.append(
            {
                "id": f"throughput.{kind}_events_per_second",
                "what": f"small events/s into {STORE_NAMES[kind]}",
                "bound": f">= {bound:,}",
                "measured": rate,
                "shown": shown,
                "met": None if rate is None else rate >= bound and row["all_stored"],
            }
        )
    return out


def print_table(
    rows: list[dict[str, Any]], by_store: list[dict[str, Any]], args: argparse.Namespace
) -> None:
    print(
        f"Python {sys.version.split()[0]}, ours on {args.backend} (old: asyncio), "
        f"agent {args.agent}, {args.events:,} events in pages of {PAGE_EVENTS}"
    )
    print(
        f"{'side':<5} {'store':<11} {'events/s':>10} {'target':>9} {'MB/s':>7} "
        f"{'CPU us/event':>13} {'seconds':>8}  end mark"
    )
    for row in rows:
        aim = f"{TARGETS[row['store']]:,}" if row["side"] == "ours" else "-"
        print(
            f"{row['side']:<5} {row['store']:<11} {row['events_per_second']:>10,.0f} "
            f"{aim:>9} {row['mb_per_second']:>7.1f} "
            f"{row['cpu_us_per_event']:>13.2f} {row['seconds']:>8.2f}  "
            f"{'every event' if row['all_stored'] else row['end']}"
        )
    if by_store:
        print("ours / old, same run:")
        for ratio in by_store:
            print(
                f"  {ratio['store']:<11} events/s {ratio['events_per_second']:.2f}x, "
                f"CPU per event {ratio['cpu_us_per_event']:.2f}x"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="20,000 events: a few seconds")
    parser.add_argument("--agent", choices=["mock", "reference"], default="mock")
    parser.add_argument("--stores", default="memory,filesystem", type=lambda t: t.split(","))
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--tmp", default=None, help="where the filesystem store's folder goes")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--old-python",
        type=Path,
        default=DEFAULT_OLD_PYTHON,
        help="the old follower's venv python (tools/old-follower-venv); absent: ours only",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.events = 20_000
    has_old = args.old_python.exists()
    if not has_old:
        print(f"throughput: old follower not run: no {args.old_python} (tools/old-follower-venv)")
    ours: list[dict[str, Any]] = []
    old: list[dict[str, Any]] = []
    for index, kind in enumerate(args.stores):
        # Alternating which side goes first, so the drift of a shared machine falls on both.
        sides = ["ours", "old"] if index % 2 == 0 else ["old", "ours"]
        for side in sides:
            if side == "ours":
                ours.append(run_ours(kind, args))
            elif has_old:
                old.append(run_old(kind, args))
    by_store = ratios(ours, old)
    print_table(ours + old, by_store, args)
    if args.json is not None:
        figures = {
            "benchmark": "throughput",
            "python": sys.version.split()[0],
            "backend": args.backend,
            "agent": args.agent,
            "events": args.events,
            "page_events": PAGE_EVENTS,
            "cpus": os.cpu_count(),
            "about": run_about(),
            "rows": ours,
            "old_rows": old,
            "old_not_run": None if has_old else f"no {args.old_python}",
            "ratio_to_old": by_store,
            "targets": targets(ours, by_store),
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
