"""``make bench``: every benchmark in turn, each writing JSON into ``benchmarks/results/``.

Runs ``scale.py``, then ``read_path.py``, ``throughput.py``, ``teardown.py``, ``streams.py``,
``sse_parse.py``, ``waits.py``, ``collector_floor.py`` and ``read_calls.py`` where they exist
(each is named as missing where it does not), each printing its own tables, then
``summary.py``: every target and whether it was met, and ``plots.py``: the figures drawn
as SVG images into docs/images/benchmarks/. Figures, never assertions: a benchmark or a
plot that fails makes the exit code non-zero, a target missed does not. ``BENCH_QUICK=1``
(or ``--quick``) is a smoke run of each, its images drawn into the results folder
(``plots/``), so that it never replaces the docs' own; ``BENCH_MARKDOWN=1`` (or
``--markdown``) prints the tables as markdown, for docs/benchmarks.md.

Usage: ``python benchmarks/run_all.py [--quick] [--markdown] [--results DIR]
[--old-python PATH]``; ``make bench`` sets up the venvs and runs it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The benchmarks after scale.py, each run with --json (and --quick in a smoke run).
OTHERS = (
    "read_path",
    "throughput",
    "teardown",
    "streams",
    "sse_parse",
    "waits",
    "collector_floor",
    "read_calls",
)
# Those that run the old follower beside ours, given its venv's python as scale.py is.
OLD_SIDE = ("throughput", "teardown")
# Where a full run's images go: the ones docs/benchmarks.md shows.
DOCS_IMAGES = HERE.parent / "docs" / "images" / "benchmarks"


def run(command: list[str]) -> int:
    print("\n$ " + " ".join(command), flush=True)
    began = time.monotonic()
    code = subprocess.run(command, check=False).returncode
    print(f"(exit {code}, {time.monotonic() - began:.0f} s)", flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--quick", action="store_true", default=os.environ.get("BENCH_QUICK") == "1"
    )
    parser.add_argument(
        "--markdown", action="store_true", default=os.environ.get("BENCH_MARKDOWN") == "1"
    )
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument(
        "--old-python",
        help="the old follower's venv python (scale.py, throughput.py, teardown.py)",
    )
    args = parser.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    quick = ["--quick"] if args.quick else []
    markdown = ["--markdown"] if args.markdown else []
    failed = []

    scale = [sys.executable, str(HERE / "scale.py"), "--json", str(args.results / "scale.json")]
    if args.old_python:
        scale += ["--old-python", args.old_python]
    if run(scale + quick + markdown) != 0:
        failed.append("scale")
    missing = []
    for name in OTHERS:
        script = HERE / f"{name}.py"
        if not script.exists():
            missing.append(name)
            print(f"\n{name}: benchmarks/{name}.py does not exist yet; not run", flush=True)
            continue
        # Each takes --json; --quick only where it offers a smoke run.
        knows_quick = "--quick" in script.read_text()
        command = [sys.executable, str(script), "--json", str(args.results / f"{name}.json")]
        if args.old_python and name in OLD_SIDE:
            command += ["--old-python", args.old_python]
        if run(command + (quick if knows_quick else [])) != 0:
            failed.append(name)
    print(flush=True)
    run([sys.executable, str(HERE / "summary.py"), "--results", str(args.results), *markdown])
    images = args.results / "plots" if args.quick else DOCS_IMAGES
    plots = [sys.executable, str(HERE / "plots.py"), "--results", str(args.results)]
    if run([*plots, "--out", str(images)]) != 0:
        failed.append("plots")
    if missing:
        print(f"not run (no script yet): {', '.join(missing)}")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
