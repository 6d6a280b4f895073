"""Every target of issues 10 and 21 against the figures in ``benchmarks/results/``: met or not.

Each benchmark writes its figures as JSON. A benchmark's JSON says what it
measured against a target in a top-level ``"targets"`` list, each entry
``{"id", "what", "bound", "measured", "shown", "met"}`` (``met``: true, false
or null when not measured); ``scale.py`` writes one. The targets of benchmarks
that wrote no such list, or no JSON at all, are named here as not measured, so
the summary always shows every target.

Usage: ``python benchmarks/summary.py [--results benchmarks/results] [--markdown]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _measure import markdown_table, text_table

HERE = Path(__file__).resolve().parent
# The targets of issues 10 and 21, by the benchmark that measures each: (id, what, bound).
TARGETS: dict[str, list[tuple[str, str, str]]] = {
    "scale": [
        (
            "scale.cpu_ratio_1000_asyncio",
            "CPU per read at N=1000, ours on asyncio / old",
            "<= 0.2x",
        ),
        ("scale.cpu_ratio_1000_trio", "CPU per read at N=1000, ours on trio / old", "<= 0.2x"),
        ("scale.rss_1000_asyncio", "RSS per follower at N=1000, ours on asyncio", "<= 30 KiB"),
        ("scale.rss_1000_trio", "RSS per follower at N=1000, ours on trio", "<= 30 KiB"),
        ("scale.lag_p99_5000_asyncio", "poll lag p99, 5000 followers, asyncio", "< 250 ms"),
        ("scale.lag_p99_5000_trio", "poll lag p99, 5000 followers, trio", "< 250 ms"),
        (
            "scale.startup_block_5000_asyncio",
            "worst loop block while 5000 start, asyncio",
            "<= 50 ms",
        ),
        ("scale.startup_block_5000_trio", "worst loop block while 5000 start, trio", "<= 50 ms"),
        ("scale.rss_5000_asyncio", "RSS per follower at N=5000, ours on asyncio", "<= 20 KiB"),
        ("scale.rss_5000_trio", "RSS per follower at N=5000, ours on trio", "<= 20 KiB"),
        (
            "scale.cpu_5000_over_1000_asyncio",
            "CPU per read at N=5000 / at N=1000, ours on asyncio, same run",
            "<= 1.2x",
        ),
        (
            "scale.cpu_5000_over_1000_trio",
            "CPU per read at N=5000 / at N=1000, ours on trio, same run",
            "<= 1.2x",
        ),
    ],
    "read_path": [
        ("read_path.cpu_per_read_asyncio", "one follower's read, CPU, asyncio", "<= 120 µs"),
        ("read_path.cpu_per_read_trio", "one follower's read, CPU, trio", "<= 120 µs"),
    ],
    "throughput": [
        ("throughput.memory_events_per_second", "small events/s into MemoryStore", ">= 200,000"),
        (
            "throughput.filesystem_events_per_second",
            "small events/s into FilesystemStore",
            ">= 100,000",
        ),
    ],
    "teardown": [
        ("teardown.cancelled", "cancelled: reads after the body, exit median", "0 reads, < 5 ms"),
        ("teardown.raises", "raises: reads after the body, exit median", "0 reads, < 5 ms"),
        (
            "teardown.returns_dead_agent",
            "returns, dead agent: reads after stop, exit median",
            "<= 1 read, < 20 ms",
        ),
    ],
}


def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def collect(results: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every target, measured or not; and notes: a benchmark that gave none, a loaded run."""
    rows: list[dict[str, Any]] = []
    notes = []
    for name, known in TARGETS.items():
        document = load(results, name)
        given = {t["id"]: t for t in (document or {}).get("targets", []) if "id" in t}
        if document is None:
            notes.append(f"{name}: no {results / (name + '.json')} (not run, or it failed)")
        elif not given:
            notes.append(f'{name}: its JSON names no targets (a top-level "targets" list)')
        for run in (document or {}).get("loaded_runs", []):
            notes.append(f"{name}: a loaded machine (other processes took CPU) in {run}")
        for id_, what, bound in known:
            found = given.pop(id_, None)
            if found is None:
                rows.append({"id": id_, "what": what, "bound": bound, "shown": "not measured"})
                rows[-1]["met"] = None
            else:
                rows.append(found)
        rows.extend(given.values())  # targets a benchmark measures that this list lacks
    return rows, notes


def floor_lines(results: Path) -> list[str]:
    """What the least a turn can keep costs at the largest N (``collector_floor.py``).

    Beside the start-up block and RSS targets at 5,000: the caller's steps alone, and
    each with the task group and follower task the promise needs (never outliving
    the step). A bound below that floor cannot be met by trimming the library.
    """
    document = load(results, "collector_floor")
    rows = (document or {}).get("results", [])
    if not rows:
        return []
    largest = max(row["followers"] for row in rows)
    batch = (document or {}).get("start_batch") or 0
    started = f"started {batch} a turn of the loop" if batch else "all started at once"
    lines = [f"The floor under the targets at N={largest:,}, {started} (collector_floor.py):"]
    for row in rows:
        if row["followers"] == largest and row["shape"] in ("step", "promise"):
            lines.append(
                f"  {row['shape']} on {row['backend']}: full pass {row['full_pass_ms']:.0f} ms, "
                f"start-up block {row['startup_block_ms']:.0f} ms, "
                f"RSS {row['rss_per_step_kib']:.1f} KiB a step"
            )
    return lines


def met_word(met: bool | None) -> str:
    return "not measured" if met is None else ("yes" if met else "NO")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = parser.parse_args(argv)
    rows, notes = collect(args.results)
    header = ["target", "bound", "measured", "met"]
    body = [
        [
            row.get("what", row["id"]),
            row.get("bound", ""),
            row.get("shown", ""),
            met_word(row["met"]),
        ]
        for row in rows
    ]
    render = markdown_table if args.markdown else text_table
    print("Targets (issues 10 and 21), from " + str(args.results))
    print()
    for line in render(header, body):
        print(line)
    for note in notes:
        print(f"  {note}")
    floor = floor_lines(args.results)
    if floor:
        print()
        print("\n".join(floor))
    met = sum(row["met"] is True for row in rows)
    missed = sum(row["met"] is False for row in rows)
    print(f"\n{met} met, {missed} missed, {len(rows) - met - missed} not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
