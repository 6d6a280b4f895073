"""Following one task's live trajectory: the read loop (docs/protocol.md, "Following one task").

Before ``stop`` an agent that fails to answer may be busy, so a failed read is
retried with backoff. After ``stop`` the turn has ended, so an agent that fails
to answer is gone: the read raises :class:`FollowingEnded`, and this module, its
only owner, returns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import attrs

from ._clients import leased_client
from ._errors import (
    AgentUnavailableError,
    FollowerError,
    FollowingEnded,
    InvalidArgumentError,
    PoolBusyError,
    TaskNotFoundError,
)
from ._exchange import read_page
from ._options import DEFAULT_MAX_PAGE_BYTES, DEFAULT_READ_TIMEOUT_SECONDS, FollowOptions, count

if TYPE_CHECKING:
    import httpx

    from ._wire import Page, TrajectoryBatch, TrajectoryState

logger = logging.getLogger("follower")

Sink = Callable[["TrajectoryBatch"], Awaitable[None]]

BACKOFF_STEP_SECONDS = 5.0
BACKOFF_CAP_SECONDS = 60.0
AFTER_STOP_PAUSE_SECONDS = 0.2


def retry_delay(poll_interval_seconds: float, failures: int) -> float:
    """How long to wait before the read after ``failures`` failed reads in a row."""
    return min(poll_interval_seconds + BACKOFF_STEP_SECONDS * failures, BACKOFF_CAP_SECONDS)


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
) -> FollowOutcome:
    """Read ``task_id``'s trajectory from cursor ``after`` and hand each page to ``sink``.

    Returns after the last page, on a 404, or when a read fails after ``stop`` is
    set, saying how far it got. Raises :class:`~follower.AgentRefusedError` (other
    4xx), :class:`~follower.MalformedPageError`, or whatever ``sink`` raises. It
    never ends by itself while the task runs and the agent answers: bound it with
    a cancel scope, or use :func:`following_live_trajectory`, which does.
    """
    options = FollowOptions(
        poll_interval_seconds=poll_interval_seconds,
        read_timeout_seconds=read_timeout_seconds,
        max_page_bytes=max_page_bytes,
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
) -> FollowOutcome:
    """:func:`follow_trajectory` with its options built; ``progress`` is kept up to date."""
    if not isinstance(task_id, str) or not task_id:
        raise InvalidArgumentError(f"task_id must be a non-empty string, not {task_id!r}")
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
    )
    progress.running, progress.stopped_at = True, None
    try:
        # The follower's own lane: with no client given, a slot of the loop's pool
        # that no other follower reads through at the same time.
        async with leased_client(options.client) as leased:
            try:
                await follower.run(leased, after)
            except FollowingEnded as ended:
                logger.info("stopped following task %s: %s", task_id, ended.__cause__)
    finally:
        progress.running = False
        progress.stopped_at = anyio.current_time()
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
    ) -> None:
        self.endpoint = endpoint
        self.task_id = task_id
        self.sink = sink
        self.options = options
        self.poll = options.poll_interval_seconds
        self.stop = stop
        self.progress = progress

    async def run(self, client: httpx.AsyncClient, after: int) -> None:
        cursor = after
        failures = 0
        while True:
            try:
                page = await self._read(client, cursor)
            except TaskNotFoundError as exc:
                logger.warning(
                    "task %s is unknown to the agent; not following it: %s", self.task_id, exc
                )
                return
            except AgentUnavailableError as exc:
                failures += 1
                delay = retry_delay(self.poll, failures)
                logger.warning(
                    "read %d of task %s failed, retrying in %.1f s: %s",
                    failures,
                    self.task_id,
                    delay,
                    exc,
                )
                await self._wait_or_stop(delay)
                continue
            except PoolBusyError as exc:
                # Our own pool is full: not the agent's failure, so no backoff and no sentinel.
                self.progress.pool_waits += 1
                logger.debug("%s; reading task %s again", exc, self.task_id)
                await self._pause()
                continue
            failures = 0
            self.progress.state = page.state
            if page.events or page.last:
                await self.sink(page.to_batch())
                cursor = page.next
                self._handed_over(page)
            if page.last:
                return
            if page.has_more:
                await anyio.lowlevel.checkpoint()
            else:
                await self._pause()

    async def _read(self, client: httpx.AsyncClient, cursor: int) -> Page:
        """One cursor read; after stop, a failed read ends following (the sentinel's seam)."""
        try:
            page = await read_page(
                client,
                self.endpoint,
                self.task_id,
                cursor,
                read_timeout_seconds=self.options.read_timeout_seconds,
                max_page_bytes=self.options.max_page_bytes,
            )
        except PoolBusyError:
            raise  # never sent: not a read of the agent
        except FollowerError as exc:
            self.progress.reads += 1
            self.progress.failed_reads += 1
            if isinstance(exc, AgentUnavailableError) and self._gone_after_stop():
                raise FollowingEnded(f"task {self.task_id}: read failed after stop") from exc
            raise
        self.progress.reads += 1
        if not page.has_more:
            self.progress.caught_up_at = anyio.current_time()
        return page

    def _gone_after_stop(self) -> bool:
        """After stop the turn has ended, so an agent that fails to answer is gone."""
        return self.stop.is_set()

    def _handed_over(self, page: Page) -> None:
        # Recorded as soon as the sink returns, before any checkpoint: an owner that
        # cancels this follower next still sees the last page as read.
        self.progress.cursor = page.next
        self.progress.events += len(page.events)
        self.progress.complete = page.last

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
