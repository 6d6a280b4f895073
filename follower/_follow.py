"""Following one task's live trajectory: the read loop (docs/protocol.md, "Following one task").

Before ``stop`` an agent that fails to answer may be busy, so a failed read is
retried with jittered backoff. After ``stop`` the turn has ended, so an agent
that fails to answer is gone: the read raises :class:`FollowingEnded`, and this
module, its only owner, returns.

Logs never grow with the reads: an agent that starts failing is one warning, its
recovery (or the end of following) one summary; each failed read in between is
a debug line, and an agent that flaps is one run (``_retries.FailureStreak``).
Records carry ``task_id`` and ``turn_id`` as ``extra`` fields, and no line holds
a header or a body (docs/security.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import attrs

from ._clients import leased_client
from ._errors import (
    AgentUnavailableError,
    ClientClosedError,
    FollowerError,
    FollowingEnded,
    InvalidArgumentError,
    PoolBusyError,
    TaskNotFoundError,
    add_context,
)
from ._exchange import checked_endpoint, read_page
from ._options import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT_SECONDS,
    FollowOptions,
    count,
)
from ._retries import FailureStreak, backoff_fraction, failure_reason, retry_delay

if TYPE_CHECKING:
    import httpx

    from ._wire import Page, TrajectoryBatch, TrajectoryState

logger = logging.getLogger("follower.follow")

Sink = Callable[["TrajectoryBatch"], Awaitable[None]]

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


@attrs.frozen
class FollowOutcome:
    """What one follower did: where it got to, and whether it read every event.

    ``complete`` is true when the last page (terminal state, nothing more) was
    handed to the sink; ``state`` is the state of the last page read. ``reads``
    counts every read sent to the agent, answered or not; ``failed_reads`` those
    that brought no valid page.
    """

    state: TrajectoryState | None
    cursor: int
    complete: bool
    reads: int
    failed_reads: int
    events: int


@attrs.define
class FollowProgress:
    """A follower's running record, kept up to date as it reads; its owner may look at any time.

    Only plain fields, set by the follower's own task between checkpoints, so a
    look at it (``statistics()``) is cheap and sees one consistent moment.
    """

    cursor: int = 0
    state: TrajectoryState | None = None
    complete: bool = False
    reads: int = 0
    failed_reads: int = 0
    events: int = 0
    pool_waits: int = 0
    """Reads that found our own pool full (``PoolBusyError``); never sent, never failed."""
    running: bool = False
    """From the follower's start (its lane's lease included) until it returns or is cancelled."""
    caught_up_at: float | None = None
    """``anyio.current_time()`` of the last page that was not ``has_more``."""
    stopped_at: float | None = None
    """``anyio.current_time()`` when the follower stopped running."""

    def lag_seconds(self, now: float | None = None) -> float | None:
        """Seconds since the follower was last caught up, up to now or to when it stopped.

        ``now`` is only read while the follower runs (``anyio.current_time()``
        if not given), so a stopped follower's lag is known outside the loop too.
        """
        if self.caught_up_at is None:
            return None
        if self.stopped_at is not None and not self.running:
            until = self.stopped_at
        else:
            until = anyio.current_time() if now is None else now
        return max(0.0, until - self.caught_up_at)

    def outcome(self) -> FollowOutcome:
        return FollowOutcome(
            state=self.state,
            cursor=self.cursor,
            complete=self.complete,
            reads=self.reads,
            failed_reads=self.failed_reads,
            events=self.events,
        )


async def follow_trajectory(
    endpoint: str,
    task_id: str,
    sink: Sink,
    *,
    poll_interval_seconds: float,
    stop: anyio.Event,
    client: httpx.AsyncClient | None = None,
    after: int = 0,
    read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    max_follow_seconds: float | None = None,
) -> FollowOutcome:
    """Read ``task_id``'s trajectory from cursor ``after`` and hand each page to ``sink``.

    Returns after the last page, on a 404 (past the grace for a task registered
    late), when a read fails after ``stop`` is set, or after ``max_follow_seconds``
    (if given), saying how far it got. Raises :class:`~follower.AgentRefusedError`
    (other 4xx), :class:`~follower.MalformedPageError`,
    :class:`~follower.ClientClosedError`, or whatever ``sink`` raises. Without
    ``max_follow_seconds`` it never ends by itself while the task runs and the
    agent answers: bound it with a cancel scope, or use
    :func:`following_live_trajectory`, which does.
    """
    options = FollowOptions(
        poll_interval_seconds=poll_interval_seconds,
        read_timeout_seconds=read_timeout_seconds,
        max_page_bytes=max_page_bytes,
        max_event_bytes=max_event_bytes,
        max_follow_seconds=max_follow_seconds,
        client=client,
    )
    return await follow_task(endpoint, task_id, sink, stop=stop, options=options, after=after)


async def follow_task(
    endpoint: str,
    task_id: str,
    sink: Sink,
    *,
    stop: anyio.Event,
    options: FollowOptions,
    after: int = 0,
    progress: FollowProgress | None = None,
    turn_id: str | None = None,
) -> FollowOutcome:
    """:func:`follow_trajectory` with its options built; ``progress`` is kept up to date.

    ``turn_id`` names the turn in the log records' ``extra`` fields.
    """
    if not isinstance(task_id, str) or not task_id:
        raise InvalidArgumentError(f"task_id must be a non-empty string, not {task_id!r}")
    endpoint = checked_endpoint(endpoint)
    after = count("after", after)
    if progress is None:
        progress = FollowProgress()
    progress.cursor = after
    follower = _Follower(
        endpoint=endpoint,
        task_id=task_id,
        sink=sink,
        options=options,
        stop=stop,
        progress=progress,
        turn_id=turn_id,
    )
    progress.running, progress.stopped_at = True, None
    bound = options.max_follow_seconds
    ending = "it ended"
    try:
        # The follower's own lane: with no client given, a slot of the loop's pool
        # that no other follower reads through at the same time.
        async with leased_client(options.client, headers=options.headers, url=endpoint) as leased:
            with anyio.move_on_after(math.inf if bound is None else bound) as bounded:
                try:
                    await follower.run(leased, after)
                except FollowingEnded as ended:
                    ending = "a read failed after stop"
                    logger.info(
                        "stopped following task %s: the read after stop failed (%s)",
                        task_id,
                        failure_reason(ended.__cause__ or ended),
                        extra=follower.extra,
                    )
            if bounded.cancelled_caught:
                ending = f"it ran for max_follow_seconds={bound}"
                logger.warning(
                    "stopped following task %s: it ran for max_follow_seconds=%s",
                    task_id,
                    bound,
                    extra=follower.extra,
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
        follower.failing.close(ending)
    return progress.outcome()


class _Follower:
    def __init__(
        self,
        *,
        endpoint: str,
        task_id: str,
        sink: Sink,
        options: FollowOptions,
        stop: anyio.Event,
        progress: FollowProgress,
        turn_id: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.task_id = task_id
        self.sink = sink
        self.options = options
        self.poll = options.poll_interval_seconds
        self.stop = stop
        self.progress = progress
        self.extra: dict[str, object] = {"task_id": task_id, "turn_id": turn_id}
        self.failing = FailureStreak(
            logger, f"reads of task {task_id} at {endpoint}", noun="read", extra=self.extra
        )
        self._first_read_at: float | None = None
        self._read_a_page = False
        self._not_found = 0
        self._back_to_back = 0

    async def run(self, client: httpx.AsyncClient, after: int) -> None:
        cursor = after
        while True:
            try:
                page = await self._read(client, cursor)
            except TaskNotFoundError:
                if self._may_be_registered_late():
                    self._not_found += 1
                    logger.debug("task %s is not known yet; reading again", self.task_id)
                    await self._wait_or_stop(min(self.poll, NOT_FOUND_RETRY_SECONDS))
                    continue
                self._log_unknown()
                return
            except AgentUnavailableError as exc:
                delay = retry_delay(
                    self.poll, self.failing.in_a_row, backoff_fraction(), exc.retry_after_seconds
                )
                self.failing.retrying(delay)
                await self._wait_or_stop(delay)
                continue
            except PoolBusyError as exc:
                # Our own pool is full: not the agent's failure, so no backoff and no sentinel.
                self.progress.pool_waits += 1
                logger.debug("%s; reading task %s again", exc, self.task_id, extra=self.extra)
                await self._pause()
                continue
            self.failing.recovered()
            if not self._read_a_page and self._not_found:
                logger.debug(
                    "task %s is known after %d reads answered 404",
                    self.task_id,
                    self._not_found,
                    extra=self.extra,
                )
            self._read_a_page = True
            self.progress.state = page.state
            if page.events or page.last:
                await self.sink(page.to_batch())
                cursor = page.next
                self._handed_over(page)
            if page.last:
                return
            if page.has_more:
                await self._next_at_once(page.body_bytes)
            else:
                self._back_to_back = 0
                await self._pause()

    def _may_be_registered_late(self) -> bool:
        """Whether a 404 may still mean "not yet": no page read, not stopped, in the grace."""
        if self._read_a_page or self.stop.is_set() or self._first_read_at is None:
            return False
        return anyio.current_time() - self._first_read_at < NOT_FOUND_GRACE_SECONDS

    def _log_unknown(self) -> None:
        if self._not_found and self._first_read_at is not None:
            logger.warning(
                "task %s is unknown to the agent at %s after %d reads in %.1f s; not following it",
                self.task_id,
                self.endpoint,
                self._not_found + 1,
                anyio.current_time() - self._first_read_at,
                extra=self.extra,
            )
        else:
            logger.warning(
                "task %s is unknown to the agent at %s (HTTP 404); not following it",
                self.task_id,
                self.endpoint,
                extra=self.extra,
            )

    async def _read(self, client: httpx.AsyncClient, cursor: int) -> Page:
        """One cursor read; after stop, a failed read ends following (the sentinel's seam)."""
        if client.is_closed:
            raise self._client_closed()
        if self._first_read_at is None:
            self._first_read_at = anyio.current_time()
        try:
            page = await read_page(
                client,
                self.endpoint,
                self.task_id,
                cursor,
                read_timeout_seconds=self.options.read_timeout_seconds,
                max_page_bytes=self.options.max_page_bytes,
                headers=self.options.headers,
                max_event_bytes=self.options.max_event_bytes,
            )
        except PoolBusyError:
            raise  # never sent: not a read of the agent
        except ClientClosedError as exc:
            raise self._client_closed() from exc  # our caller's doing, not the agent's
        except FollowerError as exc:
            self.progress.reads += 1
            self.progress.failed_reads += 1
            if isinstance(exc, AgentUnavailableError):
                self.failing.failed(exc)
                if self._gone_after_stop():
                    raise FollowingEnded(f"task {self.task_id}: read failed after stop") from exc
            raise
        self.progress.reads += 1
        if not page.has_more:
            self.progress.caught_up_at = anyio.current_time()
        return page

    def _client_closed(self) -> ClientClosedError:
        return ClientClosedError(
            f"the client given to follow task {self.task_id!r} at {self.endpoint} was closed "
            "while following; no read can succeed, so following ends",
            url=self.endpoint,
            task_id=self.task_id,
        )

    def _gone_after_stop(self) -> bool:
        """After stop the turn has ended, so an agent that fails to answer is gone."""
        return self.stop.is_set()

    def _handed_over(self, page: Page) -> None:
        # Recorded as soon as the sink returns, before any checkpoint: an owner that
        # cancels this follower next still sees the last page as read.
        self.progress.cursor = page.next
        self.progress.events += len(page.events)
        self.progress.complete = page.last

    async def _next_at_once(self, page_bytes: int) -> None:
        """Between pages that have more: a checkpoint, and a short pause now and then."""
        if page_bytes < BACKLOG_PAGE_BYTES:
            self._back_to_back += 1
        if self._back_to_back < MAX_READS_WITHOUT_PAUSE:
            await anyio.lowlevel.checkpoint()
        else:
            self._back_to_back = 0
            await anyio.sleep(min(AFTER_STOP_PAUSE_SECONDS, self.poll))

    async def _pause(self) -> None:
        """The wait between reads of a task with nothing new to read."""
        if self.stop.is_set():
            await anyio.sleep(min(AFTER_STOP_PAUSE_SECONDS, self.poll))
        else:
            await self._wait_or_stop(self.poll)

    async def _wait_or_stop(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self.stop.wait()
        # After a wait wakes, a pending cancel goes first (the 3.11 lesson).
        await anyio.lowlevel.checkpoint_if_cancelled()
