"""How long to wait before trying again: the backoff's arithmetic, sync and without a clock.

The read policy (:mod:`follower._reading._policy`) decides with these and no event loop;
:mod:`follower._retries` adds the jitter's draws, the waits themselves and the logs.
"""

from __future__ import annotations

import attrs

BACKOFF_STEP_SECONDS = 5.0
BACKOFF_CAP_SECONDS = 60.0


def retry_delay(
    poll_interval_seconds: float,
    failures: int,
    fraction: float = 1.0,
    retry_after_seconds: float | None = None,
    *,
    step_seconds: float = BACKOFF_STEP_SECONDS,
) -> float:
    """How long to wait before the try after ``failures`` failures in a row.

    Full jitter over the backoff's growth: ``fraction`` (a draw in [0, 1]) places
    the wait between its floor, the poll interval (or the agent's
    ``Retry-After``, if longer), and its ceiling, the floor + ``step_seconds``
    (5 s) x failures; both are capped at 60 s. A fraction of 1 is the ceiling,
    the backoff without jitter.
    """
    floor = _honouring(poll_interval_seconds, retry_after_seconds, BACKOFF_CAP_SECONDS)
    ceiling = min(floor + step_seconds * failures, BACKOFF_CAP_SECONDS)
    return floor + fraction * (ceiling - floor)


def _honouring(wait_seconds: float, retry_after_seconds: float | None, cap_seconds: float) -> float:
    """``wait_seconds``, or the agent's ``Retry-After`` if longer, within ``cap_seconds``."""
    return min(max(wait_seconds, retry_after_seconds or 0.0), cap_seconds)


POLL_GROWTH = 1.5
"""How much longer each wait of a poll for a task's end is than the one before, up to its cap."""


@attrs.define
class PollBackoff:
    """The waits between the polls of a wait for something to end (the A2A ``tasks/get``).

    The first wait is ``interval_seconds``; each after it :data:`POLL_GROWTH`
    times the one before, up to ``max_interval_seconds``, whether the polls
    answer "not yet" or fail: a long task, or an agent that is down, is asked
    less and less often. A ``Retry-After`` lengthens one wait, within the cap
    (or the first interval, if that is longer).
    """

    _interval_seconds: float = attrs.field(alias="interval_seconds")
    max_interval_seconds: float

    def next_wait(self, retry_after_seconds: float | None = None) -> float:
        """The wait before the next poll; the one after it grows."""
        interval = self._interval_seconds
        wait = _honouring(interval, retry_after_seconds, max(self.max_interval_seconds, interval))
        self._interval_seconds = min(interval * POLL_GROWTH, self.max_interval_seconds)
        return wait
