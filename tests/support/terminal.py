"""A command run with its stdout on a pseudo-terminal of a known size, as a person runs it."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

# Without rich's overrides of what a terminal is (TTY_COMPATIBLE=0 would turn the bars off).
TERMINAL_ENVIRONMENT = {
    name: value
    for name, value in os.environ.items()
    if name not in {"FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS"}
}


def run_on_terminal(
    args: list[str],
    cwd: Path,
    *,
    columns: int,
    lines: int = 24,
    stderr_on_terminal: bool = True,
) -> tuple[int, bytes, str]:
    """Run ``args`` (stdin closed): its exit code, what the terminal was sent, stderr if piped."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    environment = {
        **TERMINAL_ENVIRONMENT,
        "COLUMNS": str(columns),
        "LINES": str(lines),
        "TERM": "xterm",
    }
    with subprocess.Popen(
        args,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal if stderr_on_terminal else subprocess.PIPE,
        env=environment,
    ) as process:
        os.close(terminal)
        shown = bytearray()
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other end closed: the program has ended
                break
            if not chunk:
                break
            shown.extend(chunk)
        stderr = process.stderr.read().decode() if process.stderr is not None else ""
        returncode = process.wait(timeout=60)
    os.close(controller)
    return returncode, bytes(shown), stderr
