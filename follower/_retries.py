"""When to try again after a failure, and how a run of failures is logged.

One policy for every retried call, to an agent (a follower's reads, the A2A
``tasks/get`` polls) or to a store (a turn's puts, while the store is
unavailable): a backoff that honours ``Retry-After`` within a cap (jittered
after a failed read or put, :func:`~follower._backoff.retry_delay`; growing by
half a poll while a wait for a task polls, :class:`~follower._backoff.PollBackoff`;
their arithmetic is :mod:`follower._backoff`'s, the draws are this module's), and
logs that grow with the outages, never with the calls: a warning as a run of
failures starts, a summary as it ends, a debug line for each failure in
between, and an agent that flaps is one run (:class:`FailureStreak`). What is
logged of a failure names its status or its class, never a header or a body.
"""

from __future__ import annotations

import enum
import random
from typing import TYPE_CHECKING

import anyio

from ._backoff import BACKOFF_CAP_SECONDS, retry_delay
from ._errors import StoreUnavailableError
from ._telemetry import FAILURES_EVENT, note_on_span

if TYPE_CHECKING:
    import logging
    from collections.abc import Awaitable, Callable, Mapping

# One source for every caller of the process: their draws differ, so followers
# that failed together do not retry together. Tests seed or pin it.
_jitter = random.Random()


def backoff_fraction() -> float:
    """A uniform draw in [0, 1): where in its range one backoff falls."""
    return _jitter.random()


# A store put that finds the store unavailable (StoreUnavailableError: throttled,
# 5xx, unreachable, after the store's own retries) is tried again while the step
# runs, with the same jittered backoff from a shorter floor and step: the next try
# between 0.5 s and 0.5 s + 1 s x failures (capped at 60 s), so a burst of
# throttling costs seconds, and a cleanup write's 5 s still hold a few tries. For at
# most STORE_RETRY_SECONDS from the put's first failure; then the error is raised,
# as before. The same bytes landing twice count as done (write-once), so a retried
# put never doubles an object.
STORE_RETRY_FLOOR_SECONDS = 0.5
STORE_RETRY_STEP_SECONDS = 1.0
STORE_RETRY_SECONDS = 120.0


async def retry_while_unavailable(
    put: Callable[[], Awaitable[None]], streak: FailureStreak
) -> None:
    """Run ``put`` until it is done, retrying it while the store is unavailable, within the bound.

    ``streak`` logs the failures by the run, as an agent's are logged. Any other
    error, the last :class:`~follower.StoreUnavailableError` past
    :data:`STORE_RETRY_SECONDS`, and a cancel go out as they are.
    """
    first_failed_at: float | None = None
    try:
        while True:
            try:
                await put()
            except StoreUnavailableError as exc:
                now = anyio.current_time()
                if first_failed_at is None:
                    first_failed_at = now
                streak.failed(exc)
                delay = retry_delay(
                    STORE_RETRY_FLOOR_SECONDS,
                    streak.in_a_row,
                    backoff_fraction(),
                    step_seconds=STORE_RETRY_STEP_SECONDS,
                )
                if now + delay - first_failed_at > STORE_RETRY_SECONDS:
                    streak.close(f"given up after {STORE_RETRY_SECONDS:.0f} s")
                    raise
                streak.retrying(delay)
                await anyio.sleep(delay)
            else:
                streak.recovered()
                return
    finally:
        if streak.in_a_row:  # cancelled or failed otherwise while retrying: say so
            streak.close("the put was abandoned")


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


# A run of failures ends only once calls have answered for this long with none
# failing: a failure sooner is the same run going on. An agent that flaps (every
# other read a 503) is then one run, not one a flap, and since runs begin at least
# this long apart, the records of one caller are bounded by time whatever the rate
# of its calls. A minute, the backoff's cap: long enough for an agent that fails
# every few reads to be one run, short enough for an outage an hour later to be
# warned of on its own.
SETTLE_SECONDS = BACKOFF_CAP_SECONDS


class FailureStreak:
    """Runs of failed calls, logged by the run: at most four records each, however many fail.

    ``what`` names the calls in the log lines ("reads of task t1 at URL");
    ``noun`` one of them ("read", "call"). A run starts at a failure: one
    warning. The first call that succeeds after it is one summary
    ("recovered"). A failure before the calls have answered for
    :data:`SETTLE_SECONDS` since the run's last is the same run going on (the
    calls flap): one more warning as it fails again, then one summary when it
    settles (answered for :data:`SETTLE_SECONDS`, none failing) or the calls
    end. Every other failure is a debug line.
    ``in_a_row`` counts the failures since the last success: what backoff grows with.
    """

    # Every follower and every sink keeps one for as long as it runs: no __dict__ each.
    __slots__ = (
        "_announce",
        "_answered",
        "_answered_at",
        "_extra",
        "_failed",
        "_last_failed_at",
        "_last_reason",
        "_logger",
        "_noun",
        "_phase",
        "_started_at",
        "_warned",
        "_what",
        "in_a_row",
    )

    def __init__(
        self, logger: logging.Logger, what: str, *, noun: str, extra: Mapping[str, object]
    ) -> None:
        self._logger = logger
        self._what = what
        self._noun = noun
        self._extra = extra
        self.in_a_row = 0
        self._phase = _Phase.IDLE
        self._warned = False  # the run's start was logged: it owes a summary
        self._announce: _Phase | None = None  # what retrying() says of the failure just counted
        self._failed = 0  # in the run
        self._answered = 0  # in the run
        self._started_at = 0.0
        self._last_failed_at = 0.0
        self._answered_at = 0.0  # the first success after the run's last failure
        self._last_reason = ""

    def failed(self, exc: BaseException) -> None:
        """Count a failure (before stop or after: the summary counts both)."""
        now = anyio.current_time()
        if self._settled(now):
            self._settle()  # no call in between said so
        if self._phase is _Phase.IDLE:
            self._phase, self._announce, self._warned = _Phase.FAILING, _Phase.FAILING, False
            self._failed = self._answered = 0
            self._started_at = now
        elif self._phase is _Phase.RECOVERED:
            self._phase = self._announce = _Phase.FLAPPING
        self.in_a_row += 1
        self._failed += 1
        self._last_failed_at = now
        self._last_reason = failure_reason(exc)

    def retrying(self, delay: float) -> None:
        """Log the failure just counted, retried after ``delay``.

        A warning as a run starts, or fails again after it recovered; else a debug line.
        """
        announce, self._announce = self._announce, None
        if announce in (_Phase.FAILING, _Phase.FLAPPING):
            # On the current span too, as the log says it: once a run, never a failed call.
            note_on_span(
                FAILURES_EVENT,
                {
                    "follower.failures.phase": "failing" if announce is _Phase.FAILING else "again",
                    "follower.failures.reason": self._last_reason,
                    "follower.failures.retry_seconds": delay,
                },
            )
        if announce is _Phase.FAILING:
            self._warned = True
            self._logger.warning(
                "%s are failing (%s); retrying with backoff, a summary follows when they "
                "recover or stop",
                self._what,
                self._last_reason,
                extra=self._extra,
            )
        elif announce is _Phase.FLAPPING and self._warned:
            self._logger.warning(
                "%s are failing again (%s) before they had answered for %.0f s: one run, "
                "summarised once they answer for %.0f s with none failing, or stop",
                self._what,
                self._last_reason,
                SETTLE_SECONDS,
                SETTLE_SECONDS,
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
        """A call succeeded: a run's first recovery gets its summary, and a flap once it settles."""
        if self._phase is _Phase.IDLE and not self.in_a_row:
            return  # the common case, a read each poll: no clock read
        now = anyio.current_time()
        if self.in_a_row:
            self._answered_at = now
        self.in_a_row = 0
        if self._phase is _Phase.IDLE:
            return
        self._answered += 1
        if self._phase is _Phase.FAILING:
            self._phase = _Phase.RECOVERED
            if self._warned:
                self._summary("recovered after")
        elif self._settled(now):
            self._settle()

    def close(self, ending: str) -> None:
        """The calls end: a run still failing, or flapping, gets its summary if it was warned of."""
        if self._phase in (_Phase.FAILING, _Phase.FLAPPING) and self._warned:
            self._summary(f"stopped ({ending}) after")
        self.in_a_row = 0
        self._end_run()

    def _settled(self, now: float) -> bool:
        """Whether a run's calls have answered for SETTLE_SECONDS since its last failure.

        From the first success after it, not from the failure: a wait of the
        backoff's cap and one answer are not a quiet minute.
        """
        return (
            self._phase is not _Phase.IDLE
            and not self.in_a_row
            and now - self._answered_at >= SETTLE_SECONDS
        )

    def _settle(self) -> None:
        if self._phase is _Phase.FLAPPING and self._warned:
            self._summary("settled after", f", then none for {SETTLE_SECONDS:.0f} s")
        self._end_run()

    def _end_run(self) -> None:
        self._phase, self._announce, self._warned = _Phase.IDLE, None, False

    def _summary(self, how: str, then: str = "") -> None:
        # From the run's first failure to the first success after its last (or now, if
        # the last call failed): how long the calls were failing, on and off.
        until = anyio.current_time() if self.in_a_row else self._answered_at
        seconds = until - self._started_at
        failed = f"{self._failed} failed {self._noun}{'' if self._failed == 1 else 's'}"
        if self._phase is _Phase.FLAPPING:
            failed += f" of {self._failed + self._answered}"
        note_on_span(
            FAILURES_EVENT,
            {
                "follower.failures.phase": how.split(" ", 1)[0],
                "follower.failures.reason": self._last_reason,
                "follower.failures.failed": self._failed,
                "follower.failures.answered": self._answered,
                "follower.failures.seconds": seconds,
            },
        )
        self._logger.warning(
            "%s %s %s in %.1f s%s (last: %s)",
            self._what,
            how,
            failed,
            seconds,
            then,
            self._last_reason,
            extra={
                **self._extra,
                f"failed_{self._noun}s": self._failed,
                f"answered_{self._noun}s": self._answered,
                "failing_seconds": seconds,
            },
        )


class _Phase(enum.Enum):
    IDLE = "no run"
    FAILING = "failing, not yet answered"
    RECOVERED = "answered since it failed; a failure soon is the same run"
    FLAPPING = "failed again after it recovered"
