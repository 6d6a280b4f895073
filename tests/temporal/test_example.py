"""The Temporal example runs as documented, in a process of its own (the SDK may crash at exit)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..support.stored import read_linked_turns
from .conftest import temporal_cli_path

EXAMPLE = Path(__file__).parents[2] / "examples" / "temporal_step.py"


def test_the_example_runs_a_two_turn_step_and_stores_both_turns(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path), temporal_cli_path()],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "turn-1: completed, 5 events stored" in done.stdout, done.stderr
    assert "turn-2: completed, 5 events stored" in done.stdout
    turns = read_linked_turns(tmp_path / "steps" / "example", "turn-1")
    assert [t.turn_id for t in turns] == ["turn-1", "turn-2"]
    assert all(len(t.events) == 5 and t.end is not None and t.end["complete"] for t in turns)
