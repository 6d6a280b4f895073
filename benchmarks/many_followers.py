"""Many followers in one process: which shape of HTTP clients serves them best.

N followers, each following its own task of the reference agent over real
loopback sockets, for a fixed window, compared across three client shapes:

- ``pool``: the library's default (no client given): followers lease clients
  from the loop's shared pool (on the library's transport one client serves the
  loop; behind a proxy, ``FOLLOWERS_PER_PROXIED_CLIENT`` followers a client).
- ``per-follower``: one ``httpx.AsyncClient()`` per follower, created when it
  starts, as the old follower did.
- ``shared``: one ``httpx.AsyncClient()`` (default limits) shared by all.

Each shape runs in a fresh child process, so one shape's memory, clients and
SSL context cannot flatter the next. It prints figures, never asserts: the
numbers depend on the machine, and the point is to compare the shapes on one.

Usage: ``python benchmarks/many_followers.py [--followers 500] [--seconds 10]
[--poll 1] [--backend asyncio|trio] [--agent-process]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import subprocess
import sys
import time
import uuid
from datetime import datetime
from typing import Any

import anyio
import anyio.abc
import httpx
from _counting_store import CountingStore
from _measure import (
    LAG_SETTLE_SECONDS,
    RESULT_MARK,
    Heartbeat,
    LogCounter,
    PageLog,
    Turn,
    number,
    open_sockets,
    percentile,
    process_cpu_seconds,
    rss_kib,
    text_table,
)

from follower import PoolBusyError, following_live_trajectory

# Private, for a benchmark only: the pool's size is what is being measured.
from follower._http._clients import ClientPool, client_pool
from follower.lowlevel import live_trajectory_endpoint
from follower.testing import ReferenceAgent, TaskScript, serve_agent

SHAPES = ("pool", "per-follower", "shared")
SHAPE_TITLES = {
    "pool": "(a) library default: shared pool",
    "per-follower": "(b) one client per follower",
    "shared": "(c) one client shared by all",
}
# "pool:K": the library's ClientPool with K followers per client instead of the default.
_POOL_OF = re.compile(r"pool:([1-9][0-9]*)")
PREFIX = "bench/"


# --- one shape, in this process -------------------------------------------------------


async def start_agent_process(
    args: argparse.Namespace, events: int
) -> tuple[anyio.abc.Process, str]:
    """``python -m follower agent --port 0`` in a subprocess; its process and URL."""
    command = [
        sys.executable,
        "-m",
        "follower",
        "--backend",
        args.backend,
        "agent",
        "--port",
        "0",
        "--events",
        str(events),
        "--interval",
        str(args.event_interval),
        "--event-bytes",
        str(args.event_bytes),
    ]
    process = await anyio.open_process(command, stderr=None)
    assert process.stdout is not None
    seen = b""
    with anyio.fail_after(30):
        while b"\n" not in seen:
            seen += await process.stdout.receive()
    line = seen.split(b"\n", 1)[0].decode()
    mark = "reference agent serving on "
    if not line.startswith(mark):
        raise RuntimeError(f"the agent process said {line!r}")
    return process, line[len(mark) :].strip()


async def stop_agent_process(process: anyio.abc.Process) -> None:
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
        await process.aclose()


async def create_tasks(url: str, count: int) -> tuple[str, list[Turn]]:
    """The live read's endpoint, and ``count`` new tasks, each with its wall-clock start."""
    turns: list[Turn] = []
    async with httpx.AsyncClient(timeout=30) as setup:
        card = (await setup.get(url + ".well-known/agent-card.json")).json()
        endpoint = live_trajectory_endpoint(card, url)
        if endpoint is None:
            raise RuntimeError("the reference agent's card offers no live trajectory")

        async def send(limiter: anyio.CapacityLimiter) -> None:
            async with limiter:
                message = {
                    "kind": "message",
                    "role": "user",
                    "messageId": uuid.uuid4().hex,
                    "parts": [{"kind": "text", "text": "benchmark"}],
                }
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "message/send",
                    "params": {"message": message},
                }
                task = (await setup.post(url, json=body)).json()["result"]
            # The task's "working" timestamp is the wall-clock instant its events start.
            started = datetime.fromisoformat(task["status"]["timestamp"]).timestamp()
            turns.append(Turn(task["id"], started))

        limiter = anyio.CapacityLimiter(16)
        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(send, limiter)
    return endpoint, turns


async def run_shape(args: argparse.Namespace, shape: str) -> dict[str, Any]:
    """Run one client shape in this process; its figures as a dict."""
    counter = LogCounter(_is_pool_busy)
    counter.attach("follower", debug=True)

    n = args.followers
    # Tasks must outlive start-up and the window, or followers would stop reading.
    task_seconds = args.startup_timeout + args.seconds + 60
    events = math.ceil(task_seconds / args.event_interval)
    result: dict[str, Any] = {"shape": shape, "followers": n, "backend": args.backend}
    heartbeat = Heartbeat()
    agent_process = None
    agent = None
    all_started = anyio.Event()

    async with anyio.create_task_group() as outer:
        if args.agent_process:
            agent_process, url = await start_agent_process(args, events)
        else:
            script = TaskScript(
                events=events,
                interval_seconds=args.event_interval,
                event_bytes=args.event_bytes,
            )
            agent = ReferenceAgent(script=script)
            url = await outer.start(serve_agent, agent)
        try:
            endpoint, turn_list = await create_tasks(url, n)
            turns = {f"f{i:05d}": turn for i, turn in enumerate(turn_list)}
            log = PageLog(turns, all_started.set)
            store = CountingStore(log)
            outer.start_soon(heartbeat.run)
            stop = anyio.Event()
            sized = _POOL_OF.fullmatch(shape)
            # The library's own ClientPool, sized by the shape, leased as followers do.
            pool = ClientPool(followers_per_client=int(sized[1])) if sized else None

            async def follow(turn_id: str, client: httpx.AsyncClient | None) -> None:
                async with following_live_trajectory(
                    endpoint,
                    store,
                    PREFIX,
                    turn_id,
                    poll_interval_seconds=args.poll,
                    drain_seconds=0,
                    client=client,
                ) as turn:
                    turn.follow(turns[turn_id].task_id)
                    await stop.wait()

            async def follow_with_own_client(turn_id: str) -> None:
                # As the old follower did: a default client of its own, made when it starts.
                async with httpx.AsyncClient() as client:
                    await follow(turn_id, client)

            async def follow_leased(turn_id: str) -> None:
                assert pool is not None
                async with pool.lease() as client:
                    await follow(turn_id, client)

            await anyio.sleep(0.2)  # let set-up's connections settle before the baseline
            rss_before = rss_kib()
            sockets_before = open_sockets()
            cpu_start = time.process_time()
            started_at = anyio.current_time()
            heartbeat.phase = "startup"
            shared: httpx.AsyncClient | None = None
            async with anyio.create_task_group() as followers:
                if shape == "shared":
                    shared = httpx.AsyncClient()
                for turn_id in turns:
                    if shape == "per-follower":
                        followers.start_soon(follow_with_own_client, turn_id)
                    elif pool is not None:
                        followers.start_soon(follow_leased, turn_id)
                    else:
                        followers.start_soon(follow, turn_id, shared)
                with anyio.move_on_after(args.startup_timeout):
                    await all_started.wait()
                startup_seconds = anyio.current_time() - started_at
                rss_after = rss_kib()
                result.update(
                    startup_seconds=startup_seconds,
                    started=log.started,
                    startup_cpu_seconds=time.process_time() - cpu_start,
                    rss_before_kib=rss_before,
                    rss_after_kib=rss_after,
                    rss_per_follower_kib=(rss_after - rss_before) / n,
                    sockets=open_sockets() - sockets_before,
                    clients=_client_count(shape, n, pool),
                    startup_failures=counter.warnings,
                    startup_pool_busy=counter.pool_busy,
                )

                heartbeat.phase = "window"
                window_start = time.time()
                settle = min(args.poll + LAG_SETTLE_SECONDS, args.seconds / 2)
                log.open_lag_window()
                pages_start, cpu_window = log.pages, time.process_time()
                agent_reads = agent.statistics().reads if agent is not None else 0
                agent_cpu = process_cpu_seconds(agent_process.pid) if agent_process else 0.0
                await anyio.sleep(args.seconds)
                measured = log.close_lag_window(
                    window_start,
                    window_start + args.seconds - settle,
                    args.event_interval,
                    args.poll,
                )
                lags, unstored = measured.event, measured.unstored
                elapsed = time.time() - window_start
                reads = log.pages - pages_start
                cpu = time.process_time() - cpu_window
                result.update(
                    window_seconds=elapsed,
                    reads=reads,
                    reads_per_second=reads / elapsed,
                    cpu_seconds=cpu,
                    cpu_per_1000_reads=1000 * cpu / reads if reads else None,
                    lag_p50=percentile(lags, 0.50),
                    lag_p99=percentile(lags, 0.99),
                    lag_max=lags[-1] if lags else None,
                    lag_events=len(lags),
                    lag_late=sum(lag > args.poll + LAG_SETTLE_SECONDS for lag in lags),
                    unstored=unstored,
                    failures=counter.warnings,
                    pool_busy=counter.pool_busy,
                    failure_samples=counter.samples,
                    rss_end_kib=rss_kib(),
                )
                if agent is not None:
                    result["agent_reads_per_second"] = (
                        agent.statistics().reads - agent_reads
                    ) / elapsed
                if agent_process is not None:
                    result["agent_cpu_seconds"] = process_cpu_seconds(agent_process.pid) - agent_cpu
                heartbeat.phase = "shutdown"
                stopped_at = anyio.current_time()
                stop.set()
            if shared is not None:
                await shared.aclose()
            result["shutdown_seconds"] = anyio.current_time() - stopped_at
            result["loop_blocked"] = dict(heartbeat.worst)
        finally:
            if agent_process is not None:
                await stop_agent_process(agent_process)
        outer.cancel_scope.cancel()
    return result


def _is_pool_busy(record: logging.LogRecord) -> bool:
    """A DEBUG record of a read that found our own connection pool full."""
    return isinstance(record.args, tuple) and any(
        isinstance(arg, PoolBusyError) for arg in record.args
    )


def _client_count(shape: str, n: int, pool: ClientPool | None) -> int:
    if shape == "per-follower":
        return n
    if shape == "shared":
        return 1
    return (pool or client_pool()).client_count


def shape_title(shape: str) -> str:
    sized = _POOL_OF.fullmatch(shape)
    if sized is not None:
        return f"(a') pool of {sized[1]} followers per client"
    return SHAPE_TITLES[shape]


def is_shape(shape: str) -> bool:
    return shape in SHAPES or _POOL_OF.fullmatch(shape) is not None


# --- all shapes, one child process each -----------------------------------------------


def run_child(args: argparse.Namespace, shape: str) -> dict[str, Any]:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--only",
        shape,
        "--followers",
        str(args.followers),
        "--seconds",
        str(args.seconds),
        "--poll",
        str(args.poll),
        "--backend",
        args.backend,
        "--event-interval",
        str(args.event_interval),
        "--event-bytes",
        str(args.event_bytes),
        "--startup-timeout",
        str(args.startup_timeout),
    ]
    if args.agent_process:
        command.append("--agent-process")
    bound = args.startup_timeout + args.seconds + 180
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=bound, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return dict(json.loads(line[len(RESULT_MARK) :]))
    raise RuntimeError(f"shape {shape} exited {done.returncode} without a result")


def describe(result: dict[str, Any]) -> list[str]:
    """A few lines on one shape, for the log above the table."""
    blocked = result["loop_blocked"]
    lines = [
        f"{shape_title(result['shape'])}: {result['clients']} client(s), "
        f"{result['started']}/{result['followers']} started in "
        f"{result['startup_seconds']:.2f} s ({result['startup_cpu_seconds']:.2f} s CPU), "
        f"{result['sockets']} sockets opened; the run took {result['run_seconds']:.0f} s",
        f"  window {result['window_seconds']:.1f} s: {result['reads']} reads, "
        f"{result['cpu_seconds']:.2f} s CPU; RSS {result['rss_before_kib'] / 1024:.0f} -> "
        f"{result['rss_after_kib'] / 1024:.0f} MiB at start-up, "
        f"{result['rss_end_kib'] / 1024:.0f} MiB at the end",
        f"  loop blocked at most: start-up {1000 * blocked.get('startup', 0):.0f} ms, "
        f"window {1000 * blocked.get('window', 0):.0f} ms, "
        f"shutdown {1000 * blocked.get('shutdown', 0):.0f} ms "
        f"(shutdown took {result['shutdown_seconds']:.2f} s)",
        f"  lag over {result['lag_events']} events: p50 {number(result['lag_p50'], '.2f')} s, "
        f"p99 {number(result['lag_p99'], '.2f')} s, max {number(result['lag_max'], '.2f')} s; "
        f"{result['lag_late']} later than poll + {LAG_SETTLE_SECONDS:.0f} s, "
        f"{result['unstored']} not stored by the end",
        f"  failed reads {result['failures']} ({result['startup_failures']} in start-up), "
        f"pool busy {result['pool_busy']} ({result['startup_pool_busy']} in start-up)",
    ]
    if "agent_reads_per_second" in result:
        lines.append(f"  the agent saw {result['agent_reads_per_second']:.0f} reads/s")
    if "agent_cpu_seconds" in result:
        agent_cpu = result["agent_cpu_seconds"]
        per_1000 = 1000 * agent_cpu / result["reads"] if result["reads"] else 0.0
        lines.append(
            f"  the agent process used {agent_cpu:.2f} s CPU ({per_1000:.2f} s per 1000 reads)"
        )
    lines.extend(f"  e.g. {sample}" for sample in result["failure_samples"])
    return lines


def table(results: list[dict[str, Any]]) -> list[str]:
    header = (
        "shape",
        "reads/s",
        "CPU s/1000 reads",
        "RSS KiB/follower",
        "start-up s",
        "loop blocked ms",
        "failed reads",
        "pool busy",
        "lag p50/p99 s",
    )
    rows = [header]
    for r in results:
        blocked = max(r["loop_blocked"].get(p, 0.0) for p in ("startup", "window"))
        startup = f"{r['startup_seconds']:.2f}"
        if r["started"] < r["followers"]:
            startup = f">{startup} ({r['started']}/{r['followers']})"
        rows.append(
            (
                shape_title(r["shape"]),
                f"{r['reads_per_second']:.0f}",
                number(r["cpu_per_1000_reads"], ".2f"),
                f"{r['rss_per_follower_kib']:.0f}",
                startup,
                f"{1000 * blocked:.0f}",
                str(r["failures"]),
                str(r["pool_busy"]),
                f"{number(r['lag_p50'], '.2f')}/{number(r['lag_p99'], '.2f')}",
            )
        )
    return text_table(rows[0], rows[1:])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Many followers in one process, against the reference agent on loopback, "
        "for each shape of HTTP clients. Prints figures; asserts nothing."
    )
    parser.add_argument("--followers", type=int, default=500, help="followers (default: 500)")
    parser.add_argument("--seconds", type=float, default=10.0, help="window (default: 10)")
    parser.add_argument("--poll", type=float, default=1.0, help="poll interval (default: 1)")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"comma-separated shapes to run (default: {','.join(SHAPES)}); 'pool:K' is the "
        "library's pool with K followers per client",
    )
    parser.add_argument(
        "--agent-process",
        action="store_true",
        help="serve the agent from a subprocess ('python -m follower agent'), so its CPU "
        "and memory are not counted as the followers'",
    )
    parser.add_argument(
        "--event-interval",
        type=float,
        default=0.1,
        help="seconds between a task's events (default: 0.1)",
    )
    parser.add_argument("--event-bytes", type=int, default=64, help="padding bytes per event")
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=20.0,
        help="longest wait for every follower's first read; the window starts then anyway "
        "(default: 20)",
    )
    parser.add_argument(
        "--only", metavar="SHAPE", help="run this one shape in this process; print its figures"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [shape for shape in [*shapes, args.only or "pool"] if not is_shape(shape)]
    if unknown:
        print(f"unknown shapes: {', '.join(unknown)}; one of {SHAPES} or pool:K", file=sys.stderr)
        return 2
    if args.only is not None:

        async def one() -> dict[str, Any]:
            return await run_shape(args, args.only)

        result = anyio.run(one, backend=args.backend)
        print(RESULT_MARK + json.dumps(result), flush=True)
        return 0

    def say(text: str) -> None:
        print(text, flush=True)

    where = "a subprocess" if args.agent_process else "THIS process (its CPU and memory count)"
    say(
        f"{args.followers} followers, {args.seconds:g} s window, poll {args.poll:g} s, "
        f"{args.backend}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
        f"one event every {args.event_interval:g} s per task; agent served from {where}"
    )
    results = []
    for shape in shapes:
        say(f"\nrunning {shape_title(shape)} ...")
        began = time.monotonic()
        result = run_child(args, shape)
        result["run_seconds"] = time.monotonic() - began
        results.append(result)
        for line in describe(result):
            say(line)
    say("")
    for line in table(results):
        say(line)
    if not args.agent_process:
        say(
            "\nThe agent (hypercorn and the loopback relay in front of it) runs in the same "
            "process:\nits CPU is in the CPU column and its per-connection memory in the RSS "
            "column.\nRun with --agent-process to count the followers alone."
        )
    say(
        "reads/s counts reads that stored a page; lag is stored time minus the time the "
        "agent made the event visible;\nloop blocked is the worst lateness of a 10 ms "
        "sleep during start-up and the window."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
