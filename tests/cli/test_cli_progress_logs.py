"""Log lines while the demo's bars are live land above the bars, whole, on a real terminal.

Each run is a subprocess whose stdout (and stderr, unless said) is a pseudo-terminal
of a known width; what it wrote is replayed on :class:`Screen`, a small terminal that
knows the few controls rich's live display sends (and fails on any other), so the
test reads what a person would see, scrollback included.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from ..support.cli import CLI
from ..support.terminal import run_on_terminal

COLUMNS = 60
CONTROL = re.compile(r"\x1b\[(\??)([0-9;]*)([A-Za-z])")


class Screen:
    """A terminal's lines as it would show them: cursor moves, erases and autowrap.

    Rows never scroll away (the scrollback is kept); a row the terminal wrapped
    into the next is joined with it in :meth:`lines`, as a terminal's copy does.
    """

    def __init__(self, columns: int) -> None:
        self.columns = columns
        self.rows: list[list[str]] = [[]]
        self.wrapped: set[int] = set()  # rows that continue on the next one
        self.row = 0
        self.column = 0

    def feed(self, text: str) -> None:
        at = 0
        while at < len(text):
            control = CONTROL.match(text, at)
            if control is not None:
                self._control(*control.groups())
                at = control.end()
                continue
            char = text[at]
            at += 1
            if char == "\r":
                self.column = 0
            elif char == "\n":
                self._down()
            elif char == "\x1b":
                raise AssertionError(
                    f"a control this screen does not know: {text[at - 1 : at + 8]!r}"
                )
            else:
                self._put(char)

    def lines(self) -> list[str]:
        joined: list[str] = []
        continues = False
        for number, row in enumerate(self.rows):
            line = "".join(row).rstrip()
            if continues:
                joined[-1] += line
            else:
                joined.append(line)
            continues = number in self.wrapped
        while joined and not joined[-1]:
            joined.pop()
        return joined

    def _put(self, char: str) -> None:
        if self.column >= self.columns:  # a terminal wraps when the next character comes
            self.wrapped.add(self.row)
            self._down()
            self.column = 0
        row = self.rows[self.row]
        row.extend(" " * (self.column + 1 - len(row)))
        row[self.column] = char
        self.column += 1

    def _down(self) -> None:
        self.row += 1
        if self.row == len(self.rows):
            self.rows.append([])

    def _control(self, private: str, numbers: str, command: str) -> None:
        count = int(numbers) if numbers.isdigit() else 0
        if command == "m" or (private and command in "hl"):  # colours, the cursor shown
            return
        if command == "A":
            self.row = max(0, self.row - max(count, 1))
        elif command == "K":
            row = self.rows[self.row]
            if count == 2:
                row.clear()
            elif count == 0:
                del row[self.column :]
            else:
                raise AssertionError(f"erase mode {count}")
            self.wrapped.discard(self.row)
        else:
            raise AssertionError(f"a control this screen does not know: {numbers}{command}")


def run_on_screen(
    args: list[str], cwd: Path, *, stderr_on_terminal: bool = True
) -> tuple[int, Screen, str]:
    """Run ``args``, stdout on a COLUMNS-wide terminal: its exit, its screen, stderr if piped."""
    returncode, shown, stderr = run_on_terminal(
        args, cwd, columns=COLUMNS, stderr_on_terminal=stderr_on_terminal
    )
    screen = Screen(COLUMNS)
    screen.feed(shown.decode())
    return returncode, screen, stderr


# The progress piece with the command line's own logging: bars drawn, a warning
# longer than the terminal is wide logged while they are live, the bars drawn on.
WARNING = (
    "the agent answered 503 Service Unavailable for task 7f3a; retrying in 5 s "
    "(3 failures in a row)"
)
PIECE = textwrap.dedent(
    f"""
    import logging, sys
    from follower._cli._output import log_to_stderr
    from follower._cli._progress import TurnDisplay

    log_to_stderr(verbose=False)
    with TurnDisplay(20, sys.stdout) as display:
        display.update("turn-1", 5)
        display.update("turn-2", 3)
        logging.getLogger("follower").warning({WARNING!r})
        display.update("turn-1", 12)
        display.finish("turn-1", 20, "completed")
        display.finish("turn-2", 20, "completed")
    print("after the bars")
    """
)
BAR = re.compile(r"^  (turn-\d) .* (\d+) events (\w+)$")


def test_a_warning_during_the_bars_prints_above_them_whole(tmp_path: Path) -> None:
    returncode, screen, _ = run_on_screen([sys.executable, "-c", PIECE], tmp_path)
    lines = screen.lines()
    assert returncode == 0, lines
    warning = f"follower: WARNING: {WARNING}"
    # On its own line, not cut by a newline at the terminal's width, nothing drawn into it.
    assert warning in lines, lines
    below = lines[lines.index(warning) + 1 :]
    bars = [BAR.match(line) for line in below[:2]]
    assert all(bars), lines
    assert [(bar[1], bar[2], bar[3]) for bar in bars if bar] == [
        ("turn-1", "20", "completed"),
        ("turn-2", "20", "completed"),
    ]
    assert below[2:] == ["after the bars"], lines
    # Every bar fits the terminal: none was wrapped into the next row.
    assert all(len(line) <= COLUMNS for line in lines if BAR.match(line)), lines


def test_a_warning_goes_to_stderr_when_stderr_is_no_terminal(tmp_path: Path) -> None:
    # `follower demo 2>warnings.log` on a terminal: the bars there, the warnings in the file.
    returncode, screen, stderr = run_on_screen(
        [sys.executable, "-c", PIECE], tmp_path, stderr_on_terminal=False
    )
    assert returncode == 0, stderr
    assert stderr == f"follower: WARNING: {WARNING}\n"
    assert not any("WARNING" in line for line in screen.lines()), screen.lines()


def test_the_demos_errors_print_above_its_bars(tmp_path: Path) -> None:
    # not-json: each turn's follower logs an ERROR (the page is malformed) while the bars run.
    args = ["demo", "--store", "store", "--turns", "2", "--events", "10", "--interval", "0.01"]
    returncode, screen, _ = run_on_screen([*CLI, *args, "--fault", "not-json"], tmp_path)
    lines = screen.lines()
    assert returncode == 0, lines
    errors = [n for n, line in enumerate(lines) if line.startswith("follower: ERROR: ")]
    assert len(errors) == 2, lines
    for n in errors:
        # Whole (longer than the terminal, yet one line) and nothing of a bar drawn into it.
        assert re.fullmatch(
            r"follower: ERROR: turn turn-\d: following task .+ is not JSON: .+", lines[n]
        )
        assert len(lines[n]) > COLUMNS
        assert "━" not in lines[n], lines[n]
    # The bars go on below the last one: each turn's final bar, then the summary.
    finals = [BAR.match(line) for line in lines[errors[-1] + 1 : errors[-1] + 3]]
    assert all(finals), lines
    assert any(line.startswith("step ") for line in lines[errors[-1] :]), lines
