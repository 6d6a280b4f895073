"""What every follower does around its loop: its lane, its bound, the sentinel, its record.

A follower's loop (a stream's, the polls') runs inside :func:`run_follower`,
which leases its client, bounds the run by ``max_follow_seconds``, returns
normally when the loop raises the post-stop sentinel (it never leaves the
library), names the task and the turn on any error that leaves, and keeps the
follower's record (``running``, ``stopped_at``) and its failure log's summary.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.lowlevel

from .._errors import FollowingEnded, InvalidArgumentError, add_context
from .._http._clients import leased_client
from .._retries import failure_reason

if TYPE_CHECKING:
    import logging
    from collections.abc import Awaitable, Callable

    import httpx

    from .._format._a2a import TaskSource
    from .._options import FollowOptions
    from .._retries import FailureStreak
    from ._follow import FollowOutcome, FollowProgress, Sink


class FollowerLoop(Protocol):
    """A way's loop (a stream's, the polls'): made for one task, run with a client."""

    failing: FailureStreak

    async def run(self, client: httpx.AsyncClient) -> None: ...


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
    ) -> FollowerLoop: ...


async def follow_by(
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
) -> FollowOutcome:
    """Follow ``task_id`` with the loop ``make`` builds, from ``after`` events stored."""
    from ._follow import FollowProgress  # the read loop's record; it imports this module

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
    )
    return await run_follower(
        loop.run,
        url=source.url,
        task_id=task_id,
        turn_id=turn_id,
        options=options,
        progress=progress,
        failing=loop.failing,
        logger=logger,
    )


async def wait_or_stop(stop: anyio.Event, seconds: float) -> None:
    """Wait ``seconds``, or until ``stop`` is set; a cancel pending then goes first."""
    with anyio.move_on_after(seconds):
        await stop.wait()
    # After a wait wakes, a pending cancel goes first (the 3.11 lesson).
    await anyio.lowlevel.checkpoint_if_cancelled()


async def run_follower(
    loop: Callable[[httpx.AsyncClient], Awaitable[None]],
    *,
    url: str,
    task_id: str,
    turn_id: str | None,
    options: FollowOptions,
    progress: FollowProgress,
    failing: FailureStreak,
    logger: logging.Logger,
) -> FollowOutcome:
    """Run ``loop`` with a client for ``url``; return what the follower did."""
    extra = {"task_id": task_id, "turn_id": turn_id}
    progress.running, progress.stopped_at = True, None
    bound = options.max_follow_seconds
    ending = "it ended"
    try:
        async with leased_client(options.client, headers=options.headers, url=url) as leased:
            with anyio.move_on_after(math.inf if bound is None else bound) as bounded:
                try:
                    await loop(leased)
                except FollowingEnded as ended:
                    ending = "it failed after stop"
                    logger.info(
                        "stopped following task %s: %s (%s)",
                        task_id,
                        ended,
                        failure_reason(ended.__cause__ or ended),
                        extra=extra,
                    )
            if bounded.cancelled_caught:
                ending = f"it ran for max_follow_seconds={bound}"
                logger.warning(
                    "stopped following task %s: it ran for max_follow_seconds=%s",
                    task_id,
                    bound,
                    extra=extra,
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
        failing.close(ending)
    return progress.outcome()
