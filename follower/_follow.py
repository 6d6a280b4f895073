"""Following one task's live trajectory: the read loop of DESIGN §2.

Before ``stop`` an agent that fails to answer may be busy, so a failed read is
retried with backoff. After ``stop`` the turn has ended, so an agent that fails
to answer is gone: the read raises :class:`FollowingEnded`, and this module, its
only owner, returns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import httpx

from ._errors import (
    AgentUnavailableError,
    FollowingEnded,
    InvalidArgumentError,
    PoolBusyError,
    TaskNotFoundError,
)
from ._http import (
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT_SECONDS,
    leased_client,
    read_page,
)
from ._wire import Page, TrajectoryBatch

logger = logging.getLogger("follower")

Sink = Callable[[TrajectoryBatch], Awaitable[None]]

BACKOFF_STEP_SECONDS = 5.0
BACKOFF_CAP_SECONDS = 60.0
AFTER_STOP_PAUSE_SECONDS = 0.2


def retry_delay(poll_interval_seconds: float, failures: int) -> float:
    """How long to wait before the read after ``failures`` failed reads in a row."""
    return min(poll_interval_seconds + BACKOFF_STEP_SECONDS * failures, BACKOFF_CAP_SECONDS)


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
) -> None:
    """Read ``task_id``'s trajectory from cursor ``after`` and hand each page to ``sink``.

    Returns after the last page, on a 404, or when a read fails after ``stop`` is
    set. Raises :class:`~follower.AgentRefusedError` (other 4xx),
    :class:`~follower.MalformedPageError`, or whatever ``sink`` raises. It never
    ends by itself while the task runs and the agent answers: bound it with a
    cancel scope, or use :func:`following_live_trajectory`, which does.
    """
    if poll_interval_seconds <= 0:
        raise InvalidArgumentError("poll_interval_seconds must be positive")
    if after < 0:
        raise InvalidArgumentError("after must be >= 0")
    follower = _Follower(
        endpoint=endpoint,
        task_id=task_id,
        sink=sink,
        poll_interval_seconds=poll_interval_seconds,
        stop=stop,
        read_timeout_seconds=read_timeout_seconds,
        max_page_bytes=max_page_bytes,
    )
    async with leased_client(client) as leased:
        try:
            await follower.run(leased, after)
        except FollowingEnded as ended:
            logger.info("stopped following task %s: %s", task_id, ended.__cause__)


class _Follower:
    def __init__(
        self,
        *,
        endpoint: str,
        task_id: str,
        sink: Sink,
        poll_interval_seconds: float,
        stop: anyio.Event,
        read_timeout_seconds: float,
        max_page_bytes: int,
    ) -> None:
        self.endpoint = endpoint
        self.task_id = task_id
        self.sink = sink
        self.poll = poll_interval_seconds
        self.stop = stop
        self.read_timeout_seconds = read_timeout_seconds
        self.max_page_bytes = max_page_bytes

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
                logger.debug("%s; reading task %s again", exc, self.task_id)
                await self._pause()
                continue
            failures = 0
            if page.events or page.last:
                await self.sink(page.to_batch())
                cursor = page.next
            if page.last:
                return
            if page.has_more:
                await anyio.lowlevel.checkpoint()
            else:
                await self._pause()

    async def _read(self, client: httpx.AsyncClient, cursor: int) -> Page:
        """One cursor read; after stop, a failed read ends following (the sentinel's seam)."""
        try:
            return await read_page(
                client,
                self.endpoint,
                self.task_id,
                cursor,
                read_timeout_seconds=self.read_timeout_seconds,
                max_page_bytes=self.max_page_bytes,
            )
        except AgentUnavailableError as exc:
            if self.stop.is_set():
                raise FollowingEnded(f"task {self.task_id}: read failed after stop") from exc
            raise

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
