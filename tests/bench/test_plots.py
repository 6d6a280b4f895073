"""``benchmarks/plots.py`` draws a run's figures, from a results folder written here by hand.

No benchmark runs: the JSON is shaped as scale.py, streams.py and read_path.py write it, two
rounds a cell, so the script is run as ``make bench`` runs it (a subprocess) in seconds, on
every Python of the suite. What is checked is what the images say (the series, and the run's
date, machine and command under each), that the same JSON draws the same bytes, and how a
missing or malformed file is told.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent.parent
PLOTS = ROOT / "benchmarks" / "plots.py"
SIDES = ("old", "ours-asyncio", "ours-trio")
SCALE_IMAGES = (
    "scale-cpu-per-read.svg",
    "scale-poll-lag-p99.svg",
    "scale-rss-per-follower.svg",
    "scale-startup-block.svg",
)
STREAMS_IMAGES = ("streams-latency.svg", "streams-idle-cpu.svg")
READ_PATH_IMAGES = ("read-path.svg",)
MACHINE = "Example CPU 7 (test), 2 cores, Linux 6.1.0 x86_64"


def about(script: str, date: str) -> dict[str, Any]:
    """A run's "about", as ``_measure.run_about`` writes it; each script's command its own."""
    return {
        "date": date,
        "machine": MACHINE,
        "cpu_model": "Example CPU 7 (test)",
        "cores": 2,
        "os": "Linux 6.1.0 x86_64",
        "python": "CPython 3.11.7",
        "command": f"python benchmarks/{script} --json benchmarks/results/x.json",
        "argv": [f"/src/benchmarks/{script}", "--json", "/src/benchmarks/results/x.json"],
    }


def scale_run(n: int, side: str, round_: int) -> dict[str, Any]:
    """One run of scale.py's child, the figures plots.py reads; the rounds differ."""
    base = {"old": 1200.0, "ours-asyncio": 300.0, "ours-trio": 320.0}[side]
    spread = 1.0 + 0.1 * round_
    return {
        "followers": n,
        "side_name": side,
        "started": n,
        "cpu_per_read_us": base * spread,
        "lag_p50_ms": base / 40 * spread,
        "lag_p99_ms": base / 5 * spread * n / 100,
        "rss_per_follower_kib": (870.0 if side == "old" else 22.0) * spread,
        "loop_blocked_startup_ms": base * n / 1000 * spread,
        "loop_blocked_window_ms": 100.0 * spread,
    }


def write_results(folder: Path, *, streams: bool = True) -> None:
    """scale.json (two rounds a cell), read_path.json and, unless told, streams.json."""
    folder.mkdir(parents=True, exist_ok=True)
    scale = {
        "benchmark": "scale",
        "date": "2026-11-30 09:15:00 +0000",
        "machine": {"python": "3.11.7", "cpus": 2, "cpu_model": "Example CPU 7 (test)"},
        "about": about("scale.py", "2026-11-30T09:15:00+00:00"),
        "config": {"followers": [100, 1000], "sides": list(SIDES), "rounds": 2},
        "runs": [
            scale_run(n, side, round_) for n in (100, 1000) for round_ in (0, 1) for side in SIDES
        ],
    }
    (folder / "scale.json").write_text(json.dumps(scale, indent=1))
    read_path = {
        "benchmark": "read_path",
        "rounds": 2,
        "page_bytes": 179,
        "about": about("read_path.py", "2026-11-30T09:40:00+00:00"),
        "results": [
            {
                "backend": backend,
                "way": way,
                "cpu_us_per_read": cpu,
                "cpu_us_per_read_min": cpu * 0.95,
                "rounds": [cpu * 0.95, cpu * 1.05],
            }
            for backend in ("asyncio", "trio")
            for way, cpu in (
                ("raw", 56.0),
                ("h11", 120.0),
                ("httpx default", 540.0),
                ("read_page + ours", 165.0),
            )
        ],
    }
    (folder / "read_path.json").write_text(json.dumps(read_path, indent=2))
    if streams:
        report = {
            "backend": "asyncio",
            "about": about("streams.py", "2026-11-30T10:05:00+00:00"),
            "latency": [
                {"via": "stream", "turns": 20, "events": 2000, "p50_ms": 0.84, "p99_ms": 1.85},
                {"via": "cursor", "turns": 20, "events": 2000, "p50_ms": 409.0, "p99_ms": 909.0},
            ],
            "idle": [
                {"via": via, "followers": n, "cpu_us_per_follower_second": cpu}
                for n in (100, 1000)
                for via, cpu in (("stream", 0.5), ("cursor", 250.0))
            ],
        }
        (folder / "streams.json").write_text(json.dumps(report, indent=2))


def plots(results: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PLOTS), "--results", str(results), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_each_image_shows_its_series_and_its_run_beneath(tmp_path: Path) -> None:
    write_results(tmp_path / "results")
    done = plots(tmp_path / "results", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    drawn = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert drawn == sorted(SCALE_IMAGES + STREAMS_IMAGES + READ_PATH_IMAGES)
    runs = {
        SCALE_IMAGES: ("scale.py", "2026-11-30T09:15:00+00:00"),
        STREAMS_IMAGES: ("streams.py", "2026-11-30T10:05:00+00:00"),
        READ_PATH_IMAGES: ("read_path.py", "2026-11-30T09:40:00+00:00"),
    }
    for names, (script, date) in runs.items():
        for name in names:
            svg = (tmp_path / "out" / name).read_text()
            assert date in svg, name
            assert MACHINE in svg, name
            assert f"python benchmarks/{script} --json benchmarks/results/x.json" in svg, name
            # The markdown to paste names the image where docs/benchmarks.md finds it.
            assert f"(images/benchmarks/{name})" in done.stdout
    for name in SCALE_IMAGES:
        svg = (tmp_path / "out" / name).read_text()
        for side in SIDES:
            assert f">{side}</text>" in svg, (name, side)
        assert "median of 2 rounds a cell; bars: least to most" in svg, name
    for name in STREAMS_IMAGES:
        svg = (tmp_path / "out" / name).read_text()
        assert ">stream</text>" in svg
        assert ">cursor</text>" in svg
    read_path = (tmp_path / "out" / "read-path.svg").read_text()
    for label in (">asyncio</text>", ">trio</text>", "raw (the floor)", "read_page + ours"):
        assert label in read_path


def test_the_same_json_draws_the_same_bytes(tmp_path: Path) -> None:
    write_results(tmp_path / "results")
    for out in ("first", "second"):
        done = plots(tmp_path / "results", tmp_path / out)
        assert done.returncode == 0, done.stdout + done.stderr
    first = {path.name: path.read_bytes() for path in (tmp_path / "first").iterdir()}
    second = {path.name: path.read_bytes() for path in (tmp_path / "second").iterdir()}
    assert len(first) == 7
    assert first == second


def test_a_missing_json_is_named_and_not_an_error(tmp_path: Path) -> None:
    write_results(tmp_path / "results", streams=False)
    done = plots(tmp_path / "results", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"not drawn: no {tmp_path / 'results' / 'streams.json'}" in done.stdout
    drawn = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert drawn == sorted(SCALE_IMAGES + READ_PATH_IMAGES)


@pytest.mark.parametrize(
    "body",
    [
        '{"runs": [',
        '{"runs": "none"}',
        '{"runs": [{"followers": 100, "side_name": "old", "cpu_per_read_us": "fast"}]}',
    ],
    ids=["not-json", "runs-not-a-list", "figure-not-a-number"],
)
def test_a_malformed_json_fails_naming_it(tmp_path: Path, body: str) -> None:
    write_results(tmp_path / "results")
    scale = tmp_path / "results" / "scale.json"
    scale.write_text(body)
    done = plots(tmp_path / "results", tmp_path / "out")
    assert done.returncode != 0
    assert str(scale) in done.stderr
    # The others are drawn all the same.
    drawn = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert drawn == sorted(STREAMS_IMAGES + READ_PATH_IMAGES)


def run_all_module() -> ModuleType:
    """``benchmarks/run_all.py`` imported (it imports nothing but the standard library)."""
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("quick", "images"),
    [(True, "results/plots"), (False, "docs/images/benchmarks")],
    ids=["smoke-run", "full-run"],
)
def test_make_bench_draws_last_and_a_smoke_run_never_into_the_docs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick: bool, images: str
) -> None:
    run_all = run_all_module()
    commands: list[list[str]] = []

    def run(command: list[str]) -> int:  # nothing is run: what would be is noted
        commands.append(command)
        return 0

    monkeypatch.setattr(run_all, "run", run)
    monkeypatch.delenv("BENCH_QUICK", raising=False)
    results = tmp_path / "results"
    assert run_all.main(["--results", str(results), *(["--quick"] if quick else [])]) == 0
    plots = commands[-1]
    assert plots[1] == str(PLOTS)
    assert plots[plots.index("--results") + 1] == str(results)
    base = tmp_path if quick else ROOT
    assert plots[plots.index("--out") + 1] == str(base / images)


def test_make_bench_fails_when_its_plots_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_all = run_all_module()

    def run(command: list[str]) -> int:
        return 1 if command[1] == str(PLOTS) else 0

    monkeypatch.setattr(run_all, "run", run)
    assert run_all.main(["--quick", "--results", str(tmp_path)]) == 1
