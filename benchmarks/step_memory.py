"""Memory a step holds per turn once its turns ended: ``LiveTurns`` over many short turns.

Each turn follows a task of one event from a canned agent (``httpx.MockTransport``)
into a store that keeps nothing, so what is left is the step's own record of its
turns. tracemalloc counts what is still allocated after the turns, per turn, by
all code and by the library's own lines. Nothing is asserted
(tests/turns/test_step_memory.py bounds it).

    python benchmarks/step_memory.py                 # 1,000 and 10,000 turns
    python benchmarks/step_memory.py --turns 500 --backend trio
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
from pathlib import Path

import anyio
import anyio.lowlevel
import httpx
from _counting_store import NullStore

import follower
from follower import LiveTurns

LIBRARY = str(Path(follower.__file__).parent)


def agent(request: httpx.Request) -> httpx.Response:
    asked = json.loads(request.content)
    after = asked["after"]
    page = {
        "context_id": "c",
        "task_id": asked["task_id"],
        "state": "completed",
        "format": "test/v1",
        "events": [] if after else [0],
        "next": after if after else 1,
        "has_more": False,
    }
    return httpx.Response(200, json=page)


def held(snapshot: tracemalloc.Snapshot, base: tracemalloc.Snapshot) -> tuple[int, int]:
    """Bytes allocated since ``base`` and still held: by all code, by the library's lines."""
    diff = snapshot.compare_to(base, "filename")
    total = sum(stat.size_diff for stat in diff)
    library = sum(stat.size_diff for stat in diff if stat.traceback[0].filename.startswith(LIBRARY))
    return total, library


async def measure(turns: int) -> tuple[float, float]:
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(agent)) as client,
        LiveTurns(
            "http://agent.test/ext/trajectory",
            NullStore(),
            "p/",
            poll_interval_seconds=0.01,
            client=client,
        ) as step,
    ):
        tracemalloc.start(1)
        gc.collect()
        base = tracemalloc.take_snapshot()
        for n in range(turns):
            async with step.following(f"turn-{n}") as turn:
                turn.follow(f"task-{n}")
                turn.ended("completed")
        gc.collect()
        total, library = held(tracemalloc.take_snapshot(), base)
        tracemalloc.stop()
    return total / turns, library / turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--turns", type=lambda t: [int(n) for n in t.split(",")], default=[1_000, 10_000]
    )
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = parser.parse_args()
    print(f"backend {args.backend}; bytes held per ended turn")
    print(f"{'turns':>7} {'all code':>10} {'library':>10}")
    for turns in args.turns:
        total, library = anyio.run(measure, turns, backend=args.backend)
        print(f"{turns:>7} {total:>10.0f} {library:>10.0f}", flush=True)


if __name__ == "__main__":
    main()
