"""The demo's progress: a bar per turn on a terminal, redrawn in place; lines elsewhere.

On a terminal the bars are rich's: they fit its width (a line wider than the
terminal would wrap on every redraw and fill the screen), and what is written
to stdout or stderr meanwhile (the log's warnings) is printed above them, not
over them, each line whole: the terminal wraps a long one, rich does not cut it.
A stderr that is no terminal (``2>file``) keeps its lines. Elsewhere (a pipe, a
file) each turn prints a line every 10 events and one when it ends, as plain
text. rich comes with the ``testing`` extra, which the demo needs anyway; it is
imported only for a terminal.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, final

import attrs

if TYPE_CHECKING:
    from types import TracebackType
    from typing import TextIO

# The plain line's bar, in characters; rich sizes its own.
PLAIN_BAR_WIDTH = 24


def _at_least_one(events_per_turn: int) -> int:
    return max(events_per_turn, 1)


@final
@attrs.define(eq=False, on_setattr=attrs.setters.NO_OP)
class TurnDisplay:
    """Each turn's progress, shown while the display is entered (``with display:``)."""

    _total: int = attrs.field(alias="events_per_turn", converter=_at_least_one)
    _out: TextIO
    _shown: dict[str, int] = attrs.field(init=False, factory=dict)
    _finished: set[str] = attrs.field(init=False, factory=set)
    _bars: Any = attrs.field(init=False, default=None)  # rich.progress.Progress, on a terminal
    _bar_of: dict[str, Any] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if self._out.isatty():
            self._bars = _rich_bars(self._out)

    def __enter__(self) -> TurnDisplay:
        if self._bars is not None:
            self._bars.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._bars is not None:
            self._bars.stop()

    def update(self, turn_id: str, count: int) -> None:
        if turn_id in self._finished:
            return
        previous = self._shown.get(turn_id, 0)
        self._shown[turn_id] = count
        if self._bars is not None:
            self._draw_bar(turn_id, count, "reading")
        elif count // 10 > previous // 10:
            self._write_line(turn_id, count, "reading")

    def finish(self, turn_id: str, count: int, state: str) -> None:
        self._finished.add(turn_id)
        if self._bars is not None:
            self._draw_bar(turn_id, count, state)
        else:
            self._write_line(turn_id, count, state)

    def _draw_bar(self, turn_id: str, count: int, state: str) -> None:
        bar = self._bar_of.get(turn_id)
        if bar is None:
            bar = self._bar_of[turn_id] = self._bars.add_task(
                turn_id, total=self._total, state=state, count=count
            )
        self._bars.update(bar, completed=min(count, self._total), state=state, count=count)

    def _write_line(self, turn_id: str, count: int, state: str) -> None:
        filled = min(PLAIN_BAR_WIDTH, PLAIN_BAR_WIDTH * count // self._total)
        bar = "#" * filled + "-" * (PLAIN_BAR_WIDTH - filled)
        self._out.write(f"  {turn_id:<8} [{bar}] {count:>5} events  {state:<10}\n")
        self._out.flush()


def _rich_bars(out: TextIO) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn

    return Progress(
        TextColumn("  {task.description}"),
        BarColumn(bar_width=None),  # what the terminal's width leaves for it
        TextColumn("{task.fields[count]:>5} events"),
        TextColumn("{task.fields[state]}"),
        # Lines printed above the bars are left to the terminal to wrap: rich would
        # cut a log line at its width with newlines (the bars it crops itself).
        console=Console(file=out, soft_wrap=True),
        expand=True,
        redirect_stdout=True,
        # Only a stderr on the terminal would draw over the bars.
        redirect_stderr=sys.stderr.isatty(),
        auto_refresh=True,
    )
