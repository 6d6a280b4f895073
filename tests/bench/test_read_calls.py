"""``benchmarks/read_calls.py`` runs, so it cannot rot: its smoke run, on loopback.

As the other benchmarks' smoke runs (``test_benchmarks.py``), on the one Python
``make bench`` uses. The calls a read makes belong to the code and the versions
installed, so no count is asserted: that the script counts reads and calls on each
backend, and names where they go.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11),
    reason="the benchmarks' smoke runs take seconds each: one Python (3.11) is enough",
)


def test_read_calls_quick_counts_the_calls_of_reads_on_both_backends(tmp_path: Path) -> None:
    out = tmp_path / "read_calls.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "read_calls.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert [row["backend"] for row in results] == ["asyncio", "trio"]
    for row in results:
        assert row["reads"] > 0
        assert row["calls_per_read"] == row["calls"] / row["reads"]
        assert row["most_called"]
        assert row["most_called"][0]["calls_per_read"] > 1
    assert "calls a read" in done.stdout
