"""Scale: N followers in one process, ours against the follower it replaces, in one run.

For each N (default 100, 1,000, 2,000, 5,000) and each side, a fresh child
process (``_scale_child.py``) runs N followers at a 1 s poll interval against a
fresh lean agent (``lean_agent.py``) in another process, and measures:

- reads/s (counted by the agent) and pages/s (stored), over the window;
- CPU per read: the child's ``time.process_time()`` over the window, per read;
- RSS per follower: ``VmRSS`` growth from before the followers start to the end
  of start-up (and to the end of the window);
- poll lag p50/p99: when a page was stored minus when the agent made each of
  its events visible, over the events due in the window;
- start-up: until every follower has stored its first page;
- worst event-loop block: the worst lateness of a 10 ms sleep, during start-up
  and during the window;

each also as a ratio against the old follower at the same N, in the same run.
The sides: ``old`` (agentenv-framework 0.9.1364's ``following_live_trajectory``,
one ``httpx.AsyncClient`` per follower, asyncio, from the venv
``tools/old-follower-venv`` makes), ``ours-asyncio`` and ``ours-trio`` (the
library's ``following_live_trajectory`` with its default clients). Runs
alternate between the sides (the order flips each N and each round), so the
drift of a shared machine falls on all of them. Figures, never assertions.

The targets (issues 10 and 21) are printed and written to the JSON, each met or
not. At the largest N our sides run ``--spread-rounds`` rounds (3 by default),
so the 5,000-follower targets state their run-to-run spread and hold only if
every round meets them.

Usage: ``python benchmarks/scale.py [--followers 100,1000,2000,5000]
[--seconds 20] [--rounds 1] [--spread-rounds 3] [--sides old,ours-asyncio,ours-trio]
[--old-python PATH] [--json PATH] [--markdown] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _measure import (
    RESULT_MARK,
    OthersClock,
    machine,
    markdown_table,
    number,
    run_about,
    text_table,
)
from _profile import py_spy, where_time_goes

HERE = Path(__file__).resolve().parent
SIDES = ("old", "ours-asyncio", "ours-trio")
# A run during which other processes (or the hypervisor, as steal) took this share of a
# core or more ran on a loaded machine: its figures are named as such, never quoted as
# the machine's (a benchmark's child and its agent take one core each of the two).
LOADED_SHARE = 0.1
DEFAULT_OLD_PYTHON = HERE.parent / ".venvs" / "old-follower" / "bin" / "python"
# What each figure is compared by: its key in a run's result, and its name.
FIGURES = (
    ("reads_per_second", "reads/s"),
    ("cpu_per_read_us", "CPU per read"),
    ("rss_per_follower_kib", "RSS per follower"),
    ("lag_p50_ms", "poll lag p50"),
    ("lag_p99_ms", "poll lag p99"),
    ("startup_seconds", "start-up"),
    ("loop_blocked_startup_ms", "loop block, start-up"),
    ("loop_blocked_window_ms", "loop block, window"),
)


# --- one run --------------------------------------------------------------------------


def start_lean_agent(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable,
        str(HERE / "lean_agent.py"),
        "--interval",
        str(args.event_interval),
        "--event-bytes",
        str(args.event_bytes),
    ]
    agent = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert agent.stdout is not None
    line = agent.stdout.readline()
    mark = "lean agent serving on "
    if not line.startswith(mark):
        agent.kill()
        agent.wait()
        raise RuntimeError(f"the lean agent said {line!r}")
    return agent, line[len(mark) :].strip()


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_one(args: argparse.Namespace, side: str, n: int, run_id: str) -> dict[str, Any]:
    """One side at one N, in a fresh child against a fresh lean agent."""
    kind, _, backend = side.partition("-")
    python = str(args.old_python) if kind == "old" else sys.executable
    others = OthersClock()
    others.start()
    agent, url = start_lean_agent(args)
    try:
        command = [
            python,
            str(HERE / "_scale_child.py"),
            "--side",
            kind,
            "--backend",
            backend or "asyncio",
            "--followers",
            str(n),
            "--seconds",
            str(args.seconds),
            "--poll",
            str(args.poll),
            "--startup-timeout",
            str(args.startup_timeout),
            "--event-interval",
            str(args.event_interval),
            "--endpoint",
            url + "ext/trajectory",
            "--agent-url",
            url,
            "--agent-pid",
            str(agent.pid),
            "--run-id",
            run_id,
            "--start-batch",
            str(args.start_batch),
            *(["--gc-freeze"] if args.gc_freeze and kind == "ours" else []),
        ]
        profile = None
        if args.profile is not None and kind == "ours":
            # py-spy samples the whole child: start-up, the window and shutdown.
            args.profile.mkdir(parents=True, exist_ok=True)
            profile = args.profile / f"{side}-{n}.txt"
            spy = py_spy()
            if spy is None:
                raise RuntimeError("--profile needs py-spy (pip install py-spy)")
            record = [spy, "record", "--format", "raw", "--rate", "200", "--nonblocking"]
            command = [*record, "--output", str(profile), "--", *command]
        bound = args.startup_timeout + args.seconds + 300
        began = time.monotonic()
        done = subprocess.run(
            command, stdout=subprocess.PIPE, text=True, timeout=bound, check=False
        )
    finally:
        stop(agent)
    others_share = others.share_of_a_core()
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            result = dict(json.loads(line[len(RESULT_MARK) :]))
            result["side_name"] = side
            result["run_seconds"] = time.monotonic() - began
            result["others_cpu_share"] = others_share
            blocked = result["loop_blocked_ms"]
            result["loop_blocked_startup_ms"] = blocked.get("startup", 0.0)
            result["loop_blocked_window_ms"] = blocked.get("window", 0.0)
            if profile is not None:
                result["profile"] = str(profile)
                result["profile_summary"] = where_time_goes(profile)
            return result
    raise RuntimeError(f"{side} at N={n} exited {done.returncode} without a result")


def describe(r: dict[str, Any]) -> str:
    started = f"{r['started']}/{r['followers']} started in {r['startup_seconds']:.2f} s"
    return (
        f"  {r['side_name']:>12} N={r['followers']}: {started}; "
        f"{r['reads_per_second']:.0f} reads/s, {number(r['cpu_per_read_us'], '.0f')} µs CPU/read "
        f"(agent {number(r['agent_cpu_per_read_us'], '.0f')}), "
        f"{r['rss_per_follower_kib']:.0f} KiB/follower, "
        f"poll lag p99 {number(r['lag_p99_ms'], '.0f')} ms, "
        f"block {r['loop_blocked_startup_ms']:.0f}/{r['loop_blocked_window_ms']:.0f} ms, "
        f"{r['failures']} failed, {r['pool_busy']} pool busy ({r['run_seconds']:.0f} s)"
        f"{load_note(r)}"
    )


def load_note(r: dict[str, Any]) -> str:
    """What other processes took of the machine during a run, when that makes it loaded."""
    share = r.get("others_cpu_share")
    if share is None or share < LOADED_SHARE:
        return ""
    return f"; LOADED: other processes took {share:.0%} of a core"


def loaded_runs(results: list[dict[str, Any]]) -> list[str]:
    """The runs during which other processes took more than LOADED_SHARE of a core."""
    return [
        f"{r['side_name']} N={r['followers']}: {r['others_cpu_share']:.0%} of a core"
        for r in results
        if (r.get("others_cpu_share") or 0.0) >= LOADED_SHARE
    ]


# --- many runs: medians, ratios, targets ----------------------------------------------


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def spread_of(runs: list[dict[str, Any]]) -> dict[str, list[float] | None]:
    """Each figure's least and most over the rounds (None where no round measured it)."""
    spread: dict[str, list[float] | None] = {}
    for key, _ in FIGURES:
        values = [r[key] for r in runs if r.get(key) is not None]
        spread[key] = [min(values), max(values)] if values else None
    return spread


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (N, side): the medians over its rounds, and ratios against ``old``."""
    rows = []
    for n in sorted({r["followers"] for r in results}):
        at_n = [r for r in results if r["followers"] == n]
        old = [r for r in at_n if r["side_name"] == "old"]
        for side in SIDES:
            runs = [r for r in at_n if r["side_name"] == side]
            if not runs:
                continue
            row: dict[str, Any] = {"followers": n, "side": side, "rounds": len(runs)}
            extra = ("pages_per_second", "lag_max_ms", "event_lag_p50_ms", "event_lag_p99_ms")
            for key in (*(key for key, _ in FIGURES), *extra):
                row[key] = median_of(runs, key)
            row["started"] = min(r["started"] for r in runs)
            row["failures"] = max(r["failures"] for r in runs)
            row["pool_busy"] = max(r["pool_busy"] for r in runs)
            row["rss_per_follower_end_kib"] = median_of(runs, "rss_per_follower_end_kib")
            row["agent_cpu_per_read_us"] = median_of(runs, "agent_cpu_per_read_us")
            ratios: dict[str, float | None] = {}
            for key, _ in FIGURES:
                ours, theirs = row[key], median_of(old, key)
                ratios[key] = ours / theirs if ours is not None and theirs else None
            row["ratio_to_old"] = ratios if old and side != "old" else None
            row["spread"] = spread_of(runs) if len(runs) > 1 else None
            rows.append(row)
    return rows


# The bounds this benchmark is held to. Issue 10 set the first (N = 1,000 against the old
# follower, and the 5,000-follower lag and start-up block); issue 21 tightened the CPU
# ratio at N = 1,000 from 0.4x to 0.2x and added CPU per read and memory at N = 5,000.
CPU_RATIO_1000 = 0.2
RSS_1000_KIB = 30.0
RSS_5000_KIB = 20.0
CPU_5000_OVER_1000 = 1.2
LAG_P99_5000_MS = 250.0
STARTUP_BLOCK_5000_MS = 50.0


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issues 10 and 21's targets for this benchmark, each with what was measured and whether met.

    A target at N = 5,000 is met only if every round there met it: its shown figure is
    the median and, over several rounds, their spread (least to most).
    """

    def row(n: int, side: str) -> dict[str, Any] | None:
        return next((r for r in rows if r["followers"] == n and r["side"] == side), None)

    out = []

    def target(
        id_: str, what: str, bound: str, measured: float | None, met: bool | None, shown: str
    ) -> None:
        out.append(
            {
                "id": id_,
                "what": what,
                "bound": bound,
                "measured": measured,
                "shown": "not measured" if measured is None else shown,
                "met": None if measured is None else met,
            }
        )

    def over_rounds(r: dict[str, Any], key: str, unit: str, scale: float = 1.0) -> str:
        """The median, and the spread of the rounds when there were several."""
        shown = f"{r[key] * scale:.3g}{unit}"
        low, high = (r.get("spread") or {}).get(key) or (None, None)
        if r["rounds"] > 1 and low is not None and high is not None:
            shown += f" ({low * scale:.3g} to {high * scale:.3g} over {r['rounds']} rounds)"
        return shown

    def worst(r: dict[str, Any], key: str) -> float:
        """The highest of the rounds (a round the bound must hold for too)."""
        high = ((r.get("spread") or {}).get(key) or (None, None))[1]
        return float(r[key] if high is None else high)

    for backend in ("asyncio", "trio"):
        ours = row(1000, f"ours-{backend}")
        ratio = (ours["ratio_to_old"] or {}).get("cpu_per_read_us") if ours else None
        target(
            f"scale.cpu_ratio_1000_{backend}",
            f"CPU per read at N=1000, ours on {backend} / old on asyncio",
            f"<= {CPU_RATIO_1000}x",
            ratio,
            ratio is not None and ratio <= CPU_RATIO_1000,
            f"{ratio:.3g}x" if ratio is not None else "",
        )
    for backend in ("asyncio", "trio"):
        ours = row(1000, f"ours-{backend}")
        rss = ours["rss_per_follower_kib"] if ours else None
        target(
            f"scale.rss_1000_{backend}",
            f"RSS per follower at N=1000, ours on {backend}",
            f"<= {RSS_1000_KIB:.0f} KiB",
            rss,
            rss is not None and rss <= RSS_1000_KIB,
            f"{rss:.3g} KiB" if rss is not None else "",
        )
    # At N = 5,000, each bound must hold in every round, with every follower started.
    at_5000_bounds = (
        ("lag_p99_5000", "poll lag p99 with 5000 followers", "lag_p99_ms", LAG_P99_5000_MS),
        (
            "startup_block_5000",
            "worst loop block while 5000 start",
            "loop_blocked_startup_ms",
            STARTUP_BLOCK_5000_MS,
        ),
        ("rss_5000", "RSS per follower at N=5000", "rss_per_follower_kib", RSS_5000_KIB),
    )
    for id_, what, key, bound in at_5000_bounds:
        strict = key == "lag_p99_ms"  # under 250 ms; the others at most their bound
        unit = " KiB" if key.endswith("_kib") else " ms"
        for backend in ("asyncio", "trio"):
            ours = row(5000, f"ours-{backend}")
            measured = ours[key] if ours else None
            highest = worst(ours, key) if ours and measured is not None else None
            target(
                f"scale.{id_}_{backend}",
                f"{what}, ours on {backend}",
                f"{'<' if strict else '<='} {bound:.0f}{unit}",
                measured,
                ours is not None
                and highest is not None
                and (highest < bound if strict else highest <= bound)
                and ours["started"] == 5000,
                over_rounds(ours, key, unit) if ours and measured is not None else "",
            )
    for backend in ("asyncio", "trio"):
        at_5000, at_1000 = row(5000, f"ours-{backend}"), row(1000, f"ours-{backend}")
        cpu_5000 = at_5000["cpu_per_read_us"] if at_5000 else None
        cpu_1000 = at_1000["cpu_per_read_us"] if at_1000 else None
        ratio = cpu_5000 / cpu_1000 if cpu_5000 is not None and cpu_1000 else None
        target(
            f"scale.cpu_5000_over_1000_{backend}",
            f"CPU per read at N=5000 / at N=1000, ours on {backend}, same run",
            f"<= {CPU_5000_OVER_1000}x",
            ratio,
            ratio is not None
            and at_5000 is not None
            and cpu_1000 is not None
            and worst(at_5000, "cpu_per_read_us") / cpu_1000 <= CPU_5000_OVER_1000,
            over_rounds(at_5000, "cpu_per_read_us", "x", 1 / cpu_1000)
            if at_5000 is not None and ratio is not None and cpu_1000
            else "",
        )
    return out


# --- printing -------------------------------------------------------------------------


def figure_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = [
        "N",
        "side",
        "reads/s",
        "CPU µs/read",
        "RSS KiB/follower",
        "poll lag p50/p99 ms",
        "event lag p99 ms",
        "start-up s",
        "loop block start-up/window ms",
        "failed reads",
        "pool busy",
    ]
    body = []
    for r in rows:
        startup = number(r["startup_seconds"], ".2f")
        if r["started"] < r["followers"]:
            startup = f">{startup} ({r['started']}/{r['followers']})"
        body.append(
            [
                f"{r['followers']:,}",
                r["side"],
                number(r["reads_per_second"], ".0f"),
                number(r["cpu_per_read_us"], ".0f"),
                number(r["rss_per_follower_kib"], ".0f"),
                f"{number(r['lag_p50_ms'], '.1f')}/{number(r['lag_p99_ms'], '.1f')}",
                number(r["event_lag_p99_ms"], ".0f"),
                startup,
                f"{number(r['loop_blocked_startup_ms'], '.0f')}/"
                f"{number(r['loop_blocked_window_ms'], '.0f')}",
                str(r["failures"]),
                str(r["pool_busy"]),
            ]
        )
    return header, body


def ratio_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["N", "side", *(name for _, name in FIGURES)]
    body = [
        [
            f"{r['followers']:,}",
            r["side"],
            *(number(r["ratio_to_old"][key], ".2f") for key, _ in FIGURES),
        ]
        for r in rows
        if r["ratio_to_old"] is not None
    ]
    return header, body


def target_table(found: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["target", "bound", "measured", "met"]
    body = [[t["what"], t["bound"], t["shown"], met_word(t["met"])] for t in found]
    return header, body


def met_word(met: bool | None) -> str:
    return "not measured" if met is None else ("yes" if met else "NO")


def print_tables(
    tables: list[tuple[str, tuple[list[str], list[list[str]]]]], *, markdown: bool
) -> None:
    for title, (header, body) in tables:
        print(f"\n{title}\n")
        render = markdown_table if markdown else text_table
        for line in render(header, body):
            print(line)


def print_all(rows: list[dict[str, Any]], found: list[dict[str, Any]], *, markdown: bool) -> None:
    print_tables(
        [
            ("Figures (medians over rounds; the lean agent for every figure)", figure_table(rows)),
            (
                "Ratios: ours / old, same N, same run (lower is better, but for reads/s)",
                ratio_table(rows),
            ),
            ("Targets (issues 10 and 21)", target_table(found)),
        ],
        markdown=markdown,
    )


def write_json(
    args: argparse.Namespace,
    about: dict[str, Any],
    ns: list[int],
    sides: list[str],
    skipped: list[str],
    results: list[dict[str, Any]],
) -> None:
    """Every run so far, their summary and the targets, replaced whole (a run cut short keeps
    what it measured)."""
    rows = summarize(results)
    found = targets(rows)
    document = {
        "benchmark": "scale",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": about,
        "about": run_about(),
        "config": {
            "followers": ns,
            "sides": sides,
            "not_run": skipped,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "spread_rounds": args.spread_rounds,
            "poll": args.poll,
            "event_interval": args.event_interval,
            "event_bytes": args.event_bytes,
            "agent": "lean (benchmarks/lean_agent.py), another process",
        },
        "runs": results,
        "loaded_runs": loaded_runs(results),
        "summary": rows,
        "targets": found,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=Path(args.json).parent, delete=False, suffix=".tmp"
    ) as out:
        json.dump(document, out, indent=1)
    os.replace(out.name, args.json)


# --- main -----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="N followers in one process, ours against the old follower, each in a "
        "fresh child process against a lean agent in another. Prints figures; asserts nothing."
    )
    parser.add_argument("--followers", default="100,1000,2000,5000", help="comma-separated Ns")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"of {','.join(SIDES)}")
    parser.add_argument("--seconds", type=float, default=20.0, help="window (default: 20)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per N and side (default 1)")
    parser.add_argument(
        "--spread-rounds",
        type=int,
        default=3,
        metavar="K",
        help="rounds of our sides at the largest N, at least --rounds, so that the targets "
        "there state their spread and hold for every round (default 3; --quick: 1)",
    )
    parser.add_argument("--poll", type=float, default=1.0, help="poll interval (default: 1)")
    parser.add_argument(
        "--event-interval", type=float, default=0.1, help="seconds between a task's events"
    )
    parser.add_argument("--event-bytes", type=int, default=64, help="padding bytes per event")
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=300.0,
        help="longest wait for every follower's first page; the window starts then anyway "
        "(default: 300, for the old follower at 5,000)",
    )
    parser.add_argument(
        "--old-python",
        type=Path,
        default=Path(os.environ.get("BENCH_OLD_PYTHON", DEFAULT_OLD_PYTHON)),
        help="the python of the old follower's venv (tools/old-follower-venv makes it)",
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="our side calls gc.freeze() once its followers have started (an operator's option)",
    )
    parser.add_argument(
        "--start-batch",
        type=int,
        default=0,
        metavar="K",
        help="start the followers K at a time, the loop running between batches, as a worker "
        "that starts its steps as they come (default 0: all in one turn of the loop)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every run and the summary here")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="PATH",
        help="run nothing: print the tables of a run written with --json (with --markdown, "
        "to paste into docs/benchmarks.md)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run our sides under py-spy (raw stacks into DIR) and say where their CPU goes; "
        "the sampling costs CPU, so take figures from a run without it",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: N=20, 3 s windows (seconds, not minutes)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.from_json is not None:
        document = json.loads(args.from_json.read_text())
        about = document["machine"]
        print(
            f"scale, the run of {document['date']}: {about['cpus']} CPUs ({about['cpu_model']}), "
            f"Python {about['python']}, {about['platform']}, "
            f"load {about['load_average'][0]:.2f} at the start"
        )
        print_all(document["summary"], document["targets"], markdown=args.markdown)
        print_load(document["runs"])
        return 0
    if args.quick:  # a smoke run, unless told otherwise
        if args.followers == _parser().get_default("followers"):
            args.followers = "20"
        args.seconds, args.startup_timeout = min(args.seconds, 3.0), min(args.startup_timeout, 30.0)
        if args.spread_rounds == _parser().get_default("spread_rounds"):
            args.spread_rounds = 1
    ns = [int(n.replace(",", "").replace("_", "")) for n in args.followers.split(",") if n]
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        print(f"unknown sides: {', '.join(unknown)}; of {', '.join(SIDES)}", file=sys.stderr)
        return 2
    skipped = []
    if "old" in sides and not args.old_python.exists():
        sides.remove("old")
        skipped.append(f"old (no {args.old_python}: run tools/old-follower-venv)")
    about = machine()
    print(
        f"scale: N = {', '.join(f'{n:,}' for n in ns)}; sides {', '.join(sides)}; "
        f"{args.seconds:g} s window, poll {args.poll:g} s, one event every "
        f"{args.event_interval:g} s per task; {args.rounds} round(s), {max(args.rounds, args.spread_rounds)} "
        f"of ours at N = {max(ns):,}; the lean agent "
        f"(benchmarks/lean_agent.py) in another process; Python {about['python']}, "
        f"{about['cpus']} CPUs, load {about['load_average'][0]:.2f}",
        flush=True,
    )
    for what in skipped:
        print(f"  not run: {what}", flush=True)
    results = []
    flip = False
    for n in ns:
        # At the largest N our sides run more rounds: the targets there state their spread.
        rounds = max(args.rounds, args.spread_rounds) if n == max(ns) else args.rounds
        for round_ in range(rounds):
            for side in reversed(sides) if flip else sides:
                if side == "old" and round_ >= args.rounds:
                    continue
                run_id = f"n{n}r{round_}{side}{os.getpid()}"
                result = run_one(args, side, n, run_id)
                results.append(result)
                print(describe(result), flush=True)
                if args.json:
                    write_json(args, about, ns, sides, skipped, results)
                for line in result.get("profile_summary", []):
                    print("    " + line, flush=True)
            flip = not flip
    rows = summarize(results)
    found = targets(rows)
    print_all(rows, found, markdown=args.markdown)
    print_load(results)
    return 0


def print_load(results: list[dict[str, Any]]) -> None:
    loaded = loaded_runs(results)
    if loaded:
        print(f"\nLoaded machine: other processes took {LOADED_SHARE:.0%} of a core or more in")
        for run in loaded:
            print(f"  {run}")
        print("so those figures are not this machine's: run again on a quiet one.")
        return
    shares = [r["others_cpu_share"] for r in results if r.get("others_cpu_share") is not None]
    if shares:
        print(f"\nOther processes took at most {max(shares):.1%} of a core during any run.")


if __name__ == "__main__":
    sys.exit(main())
