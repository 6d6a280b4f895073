"""An agent program the tests run in a process of its own: its output drained, its stop, its log.

The interop agent (tests/interop) and the official SDK's agent (tests/streams) are programs that
exit when their standard input closes; both fixtures stop them the same way.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

STOP_SECONDS = 5.0
LOG_TAIL_CHARS = 20_000


def drain(process: subprocess.Popen[bytes]) -> None:
    """Read the program's stdout until it closes, so no stray print blocks it on a full pipe."""
    assert process.stdout is not None
    try:
        while os.read(process.stdout.fileno(), 65536):
            pass
    except (OSError, ValueError):  # the pipe was closed under us: nothing left to drain
        return


def stop(process: subprocess.Popen[bytes]) -> None:
    """Close its stdin (it exits on EOF), then SIGTERM, then SIGKILL, each after a grace."""
    assert process.stdin is not None
    with contextlib.suppress(OSError):
        process.stdin.close()
    for signal_it in (None, process.terminate, process.kill):
        if signal_it is not None:
            signal_it()
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            continue
        return


def log_tail(path: Path) -> str:
    """The end of the program's log, or why there is none."""
    try:
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError as exc:
        return f"(no log: {exc})"
