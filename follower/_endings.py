"""How a turn's block ends: cancels and Ctrl-C told apart from failures, and cleanup writes.

A cleanup write runs after the body, shielded by its caller; each is bounded
here, and logged, never raised, so that it cannot replace the step's outcome.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

logger = logging.getLogger("follower")

CLEANUP_WRITE_SECONDS = 5.0
CLEANUP_SECONDS = 10.0


def is_cancellation(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the backend's cancel (or a group of nothing else)."""
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        return all(is_cancellation(e) for e in exc.exceptions)
    return isinstance(exc, cancelled)


def is_stopped_from_outside(exc: BaseException | None) -> bool:
    """A cancel, or Ctrl-C: the step was stopped, it did not fail."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_stopped_from_outside(e) for e in exc.exceptions)
    return is_cancellation(exc) or isinstance(exc, KeyboardInterrupt)


async def bounded_cleanup(what: str, write: Callable[[], Awaitable[None]]) -> bool:
    """Run one cleanup write within its bound; log, never raise, if it fails."""
    with anyio.move_on_after(CLEANUP_WRITE_SECONDS) as scope:
        try:
            await write()
        except Exception:
            logger.exception("%s failed", what)
            return False
        return True
    if scope.cancelled_caught:
        logger.error("%s did not finish within %s s", what, CLEANUP_WRITE_SECONDS)
    return False


def leaves(exc: BaseException | None) -> list[BaseException]:
    if exc is None:
        return []
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]
