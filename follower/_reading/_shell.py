"""What every follower does around its loop: its lane, its bound, the sentinel, its record.

A follower's loop (a stream's, the polls') runs inside :func:`run_follower`,
which leases its client, bounds the run by ``max_follow_seconds``, returns
normally when the loop raises the post-stop sentinel (it never leaves the
library), names the task and the turn on any error that leaves, and keeps the
follower's record (``running``, ``stopped_at``) and its failure log's summary.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import anyio

from .._errors import FollowingEnded, add_context
from .._http._clients import leased_client
from .._retries import failure_reason

if TYPE_CHECKING:
    import logging
    from collections.abc import Awaitable, Callable

    import httpx

    from .._options import FollowOptions
    from .._retries import FailureStreak
    from ._follow import FollowOutcome, FollowProgress


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
