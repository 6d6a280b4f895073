"""Following over a stream beside cursor reads: event latency, idle cost, memory, teardown.

The agent is ``lean_agent.py`` in a process of its own: one timeline of events for both ways
(event ``k`` of a task becomes visible ``k * interval`` after the task's first contact), read
by cursor (``/ext/trajectory``) or streamed (``SubscribeToTask`` at ``/a2a``) as it becomes
visible. The followers are the library's turns (``following_live_trajectory``) in this
process, storing into a store that notes when each chunk landed. Figures:

- **latency**: agent emits (the event becomes visible) -> stored, p50 and p99, for a stream and
  for cursor reads at a 1 s poll, the same number of turns each, in the same run;
- **idle**: N streams open on tasks that send nothing more, this process's CPU per idle
  follower-second and RSS per open stream, beside N cursor followers polling every second;
- **events**: CPU per event stored, N streams each receiving an event a second;
- **teardown**: the step cancelled with N streams open: cancel -> every follower gone; and a
  step of one streamed turn cancelled, again and again: cancel -> its block exited, and how many
  times the agent saw a subscription after a cancel.

Nothing is asserted. ``--quick`` is a smoke run (small N, short windows).

    python benchmarks/streams.py [--backend asyncio|trio] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
from _measure import machine, percentile, raise_open_files_limit, rss_kib, run_about

from follower import TaskSource, Via, following_live_trajectory
from follower._format._layout import parse_chunk_name
from follower._stores._protocol import ObjectStore

HERE = Path(__file__).resolve().parent
PREFIX = "bench/"
SERVING = "lean agent serving on "


class TimedStore(ObjectStore):
    """A store in memory that notes when each chunk was put (wall clock, as the agent's)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.chunks: list[tuple[str, int, int, float]] = []  # turn, after, next, put at

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        self.objects[key] = body
        name = key.rsplit("/", 1)[1]
        positions = parse_chunk_name(name)
        if positions is not None:
            self.chunks.append((key.split("/")[1], *positions, time.time()))

    async def get(self, key: str) -> bytes:
        return self.objects[key]

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))


class Agent:
    """``lean_agent.py`` running in its own process."""

    def __init__(self, interval: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "lean_agent.py"), "--interval", str(interval)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith(SERVING):
            self.process.kill()
            raise SystemExit(f"the lean agent did not start: {line!r}")
        self.url = line[len(SERVING) :].strip().rstrip("/")

    def source(self, via: Via) -> TaskSource:
        if via is Via.CURSOR:
            return TaskSource(Via.CURSOR, self.url + "/ext/trajectory")
        return TaskSource(Via.STREAM, self.url + "/a2a", "1.0")

    def starts(self) -> dict[str, float]:
        starts: dict[str, float] = httpx.get(self.url + "/bench/starts").json()["starts"]
        return starts

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


async def open_turns(
    tg: anyio.abc.TaskGroup,
    source: TaskSource,
    store: TimedStore,
    n: int,
    poll: float,
    tag: str,
    release: anyio.Event,
) -> list[Any]:
    """``n`` turns, each following a task of its own in a task of ``tg``, until ``release``.

    Side by side, not nested: thousands of nested blocks are thousands of nested cancel
    scopes, which a cancel walks recursively.
    """

    async def one(i: int, *, task_status: Any) -> None:
        async with following_live_trajectory(
            source, store, PREFIX, f"{tag}{i}", poll_interval_seconds=poll, drain_seconds=0
        ) as turn:
            turn.follow(f"{tag}-{i}-{uuid.uuid4().hex[:8]}")
            task_status.started(turn)
            await release.wait()

    return [await tg.start(one, i) for i in range(n)]


async def until_all_stored(turns: list[Any], at_least: int = 1) -> None:
    while any(t.statistics().events_stored < at_least for t in turns):  # noqa: ASYNC110
        await anyio.sleep(0.05)


async def latency(
    agent: Agent, via: Via, n: int, seconds: float, interval: float
) -> dict[str, Any]:
    store = TimedStore()
    release = anyio.Event()
    async with anyio.create_task_group() as tg:
        turns = await open_turns(tg, agent.source(via), store, n, 1.0, f"lat-{via}-", release)
        await anyio.sleep(seconds)
        release.set()
    starts = agent.starts()
    task_of = {t.turn_id: t.task_id for t in turns}
    lags = []
    for turn_id, after, next_, put_at in store.chunks:
        start = starts[task_of[turn_id]]
        # A streamed turn's first event is the task's snapshot; its k-th update is event k + 1.
        shift = 1 if via is Via.STREAM else 0
        for position in range(max(after, shift), next_):
            lags.append(put_at - (start + (position - shift) * interval))
    lags.sort()
    return {
        "via": str(via),
        "turns": n,
        "events": len(lags),
        "p50_ms": 1000 * (percentile(lags, 0.5) or 0.0),
        "p99_ms": 1000 * (percentile(lags, 0.99) or 0.0),
    }


async def idle(agent: Agent, via: Via, n: int, seconds: float) -> dict[str, Any]:
    store = TimedStore()
    rss_before = rss_kib()
    with anyio.CancelScope() as step:
        async with anyio.create_task_group() as tg:
            turns = await open_turns(
                tg, agent.source(via), store, n, 1.0, f"idle-{via}-", anyio.Event()
            )
            await until_all_stored(turns)
            rss_open = rss_kib()
            cpu, wall = time.process_time(), time.monotonic()
            await anyio.sleep(seconds)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            cancelled_at = time.monotonic()
            step.cancel()  # the step is cancelled: every turn's block exits at once
            await anyio.sleep_forever()
    gone = time.monotonic() - cancelled_at
    assert not any(t.statistics().followers_alive for t in turns)
    return {
        "via": str(via),
        "followers": n,
        "cpu_us_per_follower_second": 1e6 * cpu / (n * wall),
        "cpu_percent_of_a_core": 100 * cpu / wall,
        "rss_kib_per_follower": (rss_open - rss_before) / n,
        "teardown_ms": 1000 * gone,
        "teardown_ms_per_1000": 1000 * gone * 1000 / n,
    }


async def teardown_one(agent: Agent, repeats: int) -> dict[str, Any]:
    """A step of one streamed turn, cancelled with its stream open: cancel -> block exited."""
    took = []
    streams_before = httpx.get(agent.url + "/bench/stats").json()["streams"]
    for repeat in range(repeats):
        store = TimedStore()
        with anyio.CancelScope() as step:
            async with anyio.create_task_group() as tg:
                turns = await open_turns(
                    tg, agent.source(Via.STREAM), store, 1, 1.0, f"one-{repeat}-", anyio.Event()
                )
                await until_all_stored(turns)
                cancelled_at = time.monotonic()
                step.cancel()
                await anyio.sleep_forever()
        took.append(time.monotonic() - cancelled_at)
    # Each step subscribed once; none did again after its cancel.
    streams = httpx.get(agent.url + "/bench/stats").json()["streams"] - streams_before
    took.sort()
    return {
        "steps": repeats,
        "median_ms": 1000 * (percentile(took, 0.5) or 0.0),
        "max_ms": 1000 * took[-1],
        "subscriptions": streams,
        "reconnects_after_stop": streams - repeats,
    }


async def events(agent: Agent, n: int, seconds: float) -> dict[str, Any]:
    store = TimedStore()
    release = anyio.Event()
    async with anyio.create_task_group() as tg:
        turns = await open_turns(tg, agent.source(Via.STREAM), store, n, 1.0, "ev-", release)
        await until_all_stored(turns)
        stored = sum(t.statistics().events_stored for t in turns)
        cpu = time.process_time()
        await anyio.sleep(seconds)
        cpu = time.process_time() - cpu
        stored = sum(t.statistics().events_stored for t in turns) - stored
        release.set()
    return {"streams": n, "events": stored, "cpu_us_per_event": 1e6 * cpu / max(stored, 1)}


def table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}", flush=True)
    keys = list(rows[0])
    print("  " + "  ".join(f"{k:>24}" for k in keys))
    for row in rows:
        cells = [f"{v:>24.2f}" if isinstance(v, float) else f"{v!s:>24}" for v in row.values()]
        print("  " + "  ".join(cells), flush=True)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    interval = 0.1
    report: dict[str, Any] = {"machine": machine(), "backend": args.backend}
    agent = Agent(interval)
    try:
        turns, seconds = (5, 3.0) if quick else (20, 10.0)
        report["latency"] = [
            await latency(agent, Via.STREAM, turns, seconds, interval),
            await latency(agent, Via.CURSOR, turns, seconds, interval),
        ]
    finally:
        agent.close()
    table("event latency, agent emits -> stored (cursor reads at a 1 s poll)", report["latency"])
    idle_agent = Agent(1e9)  # one event at the start, then nothing
    try:
        sizes = [100] if quick else [100, 1000, 5000]
        window = 2.0 if quick else 10.0
        report["idle"] = []
        for n in sizes:
            report["idle"].append(await idle(idle_agent, Via.STREAM, n, window))
            report["idle"].append(await idle(idle_agent, Via.CURSOR, n, window))
        report["teardown"] = [await teardown_one(idle_agent, 5 if quick else 50)]
    finally:
        idle_agent.close()
    table("idle followers: CPU, memory, teardown after a cancel", report["idle"])
    table("a step of one streamed turn, cancelled: cancel -> exited", report["teardown"])
    busy_agent = Agent(1.0)
    try:
        n = 100 if quick else 1000
        report["events"] = [await events(busy_agent, n, 3.0 if quick else 10.0)]
    finally:
        busy_agent.close()
    table("streams each receiving an event a second", report["events"])
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    raise_open_files_limit()
    report = anyio.run(main_async, args, backend=args.backend)
    if args.json is not None:
        report["about"] = run_about()
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
