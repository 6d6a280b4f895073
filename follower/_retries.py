"""When to try again after a failure, and how a run of failures is logged.

One policy for every retried call to an agent (a follower's reads, the A2A
``tasks/get`` polls): a jittered backoff that honours ``Retry-After`` within a
cap, and logs that never grow with the failures: one warning as a run of them
starts, one summary as it ends, a debug line for each in between. What is logged
of a failure names its status or its httpx class, never a header or a body.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    import logging
    from collections.abc import Mapping

BACKOFF_STEP_SECONDS = 5.0
BACKOFF_CAP_SECONDS = 60.0

# One source for every caller of the process: their draws differ, so followers
# that failed together do not retry together. Tests seed or pin it.
_jitter = random.Random()


def backoff_fraction() -> float:
    """A uniform draw in [0, 1): where in its range one backoff falls."""
    return _jitter.random()


def retry_delay(
    poll_interval_seconds: float,
    failures: int,
    fraction: float = 1.0,
    retry_after_seconds: float | None = None,
) -> float:
    """How long to wait before the try after ``failures`` failures in a row.

    Full jitter over the backoff's growth: ``fraction`` (a draw in [0, 1]) places
    the wait between its floor, the poll interval (or the agent's
    ``Retry-After``, if longer), and its ceiling, the floor + 5 s x failures;
    both are capped at 60 s. A fraction of 1 is the ceiling, the backoff
    without jitter.
    """
    floor = min(max(poll_interval_seconds, retry_after_seconds or 0.0), BACKOFF_CAP_SECONDS)
    ceiling = min(floor + BACKOFF_STEP_SECONDS * failures, BACKOFF_CAP_SECONDS)
    return floor + fraction * (ceiling - floor)


def failure_reason(exc: BaseException) -> str:
    """A failure in a few words, safe to log: no header, no body.

    A status error's message quotes the first line of the agent's error body,
    so it is named by its status; a transport error by its httpx class.
    """
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return f"HTTP {status}"
    cause = exc.__cause__
    if cause is not None and type(cause).__module__.startswith("httpx"):
        return type(cause).__name__
    return type(exc).__name__


class FailureStreak:
    """A run of failures in a row: one warning as it starts, one summary as it ends.

    ``what`` names the calls in the log lines ("reads of task t1 at URL");
    ``noun`` one of them ("read", "call"). Every failure in between is a debug
    line, so an agent that fails for an hour costs two warnings, not one a call.
    """

    def __init__(
        self, logger: logging.Logger, what: str, *, noun: str, extra: Mapping[str, object]
    ) -> None:
        self._logger = logger
        self._what = what
        self._noun = noun
        self._extra = extra
        self.in_a_row = 0
        self._started_at = 0.0
        self._warned = False
        self._last_reason = ""

    def failed(self, exc: BaseException) -> None:
        """Count a failure (before stop or after: the summary counts both)."""
        if self.in_a_row == 0:
            self._started_at = anyio.current_time()
        self.in_a_row += 1
        self._last_reason = failure_reason(exc)

    def retrying(self, delay: float) -> None:
        """Log the failure just counted, retried after ``delay``: a warning only for the first."""
        if not self._warned:
            self._warned = True
            self._logger.warning(
                "%s are failing (%s); retrying with backoff, a summary follows when they "
                "recover or stop",
                self._what,
                self._last_reason,
                extra=self._extra,
            )
        else:
            self._logger.debug(
                "%s: %s %d in a row failed (%s); retrying in %.1f s",
                self._what,
                self._noun,
                self.in_a_row,
                self._last_reason,
                delay,
                extra=self._extra,
            )

    def recovered(self) -> None:
        """A call succeeded: the run of failures before it gets its summary."""
        if self.in_a_row:
            self._summary("recovered")
        self.in_a_row, self._warned = 0, False

    def close(self, ending: str) -> None:
        """The calls end: the run that was warned of gets its summary."""
        if self.in_a_row and self._warned:
            self._summary(f"stopped ({ending})")
        self.in_a_row, self._warned = 0, False

    def _summary(self, how: str) -> None:
        seconds = anyio.current_time() - self._started_at
        self._logger.warning(
            "%s %s after %d failed %ss in %.1f s (last: %s)",
            self._what,
            how,
            self.in_a_row,
            self._noun,
            seconds,
            self._last_reason,
            extra={
                **self._extra,
                f"failed_{self._noun}s": self.in_a_row,
                "failing_seconds": seconds,
            },
        )
