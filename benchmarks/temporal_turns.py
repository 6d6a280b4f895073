"""The ready Temporal activity over a step of many turns: time per turn, and heartbeat sizes.

Runs :func:`follower.temporal.run_a2a_step` in temporalio's activity test
environment (no server) for a step of N one-event turns against the reference
agent on a loopback port, storing in memory. Prints the wall time and the
process CPU of each tenth of the turns (a per-turn cost that grows with the
turns before it shows as a rising column), and the size of the heartbeats'
payloads (Temporal's default converter; it caps a payload at 2 MiB).

Nothing is asserted. asyncio only (temporalio's worker is asyncio).

    python benchmarks/temporal_turns.py                 # 10,000 turns
    python benchmarks/temporal_turns.py --turns 2000 --heartbeat 0.2
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from datetime import timedelta
from typing import Any

import anyio
from temporalio.converter import DataConverter
from temporalio.testing import ActivityEnvironment

import follower.temporal._activity as ready
from follower import MemoryStore
from follower.temporal import run_a2a_step
from follower.temporal.workflow_types import A2AStepParams, StepTurn, StoreSpec
from follower.testing import ReferenceAgent, TaskScript, serve_agent


def payload_bytes(details: Any) -> int:
    (payload,) = DataConverter.default.payload_converter.to_payloads([details])
    return int(payload.ByteSize())


class MarkingStore(MemoryStore):
    """A memory store that notes the time at every tenth end mark: the turns' pace."""

    def __init__(self, tenth: int) -> None:
        super().__init__()
        self.tenth = tenth
        self.ends = 0
        self.marks: list[tuple[float, float]] = []

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await super().put(key, body, content_type=content_type)
        if key.endswith("/end.json"):
            self.ends += 1
            if self.ends % self.tenth == 0:
                self.marks.append((time.perf_counter(), time.process_time()))


async def main(turns: int, heartbeat_seconds: float) -> None:
    tenth = max(1, turns // 10)
    store = MarkingStore(tenth)
    # In memory: the figures are the activity's own, not a disk's.
    ready.open_store = lambda spec: store
    agent = ReferenceAgent(script=TaskScript(events=1, interval_seconds=0.0))
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=60))
    sizes: list[int] = []

    def on_heartbeat(*details: Any) -> None:
        sizes.append(payload_bytes(details[0]))

    env.on_heartbeat = on_heartbeat

    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_agent, agent)
        params = A2AStepParams(
            agent_url=url,
            store=StoreSpec.filesystem("unused"),
            prefix_key="steps/bench/",
            turns=[StepTurn(f"turn-{n}", f"message {n}") for n in range(turns)],
            poll_interval_seconds=0.01,
            task_poll_seconds=0.01,
            heartbeat_interval_seconds=heartbeat_seconds,
        )

        started = (time.perf_counter(), time.process_time())
        result = await env.run(run_a2a_step, params)
        ended = (time.perf_counter(), time.process_time())
        tg.cancel_scope.cancel()

    assert len(result.turns) == turns
    print(f"{turns} turns, heartbeats every {heartbeat_seconds} s")
    print(f"whole step: {ended[0] - started[0]:.1f} s wall, {ended[1] - started[1]:.1f} s CPU")
    print("turns        wall s   CPU s   (per tenth of the turns)")
    previous = started
    for n, mark in enumerate(store.marks, 1):
        print(
            f"{(n - 1) * tenth:>5}-{n * tenth:<6} {mark[0] - previous[0]:7.2f} "
            f"{mark[1] - previous[1]:7.2f}"
        )
        previous = mark
    print(
        f"heartbeats: {len(sizes)}; payload bytes: first {sizes[0]}, "
        f"last {sizes[-1]}, largest {max(sizes)}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--heartbeat", type=float, default=0.5, help="seconds between beats")
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.heartbeat))
