"""What every follower does around its loop: its lane, its bound, the sentinel, its record.

A follower's loop (cursor reads', a stream's, the polls') runs inside :func:`run_follower`,
which leases its client, bounds the run by ``max_follow_seconds``, returns
normally when the loop raises the post-stop sentinel (it never leaves the
library), names the task and the turn on any error that leaves, and keeps the
follower's record (``running``, ``stopped_at``) and its failure log's summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from .._backoff import retry_delay
from .._errors import (
    FollowerError,
    FollowingEnded,
    InvalidArgumentError,
    PoolBusyError,
    add_context,
)
from .._format._stream import STREAM_FORMAT
from .._format._wire import MAX_PAGE_EVENTS, TrajectoryBatch
from .._http._clients import ClientLease
from .._http._exchange import CutShort
from .._retries import FailureStreak, backoff_fraction, failure_reason
from ._keeper import TurnStop, wait_in_scope
from ._record import FollowProgress

if TYPE_CHECKING:
    import logging
    from collections.abc import Awaitable, Callable, Coroutine

    import httpx

    from .._format._a2a import TaskSource
    from .._format._wire import TrajectoryState
    from .._options import FollowOptions
    from ._record import Beats, FollowOutcome, Sink

T = TypeVar("T")


class FollowerLoop(Protocol):
    """A way's loop (cursor reads, a stream, polls): made for one task, run with a client."""

    noun: str
    """What it sends, in log lines: ``read``, ``stream``, ``poll``."""

    @property
    def extra(self) -> dict[str, object]: ...

    async def run(self, client: httpx.AsyncClient, after: int) -> None: ...

    def left(self, ending: str) -> None:
        """The loop has ended (``ending`` says how): its run of failures gets its summary."""


class MakeLoop(Protocol):
    def __call__(
        self,
        *,
        source: TaskSource,
        task_id: str,
        sink: Sink,
        options: FollowOptions,
        stop: anyio.Event,
        progress: FollowProgress,
        turn_id: str | None,
        beats: Beats | None,
    ) -> FollowerLoop: ...


def follow_by(
    make: MakeLoop,
    source: TaskSource,
    task_id: str,
    sink: Sink,
    *,
    stop: anyio.Event,
    options: FollowOptions,
    after: int,
    progress: FollowProgress | None,
    turn_id: str | None,
    logger: logging.Logger,
    beats: Beats | None = None,
) -> Coroutine[Any, Any, FollowOutcome]:
    """Follow ``task_id`` with the loop ``make`` builds, from ``after`` events stored.

    Returns the shell's coroutine (:func:`run_follower`) for the caller to await at
    once, rather than awaiting it in a coroutine of its own: a frame fewer that each
    of thousands of followers would keep for as long as it runs (the same for each
    way's entry). A bad argument raises here, at the call.
    """
    if not isinstance(task_id, str) or not task_id:
        raise InvalidArgumentError(f"task_id must be a non-empty string, not {task_id!r}")
    if progress is None:
        progress = FollowProgress()
    progress.cursor = after
    loop = make(
        source=source,
        task_id=task_id,
        sink=sink,
        options=options,
        stop=stop,
        progress=progress,
        turn_id=turn_id,
        beats=beats,
    )
    return run_follower(
        loop,
        url=source.url,
        task_id=task_id,
        turn_id=turn_id,
        options=options,
        progress=progress,
        after=after,
        logger=logger,
    )


def failed_call(
    failure: FollowerError,
    *,
    failures: int,
    failing: FailureStreak,
    progress: FollowProgress,
    stop: anyio.Event,
    options: FollowOptions,
    what: str,
) -> float:
    """Count a failed subscription or poll; the backoff to wait before the next.

    After ``stop`` the step has ended, so an agent that fails is gone: following
    ends (the post-stop sentinel). Our own full pool is never the agent's failure:
    it is neither counted nor logged, and never ends following. ``failures`` is
    the agent's failures in a row, this one included.
    """
    pool_busy = isinstance(failure, PoolBusyError)
    if not pool_busy:
        progress.failed_reads += 1
        failing.failed(failure)
        if stop.is_set():
            raise FollowingEnded(f"{what} failed after stop") from failure
    delay = retry_delay(
        options.poll_interval_seconds,
        failures,
        backoff_fraction(),
        getattr(failure, "retry_after_seconds", None),
    )
    if not pool_busy:
        failing.retrying(delay)
    return delay


async def store_events(
    sink: Sink,
    progress: FollowProgress,
    events: list[Any],
    state: TrajectoryState,
    *,
    last: bool,
) -> None:
    """Hand a streamed or polled turn's ``events`` to ``sink``, at most a page's worth a batch.

    ``last``: these end the turn and nothing can be missing. The record moves as soon
    as each batch is stored: an owner that cancels next still sees it.
    """
    for start in range(0, len(events), MAX_PAGE_EVENTS):
        part = events[start : start + MAX_PAGE_EVENTS]
        final = last and start + MAX_PAGE_EVENTS >= len(events)
        batch = TrajectoryBatch(
            after=progress.cursor,
            next=progress.cursor + len(part),
            events=part,
            format=STREAM_FORMAT,
            state=state,
            last=final,
        )
        await sink(batch)
        progress.cursor = batch.next
        progress.events += len(part)
        progress.complete = final
        progress.state = state
    progress.caught_up_at = anyio.current_time()


def wait_or_stop(stop: anyio.Event, seconds: float) -> Awaitable[None]:
    """Wait ``seconds``, or until ``stop`` is set; a cancel pending then goes first.

    A turn's own stop parks the wait on the loop's timekeeper (``_keeper``); any other
    event (a caller's, given to ``follow_trajectory``) is waited on in a cancel scope.
    """
    if type(stop) is TurnStop:
        return stop.wait_or_set(seconds)
    return wait_in_scope(stop, seconds)


# --- the turn's heartbeats, which a follower writes between its reads (``_turns._beats``)


def beats_kept(beats: Beats | None, stop: anyio.Event) -> Beats | None:
    """The turn's beats while this follower writes them: never once the step has stopped."""
    if beats is None or not beats.by_follower or stop.is_set():
        return None
    return beats


async def beat_if_due(beats: Beats | None, stop: anyio.Event, now: float) -> float:
    """Write the beat due at ``now``, if one is, before the next read; the time after it."""
    kept = beats_kept(beats, stop)
    if kept is None or now < kept.due:
        return now
    await kept.beat()
    return anyio.current_time()


async def beat_before(beats: Beats | None, stop: anyio.Event, due: float) -> bool:
    """Write each beat that cannot wait for the next read, due at ``due``, waking for it.

    Rare: only a poll interval longer than a beat may be late needs it. Setting
    ``stop`` ends the wait, and the beats with it. Whether it wrote one: then the
    read's own lateness counts from when the beat was done, not from ``due``.
    """
    wrote = False
    while (kept := beats_kept(beats, stop)) is not None and kept.late_at() < due:
        seconds = kept.due - anyio.current_time()
        if seconds > 0:
            await wait_or_stop(stop, seconds)
        else:
            await kept.beat()
            wrote = True
    return wrote


def cut_for_beat(beats: Beats | None, stop: anyio.Event, bound: float, now: float) -> float | None:
    """When a read must be cut short, unanswered, for the beat due: a time on the loop's clock.

    None when the follower writes no beat, or the read's own ``bound`` comes first. A
    read still unanswered then is cut short, the beats go to a task, and it is sent
    again within its own bound: a slow agent costs a read nothing. A beat due already
    (the read waited for its slot) goes to a task at once.
    """
    kept = beats_kept(beats, stop)
    if kept is None:
        return None
    cut_at = kept.late_at()
    if cut_at <= now:
        kept.to_task()
        return None
    return cut_at if cut_at - now < bound else None


async def sent_again_if_cut(
    beats: Beats | None, cut_at: float | None, send: Callable[..., Awaitable[T]], *args: Any
) -> T:
    """``send(*args, cut_at)``, cut short at ``cut_at`` (:func:`cut_for_beat`) for the beat due.

    ``send`` passes ``cut_at`` on to the exchange (``_http._exchange.exchange``), which
    raises :class:`CutShort` if it comes first. Still unanswered then: the beats go to a
    task, and it is sent again, within its own bound (which ``args`` carry).
    """
    if cut_at is None:
        return await send(*args, None)
    try:
        return await send(*args, cut_at)
    except CutShort:
        assert beats is not None
        beats.to_task()
    return await send(*args, None)


async def run_follower(
    loop: FollowerLoop,
    *,
    url: str,
    task_id: str,
    turn_id: str | None,
    options: FollowOptions,
    progress: FollowProgress,
    after: int,
    logger: logging.Logger,
) -> FollowOutcome:
    """Run ``loop`` from ``after`` with a client for ``url``; return what the follower did."""
    progress.running, progress.stopped_at, progress.ending = True, None, None
    bound = options.max_follow_seconds
    ending = "it ended"
    try:
        # The follower's own lane: with no client given, a slot of the loop's pool
        # that no other follower reads through at the same time.
        async with ClientLease(options.client, options.headers, url) as leased:
            try:
                if bound is None:  # no scope kept for a bound that is not there
                    await loop.run(leased, after)
                else:
                    with anyio.move_on_after(bound) as bounded:
                        await loop.run(leased, after)
                    if bounded.cancelled_caught:
                        ending = f"it ran for max_follow_seconds={bound}"
                        logger.warning(
                            "stopped following task %s: it ran for max_follow_seconds=%s",
                            task_id,
                            bound,
                            extra=loop.extra,
                        )
            except FollowingEnded as ended:
                ending = f"a {loop.noun} failed after stop"
                logger.info(
                    "stopped following task %s: the %s after stop failed (%s)",
                    task_id,
                    loop.noun,
                    failure_reason(ended.__cause__ or ended),
                    extra=loop.extra,
                )
    except Exception as exc:
        ending = "an error ended it"
        # The sink's errors (a store's) know their key, not the task or the turn.
        add_context(exc, task_id=task_id, turn_id=turn_id)
        raise
    except BaseException:
        ending = "it was cancelled"
        raise
    finally:
        progress.running = False
        progress.stopped_at = anyio.current_time()
        progress.ending = ending
        loop.left(ending)
    return progress.outcome()
