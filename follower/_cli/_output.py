"""What the command line prints: events as JSON lines, log lines, and a stdout that went away.

``follow`` and ``tail`` print one shape, ``{"turn", "index", "event"}`` (the
stored event and where it is), or with ``--events-only`` the bare events.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from typing import Any

from .._redact import SCRUBBED_RECORDS, scrub


def print_json(value: Any) -> None:
    print(json.dumps(value, separators=(",", ":")), flush=True)


def event_line(turn_id: str, index: int, event: Any, *, events_only: bool) -> Any:
    """What ``follow`` and ``tail`` print for one stored event."""
    if events_only:
        return event
    return {"turn": turn_id, "index": index, "event": event}


def silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so the exit's flush fails no more.

    Python flushes stdout on the way out; to a closed pipe that flush would print
    ``Exception ignored ... BrokenPipeError`` after the command had ended quietly.
    """
    # No file descriptor to redirect (stdout replaced in-process): nothing to flush.
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def log_to_stderr(*, verbose: bool) -> None:
    """``follower: LEVEL: message`` lines on stderr; INFO and up when verbose, else WARNING.

    Every line is scrubbed (:mod:`follower._redact`), whichever logger made it:
    httpx's request lines at ``-v`` name URLs, a traceback quotes messages.
    """
    handler = _CurrentStderrHandler()
    handler.addFilter(SCRUBBED_RECORDS)
    handler.setFormatter(_OneLineFormatter(tracebacks=verbose))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])


class _CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a line is logged, not when logging was set up.

    The demo's progress bar swaps ``sys.stderr`` for a stream that prints above
    the bar; a handler holding the original would draw over it.
    """

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class _OneLineFormatter(logging.Formatter):
    """``follower: LEVEL: message``; a logged exception as one line unless verbose."""

    def __init__(self, *, tracebacks: bool) -> None:
        super().__init__("follower: %(levelname)s: %(message)s")
        self._tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        return scrub(self._format(record))

    def _format(self, record: logging.LogRecord) -> str:
        if self._tracebacks or not record.exc_info or record.exc_info[1] is None:
            return super().format(record)
        exc = record.exc_info[1]
        short = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        short.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc}"
        short.args = None
        return super().format(short)
