"""The benchmarks run, so they cannot rot: each script once, in its smoke mode, on loopback.

The one place the benchmark scripts are run from the suite.
Figures are never asserted (they belong to the machine); what is checked is that each
script runs to the end and writes the figures it promises. They spawn processes and
take seconds, so they run on one Python only (3.11, the one ``make bench`` uses), not
on every Python of the suite. The old follower's side needs its own venv
(``tools/old-follower-venv``, which `make test` builds) and is skipped where it has not been made.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
BENCHMARKS = ROOT / "benchmarks"
OLD_PYTHON = ROOT / ".venvs" / "old-follower" / "bin" / "python"

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11),
    reason="the benchmarks' smoke runs take seconds each: one Python (3.11) is enough",
)
# A run of seconds that mostly waits: its measuring window, its agents in other processes.
# The runs that work the CPU throughout (read_path, throughput) are not marked.
WAITING = pytest.mark.waiting


HAS_OLD = pytest.mark.skipif(not OLD_PYTHON.exists(), reason="no venv from tools/old-follower-venv")
# The ways read_path.py measures a read, as its JSON must name them: written out here, not
# imported, so that a way renamed or dropped there fails this test.
READ_PATH_WAYS = (
    "raw",
    "raw + deadline",
    "h11",
    "lean codec",
    "httpx default",
    "httpx + ours",
    "read_page default",
    "read_page + ours",
    "read_page + otel",
)


def run(script: str, *args: str, timeout: float = 180) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def scale_quick(tmp_path: Path, sides: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / "scale.json"
    printed = run(
        "scale.py",
        "--quick",
        "--followers",
        "10",
        "--seconds",
        "2",
        "--sides",
        sides,
        "--old-python",
        str(OLD_PYTHON),
        "--json",
        str(out),
        *extra,
    )
    assert "Targets (issues 10 and 21)" in printed
    return dict(json.loads(out.read_text()))


@WAITING
def test_scale_quick_runs_ours_on_both_backends(tmp_path: Path) -> None:
    # Started 3 at a time, as a worker that starts its steps as they come: every one starts.
    document = scale_quick(tmp_path, "ours-asyncio,ours-trio", "--start-batch", "3")
    runs = {run["side_name"]: run for run in document["runs"]}
    assert set(runs) == {"ours-asyncio", "ours-trio"}
    for result in runs.values():
        assert result["followers"] == 10
        assert result["start_batch"] == 3
        assert result["started"] == 10, result
        assert result["reads"] > 0
        assert result["pages"] > 0
        assert result["failures"] == 0, result["failure_samples"]
        assert result["agent_refused"] == 0
    ids = {target["id"] for target in document["targets"]}
    assert "scale.cpu_ratio_1000_asyncio" in ids
    assert "scale.lag_p99_5000_trio" in ids
    assert "scale.rss_5000_asyncio" in ids
    assert "scale.cpu_5000_over_1000_trio" in ids


@WAITING
def test_scale_runs_more_rounds_of_ours_at_the_largest_n(tmp_path: Path) -> None:
    document = scale_quick(tmp_path, "ours-asyncio", "--spread-rounds", "2")
    assert [run["side_name"] for run in document["runs"]] == ["ours-asyncio", "ours-asyncio"]
    (row,) = document["summary"]
    assert row["rounds"] == 2
    low, high = row["spread"]["cpu_per_read_us"]
    assert low <= row["cpu_per_read_us"] <= high
    assert document["config"]["spread_rounds"] == 2


def scale_targets(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("scale", BENCHMARKS / "scale.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCHMARKS))  # its own helpers, _measure and _profile
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return {target["id"]: target for target in module.targets(rows)}


def scale_row(n: int, *rounds: dict[str, float]) -> dict[str, Any]:
    """scale.py's summary of ours on asyncio at N: each figure's median and spread."""
    keys = rounds[0].keys()
    row: dict[str, Any] = {"followers": n, "side": "ours-asyncio", "rounds": len(rounds)}
    row.update({key: statistics.median(r[key] for r in rounds) for key in keys})
    row["spread"] = {
        key: [min(r[key] for r in rounds), max(r[key] for r in rounds)] for key in keys
    }
    row.update(started=n, ratio_to_old=None)
    return row


def test_a_target_at_5000_holds_only_if_every_round_meets_it() -> None:
    figures = ("lag_p99_ms", "loop_blocked_startup_ms", "rss_per_follower_kib", "cpu_per_read_us")
    good = dict(zip(figures, (200.0, 40.0, 18.0, 110.0), strict=True))
    bad = dict(zip(figures, (300.0, 60.0, 22.0, 130.0), strict=True))  # one round over each
    at_1000 = scale_row(1000, dict(zip(figures, (20.0, 10.0, 19.0, 100.0), strict=True)))
    found = scale_targets([at_1000, scale_row(5000, good, good, bad)])
    for id_ in ("lag_p99_5000", "startup_block_5000", "rss_5000", "cpu_5000_over_1000"):
        target = found[f"scale.{id_}_asyncio"]
        assert target["met"] is False, target  # the medians are within bounds: not enough
        assert "over 3 rounds" in target["shown"], target
    found = scale_targets([at_1000, scale_row(5000, good, good, good)])
    assert all(found[f"scale.{id_}_asyncio"]["met"] for id_ in ("lag_p99_5000", "rss_5000"))
    assert found["scale.cpu_5000_over_1000_asyncio"]["measured"] == pytest.approx(1.1)


@WAITING
@HAS_OLD
def test_scale_quick_runs_the_old_follower_beside_ours(tmp_path: Path) -> None:
    document = scale_quick(tmp_path, "old,ours-asyncio")
    old = next(run for run in document["runs"] if run["side_name"] == "old")
    assert old["started"] == 10, old
    assert old["pages"] > 0
    ours = next(row for row in document["summary"] if row["side"] == "ours-asyncio")
    assert ours["ratio_to_old"]["cpu_per_read_us"] is not None


def test_summary_names_every_target_measured_or_not(tmp_path: Path) -> None:
    scale = {
        "targets": [
            {
                "id": "scale.rss_1000_asyncio",
                "what": "RSS",
                "bound": "<= 30 KiB",
                "shown": "20 KiB",
                "met": True,
            }
        ],
        "loaded_runs": ["ours-trio N=5000: 40% of a core"],
    }
    (tmp_path / "scale.json").write_text(json.dumps(scale))
    printed = run("summary.py", "--results", str(tmp_path), "--markdown")
    assert "| RSS | <= 30 KiB | 20 KiB | yes |" in printed
    assert "a loaded machine (other processes took CPU) in ours-trio N=5000" in printed
    assert "small events/s into MemoryStore" in printed  # no throughput.json: not measured
    assert "1 met, 0 missed, 18 not measured" in printed


@WAITING
def test_many_followers_runs_one_shape() -> None:
    printed = run(
        "many_followers.py",
        "--followers",
        "5",
        "--seconds",
        "2",
        "--shapes",
        "pool",
        "--agent-process",
        "--startup-timeout",
        "10",
    )
    assert "library default" in printed


def test_read_path_quick_measures_every_way_on_both_backends(tmp_path: Path) -> None:
    out = tmp_path / "read_path.json"
    printed = run("read_path.py", "--quick", "--json", str(out))
    results = json.loads(out.read_text())["results"]
    assert {(r["backend"], r["way"]) for r in results} == {
        (backend, way) for backend in ("asyncio", "trio") for way in READ_PATH_WAYS
    }
    assert all(r["cpu_us_per_read"] > 0 for r in results)
    assert "read_page + ours" in printed


@WAITING
def test_waits_quick_measures_every_way_on_both_backends(tmp_path: Path) -> None:
    out = tmp_path / "waits.json"
    printed = run("waits.py", "--quick", "--json", str(out))
    results = json.loads(out.read_text())["results"]
    ways = ("timekeeper", "scope", "sleep")
    assert {(r["backend"], r["way"]) for r in results} == {
        (backend, way) for backend in ("asyncio", "trio") for way in ways
    }
    assert all(r["cpu_us_per_wait"] > 0 for r in results)
    assert "vs scope" in printed


@WAITING
def test_collector_floor_quick_measures_every_shape_beneath_the_turn(tmp_path: Path) -> None:
    out = tmp_path / "collector_floor.json"
    printed = run("collector_floor.py", "--quick", "--json", str(out))
    rows = json.loads(out.read_text())["results"]
    shapes = ("step", "promise", "turn")
    assert {(r["backend"], r["shape"]) for r in rows} == {
        (backend, shape) for backend in ("asyncio", "trio") for shape in shapes
    }
    assert "promise" in printed
    for backend in ("asyncio", "trio"):
        kept = {r["shape"]: r["tracked_per_step"] for r in rows if r["backend"] == backend}
        # Each shape holds the one before it: the promise's is a step with a task group and
        # the follower's task, and the library's turn runs them. A floor that kept no more
        # than a step, or more than a turn, would not be the floor it is printed as.
        assert 0 < kept["step"] < kept["promise"] < kept["turn"], kept
        assert all(r["full_pass_ms"] > 0 for r in rows)


def test_summary_shows_the_floor_beside_the_targets(tmp_path: Path) -> None:
    row = {"followers": 5000, "full_pass_ms": 150.0, "startup_block_ms": 900.0}
    floor = {
        "results": [
            {**row, "shape": "promise", "backend": "trio", "rss_per_step_kib": 16.25},
            {**row, "shape": "turn", "backend": "trio", "rss_per_step_kib": 26.0},
            {**row, "followers": 1000, "shape": "step", "backend": "trio", "rss_per_step_kib": 4},
        ]
    }
    (tmp_path / "collector_floor.json").write_text(json.dumps({**floor, "start_batch": 40}))
    printed = run("summary.py", "--results", str(tmp_path))
    assert "The floor under the targets at N=5,000, started 40 a turn of the loop" in printed
    assert "promise on trio: full pass 150 ms, start-up block 900 ms, RSS 16.2 KiB" in printed
    assert "turn on trio" not in printed  # the library's own is the table's, not the floor's
    assert "step on trio" not in printed  # another N


def throughput_quick(tmp_path: Path, *old: str) -> dict[str, Any]:
    out = tmp_path / "throughput.json"
    printed = run("throughput.py", "--quick", "--json", str(out), "--tmp", str(tmp_path), *old)
    figures = dict(json.loads(out.read_text()))
    assert figures["events"] == 20_000
    assert [row["store"] for row in figures["rows"]] == ["memory", "filesystem"]
    for row in figures["rows"]:
        assert row["all_stored"], row["end"]
        assert row["events_per_second"] > 0
        assert row["chunk_bytes"] > 0
        assert row["store"] in printed
    ids = [target["id"] for target in figures["targets"]]
    assert ids == ["throughput.memory_events_per_second", "throughput.filesystem_events_per_second"]
    return figures


def test_throughput_quick_without_the_old_follower_says_so(tmp_path: Path) -> None:
    figures = throughput_quick(tmp_path, "--old-python", str(tmp_path / "no-such-python"))
    assert figures["old_rows"] == []
    assert figures["ratio_to_old"] == []
    assert "no-such-python" in figures["old_not_run"]


@HAS_OLD
def test_throughput_quick_drains_the_old_follower_beside_ours(tmp_path: Path) -> None:
    figures = throughput_quick(tmp_path, "--old-python", str(OLD_PYTHON))
    assert [row["store"] for row in figures["old_rows"]] == ["memory", "filesystem"]
    for row in figures["old_rows"]:
        assert row["all_stored"], row["end"]  # the same trajectory, every event stored
    assert [ratio["store"] for ratio in figures["ratio_to_old"]] == ["memory", "filesystem"]
    assert all(ratio["events_per_second"] > 0 for ratio in figures["ratio_to_old"])
    assert all("x old" in target["shown"] for target in figures["targets"])


@WAITING
def test_teardown_runs_every_cell_once_beside_the_old_follower(tmp_path: Path) -> None:
    out = tmp_path / "teardown.json"
    old = ["--old-python", str(OLD_PYTHON), "--old-repeats", "1", "--old-cap", "0.3"]
    run("teardown.py", "--repeats", "1", "--backend", "asyncio", "--json", str(out), *old)
    report = json.loads(out.read_text())
    assert len(report["cells"]) == 12
    assert report["ok"], [cell["problems"] for cell in report["cells"]]
    ids = [target["id"] for target in report["targets"]]
    assert ids == ["teardown.cancelled", "teardown.raises", "teardown.returns_dead_agent"]
    if OLD_PYTHON.exists():
        assert len(report["old"]["cells"]) == 12
        assert len(report["ratio_to_old"]) == 12
        # A body that returns: the old follower drains for 60 s, so every run meets the cap.
        returns = [c for c in report["old"]["cells"] if c["outcome"] == "returns"]
        assert all(cell["capped"] == 1 for cell in returns)
    else:
        assert "old" in report["not_run"]


def test_idle_poll_lists_only_what_is_new_with_start_after(tmp_path: Path) -> None:
    out = tmp_path / "idle.json"
    run(
        "idle_poll.py", "--chunks", "50", "--polls", "3", "--json", str(out), "--tmp", str(tmp_path)
    )
    rows = json.loads(out.read_text())["rows"]
    assert [(row["store"], row["chunks"]) for row in rows] == [("memory", 50), ("filesystem", 50)]
    for row in rows:
        # The whole folder at every poll without start_after; only the marks with it.
        assert row["whole_keys"] == 51
        assert row["start_after_keys"] == 1
    # And with the folder's version, nothing at all where the store offers one.
    assert [row["version_keys"] for row in rows] == [1, 0]


@WAITING
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_streams_quick_measures_both_ways_on_each_backend(tmp_path: Path, backend: str) -> None:
    out = tmp_path / "streams.json"
    run("streams.py", "--quick", "--backend", backend, "--json", str(out))
    report = json.loads(out.read_text())
    assert [row["via"] for row in report["latency"]] == ["stream", "cursor"]
    assert all(row["events"] > 0 for row in report["latency"])
    assert [(row["via"], row["followers"]) for row in report["idle"]] == [
        ("stream", 100),
        ("cursor", 100),
    ]
    (busy,) = report["events"]
    assert busy["events"] > 0
    (teardown,) = report["teardown"]
    assert teardown["reconnects_after_stop"] == 0


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the machine's CPU is read from /proc")
def test_a_process_not_waited_for_counts_as_another_processs_cpu() -> None:
    """scale.py's loaded-machine check: a process's CPU is ours once waited for, not before."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from _measure import OthersClock
    finally:
        sys.path.remove(str(BENCHMARKS))
    clock = OthersClock()
    clock.start()
    spin = "import time\nwhile time.process_time() < 0.4: pass"
    child = subprocess.Popen([sys.executable, "-c", spin])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    before_reaping = clock.others_seconds()
    child.wait()
    after_reaping = clock.others_seconds()
    assert before_reaping is not None
    assert after_reaping is not None
    assert before_reaping >= 0.3  # its CPU, which this process cannot yet call its own
    assert before_reaping - after_reaping >= 0.3  # reaped: its CPU is its parent's now


def test_a_figure_a_run_could_not_measure_is_a_target_not_measured() -> None:
    figures = ("lag_p99_ms", "loop_blocked_startup_ms", "rss_per_follower_kib", "cpu_per_read_us")
    at_1000 = scale_row(1000, dict(zip(figures, (20.0, 10.0, 19.0, 100.0), strict=True)))
    at_5000 = scale_row(5000, dict(zip(figures, (200.0, 40.0, 18.0, 110.0), strict=True)))
    at_5000.update(dict.fromkeys(figures))  # no read counted, no page stored: no figure
    found = scale_targets([at_1000, at_5000])
    for id_ in ("lag_p99_5000", "startup_block_5000", "rss_5000", "cpu_5000_over_1000"):
        assert found[f"scale.{id_}_asyncio"]["shown"] == "not measured"
        assert found[f"scale.{id_}_asyncio"]["met"] is None
