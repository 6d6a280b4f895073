"""What a follower does after each read: the read loop's outcome table, as sync state.

The way h11 keeps HTTP's state machine: every decision of the read loop, and the
state those decisions need, lives here, with no I/O, no clock and no event loop.
``_follow._Follower`` reads, tells :class:`ReadPolicy` what came back and whether
the step has stopped, and carries out the action it is given: hand the page to
the sink, read again at once, wait, or end (docs/design.md §5, docs/protocol.md).

The rules, each a test in ``tests/reading/test_read_policy.py``: a page with events, or
the last page, is always handed over before anything else happens; after the
step has stopped, a failed read ends following at once (an agent that fails to
answer then is gone, not busy); our own pool being full is no failed read and
never ends following; and every wait is bounded (by the backoff's cap before
stop, by the short after-stop pause after it).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from .._backoff import retry_delay
from .._errors import (
    AgentRefusedError,
    AgentUnavailableError,
    ClientClosedError,
    FollowerError,
    MalformedPageError,
    PoolBusyError,
    TaskNotFoundError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

AFTER_STOP_PAUSE_SECONDS = 0.2
# An agent that answers has_more read after read is read back to back, but not for
# ever: after this many such pages in a row the follower pauses (AFTER_STOP_PAUSE_SECONDS,
# or the poll interval if shorter), so an agent that always has more, a little at a
# time, gets at most ~500 reads a second of one follower. A page of BACKLOG_PAGE_BYTES or
# more on the wire is a backlog being read, each read paying its way in what it stores,
# and does not count: counting every page, a 1,000,000-event backlog in pages of 1,000
# paused 10 times, 2 s of a 3.4 s catch-up. (Bytes, not events: 100 tiny events cost an
# agent nothing to send.)
MAX_READS_WITHOUT_PAUSE = 100
BACKLOG_PAGE_BYTES = 32 * 1024
# An agent may register a task's trajectory a moment after message/send answered:
# until a follower has read a page, a 404 within this long of its first read is
# "not yet", read again after the poll interval (at most NOT_FOUND_RETRY_SECONDS).
NOT_FOUND_GRACE_SECONDS = 10.0
NOT_FOUND_RETRY_SECONDS = 1.0


class Failure(enum.Enum):
    """How a read failed: one row of the outcome table each."""

    UNAVAILABLE = "5xx, transport error or timeout"
    NOT_FOUND = "404: the task is unknown (or not yet known)"
    REFUSED = "another 4xx"
    MALFORMED = "a malformed page"
    POOL_BUSY = "our own pool was full: never sent"
    CLIENT_CLOSED = "the caller's client was closed: never sent"
    OTHER = "any other error of the library"


def read_failed(exc: FollowerError) -> ReadFailed:
    """The outcome of a read that failed with ``exc``: its row of the table."""
    failure = next((row for kind, row in _FAILURES if isinstance(exc, kind)), Failure.OTHER)
    retry_after = exc.retry_after_seconds if isinstance(exc, AgentUnavailableError) else None
    return ReadFailed(failure, retry_after)


_FAILURES: tuple[tuple[type[FollowerError], Failure], ...] = (
    (PoolBusyError, Failure.POOL_BUSY),
    (ClientClosedError, Failure.CLIENT_CLOSED),
    (AgentUnavailableError, Failure.UNAVAILABLE),
    (TaskNotFoundError, Failure.NOT_FOUND),
    (MalformedPageError, Failure.MALFORMED),
    (AgentRefusedError, Failure.REFUSED),
)


@attrs.frozen
class PageRead:
    """A read answered with a valid page: what the policy needs to know of it."""

    events: int
    last: bool
    has_more: bool
    body_bytes: int


@attrs.frozen
class ReadFailed:
    """A read that brought no valid page."""

    failure: Failure
    retry_after_seconds: float | None = None


Outcome = PageRead | ReadFailed


@attrs.frozen
class Tally:
    """How one outcome counts in a follower's progress."""

    reads: int
    failed_reads: int
    pool_waits: int


def tally(outcome: Outcome) -> Tally:
    """A read sent to the agent counts, answered or not; one never sent is no read."""
    if isinstance(outcome, PageRead):
        return Tally(reads=1, failed_reads=0, pool_waits=0)
    if outcome.failure is Failure.POOL_BUSY:
        return Tally(reads=0, failed_reads=0, pool_waits=1)
    if outcome.failure is Failure.CLIENT_CLOSED:
        return Tally(reads=0, failed_reads=0, pool_waits=0)
    return Tally(reads=1, failed_reads=1, pool_waits=0)


class Ending(enum.Enum):
    """Why following ends."""

    LAST_PAGE = "the last page was handed over"
    UNKNOWN = "the task is unknown to the agent: return quietly"
    GONE = "a read failed after stop: raise the post-stop sentinel"
    ERROR = "raise the read's error"


@attrs.frozen
class HandOver:
    """Hand the page to the sink, then tell the policy :meth:`ReadPolicy.handed_over`."""


@attrs.frozen
class ReadNow:
    """Read again at once (after a checkpoint)."""


@attrs.frozen
class Wait:
    """Wait ``seconds`` before the next read; with ``until_stop``, setting stop ends the wait.

    ``paced``: counted from when the last read began, not from now. The poll
    interval is the period of a follower's reads, so followers that share a busy
    loop fall due in the order they were last read, and are read in turn.
    """

    seconds: float
    until_stop: bool
    paced: bool = False


@attrs.frozen
class End:
    """Stop reading."""

    ending: Ending


Action = HandOver | ReadNow | Wait | End


@attrs.define(eq=False)
class ReadPolicy:
    """One follower's read loop decisions, fed each read's outcome in turn.

    ``draw`` gives the backoff's jitter (a fraction in [0, 1]), called once a
    retried failure. Times (``now``) are the caller's clock, in seconds.
    """

    poll_seconds: float
    draw: Callable[[], float]
    first_read_at: float | None = attrs.field(init=False, default=None)
    read_a_page: bool = attrs.field(init=False, default=False)
    not_found: int = attrs.field(init=False, default=0)
    """404s read again as "not yet", before the first page."""
    unavailable_in_a_row: int = attrs.field(init=False, default=0)
    """Failed reads since the last page: what the backoff grows with."""
    back_to_back: int = attrs.field(init=False, default=0)
    _owed: PageRead | None = attrs.field(init=False, default=None)

    def reading(self, now: float) -> None:
        """A read is about to be tried: the 404 grace counts from the first."""
        if self.first_read_at is None:
            self.first_read_at = now

    def read(self, outcome: Outcome, *, stopped: bool, now: float) -> Action:
        """What to do after a read that came back as ``outcome``."""
        if self._owed is not None:
            raise RuntimeError("a page is being handed over: call handed_over() first")
        if isinstance(outcome, PageRead):
            self.read_a_page = True
            self.unavailable_in_a_row = 0
            if outcome.events or outcome.last:
                self._owed = outcome
                return HandOver()
            return self._after_page(outcome, stopped=stopped)
        return self._failed(outcome, stopped=stopped, now=now)

    def handed_over(self, *, stopped: bool) -> Action:
        """The sink took the page :meth:`read` asked to hand over: what next."""
        page, self._owed = self._owed, None
        if page is None:
            raise RuntimeError("no page is being handed over")
        return self._after_page(page, stopped=stopped)

    def _after_page(self, page: PageRead, *, stopped: bool) -> Action:
        if page.last:
            return End(Ending.LAST_PAGE)
        if not page.has_more:
            self.back_to_back = 0
            return self._pause(stopped=stopped)
        if page.body_bytes < BACKLOG_PAGE_BYTES:
            self.back_to_back += 1
        if self.back_to_back < MAX_READS_WITHOUT_PAUSE:
            return ReadNow()
        self.back_to_back = 0
        return Wait(self._short_pause, until_stop=False)

    def _failed(self, failed: ReadFailed, *, stopped: bool, now: float) -> Action:
        failure = failed.failure
        if failure is Failure.POOL_BUSY:
            # Our own pool is full: not the agent's failure, so no backoff and no sentinel.
            return self._pause(stopped=stopped)
        if failure is Failure.UNAVAILABLE:
            self.unavailable_in_a_row += 1
            if stopped:
                return End(Ending.GONE)
            delay = retry_delay(
                self.poll_seconds,
                self.unavailable_in_a_row,
                self.draw(),
                failed.retry_after_seconds,
            )
            return Wait(delay, until_stop=True)
        if failure is Failure.NOT_FOUND:
            if self._may_be_registered_late(stopped=stopped, now=now):
                self.not_found += 1
                return Wait(min(self.poll_seconds, NOT_FOUND_RETRY_SECONDS), until_stop=True)
            return End(Ending.UNKNOWN)
        return End(Ending.ERROR)

    def _may_be_registered_late(self, *, stopped: bool, now: float) -> bool:
        """Whether a 404 may still mean "not yet": no page read, not stopped, in the grace."""
        if self.read_a_page or stopped or self.first_read_at is None:
            return False
        return now - self.first_read_at < NOT_FOUND_GRACE_SECONDS

    def _pause(self, *, stopped: bool) -> Wait:
        """The wait between reads of a task with nothing new to read."""
        if stopped:
            return Wait(self._short_pause, until_stop=False)
        return Wait(self.poll_seconds, until_stop=True, paced=True)

    @property
    def _short_pause(self) -> float:
        return min(AFTER_STOP_PAUSE_SECONDS, self.poll_seconds)
