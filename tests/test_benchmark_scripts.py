"""The benchmark scripts still run: each in its quick mode, in a child process.

Nothing here checks a figure (figures come from the scripts, never from tests);
only that the scripts run to the end and write what they promise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def run_script(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_throughput_benchmark_runs_quick_and_stores_every_event(tmp_path: Path) -> None:
    out = tmp_path / "throughput.json"
    printed = run_script("throughput.py", "--quick", "--json", str(out), "--tmp", str(tmp_path))
    figures = json.loads(out.read_text())
    assert figures["events"] == 20_000
    assert [row["store"] for row in figures["rows"]] == ["memory", "filesystem"]
    for row in figures["rows"]:
        assert row["all_stored"], row["end"]
        assert row["events_per_second"] > 0
        assert row["chunk_bytes"] > 0
        assert row["store"] in printed


def test_the_idle_poll_benchmark_runs_on_a_small_turn(tmp_path: Path) -> None:
    out = tmp_path / "idle.json"
    run_script(
        "idle_poll.py", "--chunks", "50", "--polls", "3", "--json", str(out), "--tmp", str(tmp_path)
    )
    rows = json.loads(out.read_text())["rows"]
    assert [(row["store"], row["chunks"]) for row in rows] == [("memory", 50), ("filesystem", 50)]
    for row in rows:
        # The whole folder at every poll without start_after; only the marks with it.
        assert row["whole_keys"] == 51
        assert row["start_after_keys"] == 1
