"""Throughput: one follower draining a long trajectory of small events into a store.

End to end through ``following_live_trajectory``: the agent serves full pages
(1,000 events each, the most a read returns) as fast as it is asked, the
follower validates each page, encodes its chunk and stores it, write-once, until
the terminal page. Per store it prints events/s and MB/s (of chunk bytes
stored), the follower process's CPU per event, and checks that the end mark
counts every event. Nothing is asserted against a target.

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
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx

from follower import FilesystemStore, MemoryStore, ObjectStore, following_live_trajectory

PAGE_EVENTS = 1000
PREFIX = "bench/"
TURN = "turn-1"
TASK = "task-1"
FORMAT = "agentenv.trajectory/v1"


def event(index: int) -> dict[str, Any]:
    """A small event, as the reference agent makes them (about 45 bytes of JSON)."""
    return {"index": index, "kind": "step", "text": f"step {index}"}


def canned_pages(events: int) -> dict[int, bytes]:
    """Every page a follower reads from 0, by its ``after``, encoded once."""
    pages = {}
    for after in range(0, max(events, 1), PAGE_EVENTS):
        next_ = min(after + PAGE_EVENTS, events)
        page = {
            "context_id": "ctx-1",
            "task_id": TASK,
            "state": "completed",
            "format": FORMAT,
            "events": [event(i) for i in range(after, next_)],
            "next": next_,
            "has_more": next_ < events,
        }
        pages[after] = json.dumps(page).encode()
    return pages


def mock_agent(events: int) -> Callable[[httpx.Request], httpx.Response]:
    pages = canned_pages(events)

    def answer(request: httpx.Request) -> httpx.Response:
        after = json.loads(request.content)["after"]
        return httpx.Response(
            200, content=pages[after], headers={"content-type": "application/json"}
        )

    return answer


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
    from follower._a2a import connect_agent

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
            transport = httpx.MockTransport(mock_agent(args.events))
            client = httpx.AsyncClient(transport=transport)
            endpoint, task_id = "http://agent.test/ext/trajectory", TASK
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


TARGETS = {"memory": 200_000, "filesystem": 100_000}


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"Python {sys.version.split()[0]}, {args.backend}, agent {args.agent}, "
        f"{args.events:,} events in pages of {PAGE_EVENTS}"
    )
    print(
        f"{'store':<11} {'events/s':>10} {'target':>9} {'MB/s':>7} {'CPU us/event':>13} "
        f"{'seconds':>8}  end mark"
    )
    for row in rows:
        print(
            f"{row['store']:<11} {row['events_per_second']:>10,.0f} "
            f"{TARGETS[row['store']]:>9,} {row['mb_per_second']:>7.1f} "
            f"{row['cpu_us_per_event']:>13.2f} {row['seconds']:>8.2f}  "
            f"{'every event' if row['all_stored'] else row['end']}"
        )


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for kind in args.stores:
        if args.agent == "reference":
            # A fresh agent a store: its tasks are kept, and one task is read once.
            with reference_agent(args.events) as url:
                rows.append(await run_one(kind, args, url))
        else:
            rows.append(await run_one(kind, args, None))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="20,000 events: a few seconds")
    parser.add_argument("--agent", choices=["mock", "reference"], default="mock")
    parser.add_argument("--stores", default="memory,filesystem", type=lambda t: t.split(","))
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--tmp", default=None, help="where the filesystem store's folder goes")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.events = 20_000
    rows = anyio.run(main_async, args, backend=args.backend)
    print_table(rows, args)
    if args.json is not None:
        figures = {
            "benchmark": "throughput",
            "python": sys.version.split()[0],
            "backend": args.backend,
            "agent": args.agent,
            "events": args.events,
            "page_events": PAGE_EVENTS,
            "cpus": os.cpu_count(),
            "rows": rows,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
