"""When a step's turns end for good, from what temporalio tells an activity about its attempt.

A turn is marked (``end.json``, and the step's null link) only when no later
attempt will continue it:

- the step returned;
- the workflow asked for the cancel (``cancellation_details().cancel_requested``);
- it failed and will not be retried: an ``ApplicationError`` with
  ``non_retryable``, an error type the retry policy names in
  ``non_retryable_error_types``, the last attempt (``info().attempt`` reached
  ``retry_policy.maximum_attempts``), or no time left for another attempt
  before ``schedule_to_close_timeout``.

Otherwise the attempt hands off (no end mark, no null link) and the next
attempt resumes: a worker shutting down (``worker_shutdown``, or
``activity.is_worker_shutdown()``), a heartbeat or start-to-close timeout
(``timed_out``) before the last attempt, a pause or reset, an attempt the
server no longer knows (``not_found``: another attempt may own the turns), and
a failure that will be retried. When the server sends no retry policy
(``info().retry_policy is None``), a failure is taken as retried, as the
server's default policy retries without limit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError


def is_last_attempt(info: activity.Info) -> bool:
    """Whether no attempt follows this one, whatever it fails with."""
    policy = info.retry_policy
    if policy is None:
        return False
    if policy.maximum_attempts > 0 and info.attempt >= policy.maximum_attempts:
        return True
    if info.schedule_to_close_timeout:
        # In float seconds, the exponent capped: attempt 60 of a 1 s, x2 policy overflows.
        # Without a maximum the server caps the interval at 100 x the initial one.
        initial = policy.initial_interval.total_seconds()
        growth = policy.backoff_coefficient ** min(info.attempt - 1, 64)
        longest = (
            policy.maximum_interval.total_seconds()
            if policy.maximum_interval is not None
            else 100 * initial
        )
        interval = timedelta(seconds=min(initial * growth, longest))
        closes = info.scheduled_time + info.schedule_to_close_timeout
        return datetime.now(UTC) + interval >= closes
    return False


def cancel_ends_for_good() -> bool:
    """Whether the activity's cancel, now being delivered, ends its turns for good."""
    if activity.is_worker_shutdown():
        return False
    details = activity.cancellation_details()
    if details is None:
        # A cancel from the activity's own code or loop: nothing will retry it.
        return True
    if details.worker_shutdown or details.paused or details.reset or details.not_found:
        return False
    if details.timed_out:
        return is_last_attempt(activity.info())
    return True


def failure_ends_for_good(exc: BaseException) -> bool:
    """Whether the attempt failing with ``exc`` ends its turns for good."""
    if isinstance(exc, ApplicationError) and exc.non_retryable:
        return True
    info = activity.info()
    policy = info.retry_policy
    if policy is not None and policy.non_retryable_error_types:
        name = (exc.type if isinstance(exc, ApplicationError) else None) or type(exc).__name__
        if name in policy.non_retryable_error_types:
            return True
    return is_last_attempt(info)
