"""The benchmarks run, so they cannot rot: each script once, in its smoke mode, on loopback.

Figures are never asserted (they belong to the machine); what is checked is that each
script runs to the end and writes the figures it promises. They spawn processes and
take seconds, so they run on one Python only (3.11, the one ``make bench`` uses), not
on every Python of the suite. The old follower's side needs its own venv
(``tools/old-follower-venv``) and is skipped where it has not been made.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
OLD_PYTHON = ROOT / ".venvs" / "old-follower" / "bin" / "python"

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11),
    reason="the benchmarks' smoke runs take seconds each: one Python (3.11) is enough",
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


def scale_quick(tmp_path: Path, sides: str) -> dict[str, Any]:
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
    )
    assert "Targets (issue 10)" in printed
    return dict(json.loads(out.read_text()))


def test_scale_quick_runs_ours_on_both_backends(tmp_path: Path) -> None:
    document = scale_quick(tmp_path, "ours-asyncio,ours-trio")
    runs = {run["side_name"]: run for run in document["runs"]}
    assert set(runs) == {"ours-asyncio", "ours-trio"}
    for result in runs.values():
        assert result["followers"] == 10
        assert result["started"] == 10, result
        assert result["reads"] > 0
        assert result["pages"] > 0
        assert result["failures"] == 0, result["failure_samples"]
        assert result["agent_refused"] == 0
    ids = {target["id"] for target in document["targets"]}
    assert "scale.cpu_ratio_1000_asyncio" in ids
    assert "scale.lag_p99_5000_trio" in ids


@pytest.mark.skipif(not OLD_PYTHON.exists(), reason="no venv from tools/old-follower-venv")
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
        ]
    }
    (tmp_path / "scale.json").write_text(json.dumps(scale))
    printed = run("summary.py", "--results", str(tmp_path), "--markdown")
    assert "| RSS | <= 30 KiB | 20 KiB | yes |" in printed
    assert "small events/s into MemoryStore" in printed  # no throughput.json: not measured
    assert "1 met, 0 missed, 13 not measured" in printed


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
