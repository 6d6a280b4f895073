"""What N steps keep for the cyclic collector: the floor under issue 21's targets at 5,000.

CPython's cyclic collector walks every tracked object of the process in a full
pass, and while N followers start, the objects they add trigger such passes: at
5,000 followers those passes are the start-up's worst loop blocks
(docs/benchmarks.md). How long a pass takes depends on how many objects the
process tracks, and part of those is not the follower's to shed: the step that
runs it is a task, and a follower that runs inside the step's task group (the
structured-concurrency promise: it can never outlive the step) is a task too.

So each shape here runs N steps in a fresh child process, all started in one turn
of the loop as ``scale.py`` starts them (or ``--start-batch K`` at a time, as its
option of that name), and measures what they keep:

- ``step``: the caller's step alone, a task that waits (no library at all);
- ``promise``: the least a turn can keep and still never outlive its step: in
  the step, a task group with the follower's task, in a timed wait for the
  turn's stop event as the library's follower waits;
- ``turn``: the library's open turn (``following_live_trajectory``, its follower
  reading an in-memory agent every ``--poll`` seconds, into a store that keeps
  nothing), once every follower has read its first page and waits.

Per shape, per step: tracked objects (``gc.get_objects()``) and RSS, the
duration of a full pass over the process (``gc.collect()``, the fewest of five),
the worst lateness of a 10 ms sleep while the N start (the start-up loop block
``scale.py`` measures, without the sockets of a real agent), and the longest of
the collector's own pauses meanwhile (``gc.callbacks``). Ratios are
against ``promise`` at the same N and backend, in the same run. Figures, never
assertions: they belong to the machine they ran on.

Usage: ``python benchmarks/collector_floor.py [--followers 1000,5000]
[--backend asyncio,trio] [--shapes step,promise,turn] [--poll 10] [--start-batch K]
[--quick] [--markdown] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
from _counting_store import NullStore
from _measure import RESULT_MARK, GcClock, Heartbeat, machine, rss_kib, run_about

SHAPES = ("step", "promise", "turn")
BACKENDS = ("asyncio", "trio")
FULL_PASSES = 5
# Long enough that a waiting follower's own timer never fires while it is measured.
HOUR = 3600.0
# The longest the N may take to start (turns: every first page stored), beyond two polls.
STARTUP_TIMEOUT_SECONDS = 120.0
# The longest a child may run: a hung one fails the run with what it printed.
CHILD_TIMEOUT_SECONDS = 600.0


# --- the child: one shape, one N, one backend ------------------------------------------


async def _step(ready: Callable[[], None]) -> None:
    ready()
    await anyio.sleep_forever()


async def _timed_wait(stop: anyio.Event) -> None:
    while True:  # the follower's wait: a deadline around the stop event
        with anyio.move_on_after(HOUR):
            await stop.wait()


async def _promise(ready: Callable[[], None]) -> None:
    stop = anyio.Event()
    async with anyio.create_task_group() as turn:
        turn.start_soon(_timed_wait, stop)  # the follower
        ready()
        await anyio.sleep_forever()


def _in_memory_agent() -> Any:
    """A client whose every read answers a page of one event; the task keeps running."""
    import httpx

    def answer(request: httpx.Request) -> httpx.Response:
        asked = json.loads(request.content)
        after = asked["after"]
        page = {
            "context_id": "c",
            "task_id": asked["task_id"],
            "state": "running",
            "format": "bench/v1",
            "events": [{"n": after}],
            "next": after + 1,
            "has_more": False,
        }
        return httpx.Response(200, json=page)

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


class _FirstPages(NullStore):
    """Keeps nothing, and says when each turn's first page lands: no turn polls for it."""

    def __init__(self) -> None:
        self.ready: Callable[[], None] = lambda: None
        self._seen: set[str] | None = set()  # turn ids with a page, until all have one

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        seen = self._seen
        if seen is not None and key.endswith(".jsonl"):  # a chunk: <prefix><turn>/live/...
            turn_id = key.split("/")[1]
            if turn_id not in seen:
                seen.add(turn_id)
                self.ready()
        await super().put(key, body, content_type=content_type)

    def forget(self) -> None:
        """Every turn has its page: what was kept to know it goes before the measuring."""
        self._seen = None


Shape = Callable[[Callable[[], None]], Awaitable[None]]


def _turn_shape(poll: float) -> tuple[Shape, _FirstPages]:
    from follower import following_live_trajectory

    store = _FirstPages()
    client = _in_memory_agent()
    counter = iter(range(1 << 62))

    async def turn(ready: Callable[[], None]) -> None:
        n = next(counter)
        async with following_live_trajectory(
            "http://agent.test/ext/trajectory",
            store,
            "steps/",
            f"turn-{n}",
            poll_interval_seconds=poll,
            client=client,
            drain_seconds=0,
        ) as live:
            store.ready = ready  # each turn is ready once its first page is stored
            live.follow(f"task-{n}")
            await anyio.sleep_forever()

    return turn, store


def _full_pass_ms() -> float:
    passes = []
    for _ in range(FULL_PASSES):
        began = time.perf_counter()
        gc.collect()
        passes.append(time.perf_counter() - began)
    return 1000 * min(passes)


async def _measure(shape: str, n: int, poll: float, batch: int) -> dict[str, Any]:
    import httpx  # noqa: F401

    import follower  # noqa: F401  # the library's modules are in the heap of every shape

    store = None
    run: Shape
    if shape == "turn":
        run, store = _turn_shape(poll)
    else:
        run = {"step": _step, "promise": _promise}[shape]
    heartbeat = Heartbeat()
    collector = GcClock()
    collector.install()
    ready_count = 0
    all_ready = anyio.Event()

    def ready() -> None:
        nonlocal ready_count
        ready_count += 1
        if ready_count == n:
            all_ready.set()

    async with anyio.create_task_group() as outer:
        outer.start_soon(heartbeat.run)
        await anyio.sleep(0.2)  # the heartbeat's first sleeps and the imports settle
        gc.collect()
        tracked_before, rss_before = len(gc.get_objects()), rss_kib()
        heartbeat.phase = collector.phase = "startup"
        started = time.perf_counter()
        async with anyio.create_task_group() as steps:
            for started_n in range(1, n + 1):
                steps.start_soon(run, ready)
                if batch and started_n % batch == 0:
                    await anyio.lowlevel.checkpoint()  # the batch's first steps run next
            # A turn whose follower failed stores no page: the run fails, never hangs.
            with anyio.fail_after(STARTUP_TIMEOUT_SECONDS + 2 * poll):
                await all_ready.wait()
            startup_seconds = time.perf_counter() - started
            if store is not None:
                store.forget()
            await anyio.sleep(0.5)  # what the last starts left behind is collected
            heartbeat.phase = collector.phase = "measured"
            gc.collect()
            tracked, rss = len(gc.get_objects()), rss_kib()
            full_pass = _full_pass_ms()
            steps.cancel_scope.cancel()
        outer.cancel_scope.cancel()
    return {
        "shape": shape,
        "followers": n,
        "start_batch": batch,
        "tracked_per_step": (tracked - tracked_before) / n,
        "rss_per_step_kib": (rss - rss_before) / n,
        "tracked": tracked,
        "full_pass_ms": full_pass,
        "startup_block_ms": 1000 * heartbeat.worst.get("startup", 0.0),
        "startup_gc_worst_ms": 1000 * collector.worst.get("startup", 0.0),
        "startup_gc_full_passes": collector.full_passes.get("startup", 0),
        "startup_seconds": startup_seconds,
    }


def child(argv: list[str]) -> int:
    shape, n, backend, poll, batch = argv[0], int(argv[1]), argv[2], float(argv[3]), int(argv[4])
    result = anyio.run(_measure, shape, n, poll, batch, backend=backend)
    result.update(backend=backend, python=sys.version.split()[0])
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


# --- the parent: every cell in a fresh child --------------------------------------------


def run_cell(shape: str, n: int, backend: str, poll: float, batch: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", shape, str(n), backend, str(poll), str(batch)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=CHILD_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired as expired:
        err = expired.stderr or b""
        tail = err.decode(errors="replace") if isinstance(err, bytes) else err
        raise RuntimeError(
            f"{shape} N={n} on {backend} ran over {CHILD_TIMEOUT_SECONDS:.0f} s:\n{tail[-2000:]}"
        ) from expired
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            result: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
            return result
    raise RuntimeError(f"{shape} N={n} on {backend} printed no result:\n{done.stderr[-2000:]}")


def with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's figures as ratios to the same N and backend's ``promise`` row."""
    floors = {(r["backend"], r["followers"]): r for r in rows if r["shape"] == "promise"}
    for row in rows:
        floor = floors.get((row["backend"], row["followers"]))
        for name in ("tracked_per_step", "full_pass_ms", "rss_per_step_kib"):
            base = floor[name] if floor else 0.0
            row[f"{name}_vs_promise"] = row[name] / base if base > 0 else None
    return rows


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def print_table(rows: list[dict[str, Any]], markdown: bool) -> None:
    header = (
        "backend",
        "N",
        "shape",
        "tracked/step",
        "full pass ms",
        "RSS KiB/step",
        "start-up block ms",
        "longest GC pause at start-up ms",
        "tracked, pass vs promise",
    )
    lines = [
        (
            row["backend"],
            f"{row['followers']:,}",
            row["shape"],
            f"{row['tracked_per_step']:.0f}",
            f"{row['full_pass_ms']:.0f}",
            f"{row['rss_per_step_kib']:.1f}",
            f"{row['startup_block_ms']:.0f}",
            f"{row['startup_gc_worst_ms']:.0f}",
            f"{_ratio(row['tracked_per_step_vs_promise'])}, "
            f"{_ratio(row['full_pass_ms_vs_promise'])}",
        )
        for row in rows
    ]
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in lines:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for line in lines:
        print("  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--followers", default="1000,5000", help="comma-separated Ns")
    parser.add_argument("--backend", default=",".join(BACKENDS), help="asyncio,trio")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="of step,promise,turn")
    parser.add_argument(
        "--poll", type=float, default=10.0, help="the turns' poll interval (default 10 s)"
    )
    parser.add_argument(
        "--start-batch",
        type=int,
        default=0,
        metavar="K",
        help="start the steps K at a time, the loop running between batches, as scale.py's "
        "option (default 0: all in one turn of the loop)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: N=50, poll 0.5 s")
    parser.add_argument("--markdown", action="store_true", help="the table as markdown")
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    args = parser.parse_args(argv)
    ns = [50] if args.quick else [int(n) for n in args.followers.split(",")]
    poll = 0.5 if args.quick else args.poll
    backends = [b for b in args.backend.split(",") if b]
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = set(shapes) - set(SHAPES) or set(backends) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown: {', '.join(sorted(unknown))}")
    started = (
        f"started {args.start_batch} at a time"
        if args.start_batch
        else "all N started in one turn of the loop"
    )
    print(
        f"collector floor: N = {', '.join(f'{n:,}' for n in ns)}; shapes {', '.join(shapes)}; "
        f"each in a fresh child, {started}; turns poll every "
        f"{poll:g} s; Python {sys.version.split()[0]}"
    )
    rows = [
        run_cell(shape, n, backend, poll, args.start_batch)
        for backend in backends
        for n in ns
        for shape in shapes
    ]
    print_table(with_ratios(rows), args.markdown)
    if args.json:
        document = {
            "benchmark": "collector_floor",
            "poll": poll,
            "start_batch": args.start_batch,
            "machine": machine(),
            "about": run_about(),
            "results": rows,
        }
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
