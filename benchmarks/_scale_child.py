"""One run of ``scale.py``: N followers of one side in this process, measured, printed as JSON.

``--side ours`` runs the library's ``following_live_trajectory`` with its default
clients, on asyncio or trio; ``--side old`` runs the follower it replaces
(agentenv-framework 0.9.1364) on asyncio, from the venv ``tools/old-follower-venv``
makes, where ``follower`` is not installed: each side imports only its own code.
Both follow tasks of the lean agent that ``scale.py`` started for this run, and
store into a store of their own kind that only notes when each page landed.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import httpx
from _measure import (
    LAG_SETTLE_SECONDS,
    RESULT_MARK,
    GcClock,
    Heartbeat,
    LogCounter,
    PageLog,
    Turn,
    open_sockets,
    percentile,
    process_cpu_seconds,
    raise_open_files_limit,
    rss_kib,
)

PREFIX = "bench/"

# Starts one follower for a turn id and follows until cancelled.
Follow = Callable[[str], Awaitable[None]]


async def agent_get(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.get(url)
        response.raise_for_status()
        return dict(response.json())


async def measure(
    args: argparse.Namespace,
    turns: dict[str, Turn],
    log: PageLog,
    all_started: anyio.Event,
    follow: Follow,
    counter: LogCounter,
    window_counts: Callable[[], dict[str, int] | None],
) -> dict[str, Any]:
    """Start every follower, wait for start-up, measure the window, cancel them all."""
    n = len(turns)
    result: dict[str, Any] = {
        "side": args.side,
        "backend": args.backend,
        "followers": n,
        "python": sys.version.split()[0],
        "agent": "lean",
        "start_batch": args.start_batch,
    }
    heartbeat = Heartbeat()
    gc_clock = GcClock()
    gc_clock.install()
    async with anyio.create_task_group() as outer:
        outer.start_soon(heartbeat.run)
        await anyio.sleep(0.2)  # imports and set-up settle before the baseline
        rss_before = rss_kib()
        sockets_before = open_sockets()
        cpu_start = time.process_time()
        started_at = anyio.current_time()
        heartbeat.phase = gc_clock.phase = "startup"
        async with anyio.create_task_group() as followers:
            for n, turn_id in enumerate(turns, 1):
                followers.start_soon(follow, turn_id)
                if args.start_batch and n % args.start_batch == 0:
                    await anyio.lowlevel.checkpoint()  # the batch's entries run next
            with anyio.move_on_after(args.startup_timeout):
                await all_started.wait()
            rss_after = rss_kib()
            result.update(
                startup_seconds=anyio.current_time() - started_at,
                started=log.started,
                startup_cpu_seconds=time.process_time() - cpu_start,
                rss_before_kib=rss_before,
                rss_after_kib=rss_after,
                rss_per_follower_kib=(rss_after - rss_before) / n,
                sockets=open_sockets() - sockets_before,
                startup_failures=counter.warnings,
                startup_pool_busy=counter.pool_busy,
            )

            if args.gc_freeze:
                gc.freeze()  # what an operator can do once a worker's followers have started
            heartbeat.phase = gc_clock.phase = "window"
            tracked_at_window = len(gc.get_objects())
            agent_before = await agent_get(args.agent_url + "bench/stats")
            before = window_counts()
            window_start = time.time()
            log.open_lag_window()
            pages_start = log.pages
            cpu_window = time.process_time()
            agent_cpu = process_cpu_seconds(args.agent_pid)
            await anyio.sleep(args.seconds)
            cpu = time.process_time() - cpu_window
            agent_cpu = process_cpu_seconds(args.agent_pid) - agent_cpu
            window_end = time.time()
            pages = log.pages - pages_start
            after = window_counts()
            agent_after = await agent_get(args.agent_url + "bench/stats")
            rss_end = rss_kib()
            result["gc_tracked_objects"] = {
                "window_start": tracked_at_window,
                "window_end": len(gc.get_objects()),
            }
            heartbeat.phase = gc_clock.phase = "shutdown"
            stopped_at = anyio.current_time()
            followers.cancel_scope.cancel()
        result["shutdown_seconds"] = anyio.current_time() - stopped_at
        outer.cancel_scope.cancel()

    # Lag needs each task's start, which only the agent knows (its first read of the task).
    starts = (await agent_get(args.agent_url + "bench/starts"))["starts"]
    for turn in turns.values():
        turn.started_wall = starts.get(turn.task_id)
    settle = min(args.poll + LAG_SETTLE_SECONDS, args.seconds / 2)
    lags = log.close_lag_window(
        window_start, window_start + args.seconds - settle, args.event_interval, args.poll
    )
    elapsed = window_end - window_start
    reads = agent_after["reads"] - agent_before["reads"]
    result.update(
        window_seconds=elapsed,
        reads=reads,
        reads_per_second=reads / elapsed,
        empty_reads=agent_after["empty_reads"] - agent_before["empty_reads"],
        pages=pages,
        pages_per_second=pages / elapsed,
        cpu_seconds=cpu,
        cpu_per_read_us=1e6 * cpu / reads if reads else None,
        rss_end_kib=rss_end,
        rss_per_follower_end_kib=(rss_end - rss_before) / n,
        lag_p50_ms=_ms(percentile(lags.poll, 0.50)),
        lag_p99_ms=_ms(percentile(lags.poll, 0.99)),
        lag_max_ms=_ms(lags.poll[-1] if lags.poll else None),
        lag_polls=len(lags.poll),
        event_lag_p50_ms=_ms(percentile(lags.event, 0.50)),
        event_lag_p99_ms=_ms(percentile(lags.event, 0.99)),
        event_lag_max_ms=_ms(lags.event[-1] if lags.event else None),
        lag_events=len(lags.event),
        unstored=lags.unstored,
        failures=counter.warnings,
        pool_busy=counter.pool_busy,
        failure_samples=counter.samples,
        agent_refused=agent_after["refused"],
        agent_cpu_seconds=agent_cpu,
        agent_cpu_per_read_us=1e6 * agent_cpu / reads if reads else None,
        loop_blocked_ms={phase: 1000 * late for phase, late in heartbeat.worst.items()},
        **gc_clock.figures(),
    )
    if before is not None and after is not None:
        result["statistics"] = {key: after[key] - before[key] for key in after}
    return result


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds


# --- ours -----------------------------------------------------------------------------


async def run_ours(args: argparse.Namespace, turns: dict[str, Turn]) -> dict[str, Any]:
    from _counting_store import CountingStore

    from follower import LiveTurn, PoolBusyError, following_live_trajectory

    def is_pool_busy(record: logging.LogRecord) -> bool:
        return isinstance(record.args, tuple) and any(
            isinstance(arg, PoolBusyError) for arg in record.args
        )

    counter = LogCounter(is_pool_busy)
    counter.attach("follower", debug=True)
    all_started = anyio.Event()
    log = PageLog(turns, all_started.set)
    store = CountingStore(log)
    live: list[LiveTurn] = []

    async def follow(turn_id: str) -> None:
        async with following_live_trajectory(
            args.endpoint,
            store,
            PREFIX,
            turn_id,
            poll_interval_seconds=args.poll,
            drain_seconds=0,
        ) as turn:
            live.append(turn)
            turn.follow(turns[turn_id].task_id)
            await anyio.sleep_forever()

    def window_counts() -> dict[str, int] | None:
        # The window's reads, failed reads, pool waits, pages, events and bytes from the
        # library's own figures (LiveTurn.statistics()), summed over the turns, beside the
        # figures taken from the outside (the agent's count of reads, the store's pages).
        if not live:
            return None
        snapshots = [turn.statistics() for turn in live]
        names = ("reads", "failed_reads", "pool_waits", "pages_stored", "events_stored")
        counts = {name: sum(getattr(s, name) for s in snapshots) for name in names}
        counts["bytes_stored"] = sum(s.bytes_stored for s in snapshots)
        return counts

    return await measure(args, turns, log, all_started, follow, counter, window_counts)


# --- the old follower -----------------------------------------------------------------


async def run_old(args: argparse.Namespace, turns: dict[str, Turn]) -> dict[str, Any]:
    import asyncio
    import re
    import threading

    from agent_env.store.base import ObjectAlreadyExistsError
    from agent_env.store.object_store.object_store import ObjectStore
    from agent_env.task_step.snapshot_utils.live_trajectory import following_live_trajectory

    chunk_name = re.compile(r"([0-9]{8,})-([0-9]{8,})\.jsonl")
    loop = asyncio.get_running_loop()
    all_started = anyio.Event()
    # Its store is called from worker threads (asyncio.to_thread): wake the loop safely.
    log = PageLog(turns, lambda: loop.call_soon_threadsafe(all_started.set))

    class CountingObjectStore(ObjectStore):
        """The framework's ObjectStore ABC: only ``put`` is used by its follower."""

        def __init__(self) -> None:
            self._keys: set[str] = set()
            self._lock = threading.Lock()

        def put(
            self,
            key: str,
            data: bytes,
            content_type: str = "application/octet-stream",
            allow_overwrite: bool = False,
        ) -> str:
            _, turn_id, _, name = key.split("/")
            chunk = chunk_name.fullmatch(name)
            if chunk is not None:
                log.page_stored(turn_id, int(chunk[1]), int(chunk[2]))
                return "mem://" + key
            with self._lock:
                if key in self._keys and not allow_overwrite:
                    raise ObjectAlreadyExistsError(key)
                self._keys.add(key)
            return "mem://" + key

        def _unused(self, *args: object, **kwargs: object) -> Any:
            raise NotImplementedError("not used by the live trajectory follower")

        put_file = put_file_at = get = get_object_metadata = get_object_metadata_at = _unused
        list = list_at = object_url = get_object_key = download_to_file = _unused

    counter = LogCounter()
    counter.attach("agent_env", debug=False)
    store = CountingObjectStore()

    async def follow(turn_id: str) -> None:
        async with following_live_trajectory(
            args.endpoint, store, PREFIX, turn_id, poll_interval_seconds=args.poll
        ) as turn:
            turn.follow(turns[turn_id].task_id)
            await anyio.sleep_forever()

    return await measure(args, turns, log, all_started, follow, counter, lambda: None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--side", choices=["ours", "old"], required=True)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--followers", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--poll", type=float, required=True)
    parser.add_argument("--startup-timeout", type=float, required=True)
    parser.add_argument("--event-interval", type=float, required=True)
    parser.add_argument("--endpoint", required=True, help="the agent's trajectory read URL")
    parser.add_argument("--agent-url", required=True, help="the agent's root URL, ending in /")
    parser.add_argument("--agent-pid", type=int, required=True)
    parser.add_argument("--run-id", default="run", help="makes this run's task ids its own")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="gc.freeze() once every follower has started"
    )
    parser.add_argument(
        "--start-batch", type=int, default=0, help="start K followers a turn of the loop (0: all)"
    )
    args = parser.parse_args(argv)
    if args.side == "old" and args.backend != "asyncio":
        parser.error("the old follower runs on asyncio only")
    raise_open_files_limit()
    turns = {f"f{i:05d}": Turn(f"{args.run_id}-{args.side}-{i:05d}") for i in range(args.followers)}
    run = run_ours if args.side == "ours" else run_old

    async def one() -> dict[str, Any]:
        return await run(args, turns)

    result = anyio.run(one, backend=args.backend)
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
