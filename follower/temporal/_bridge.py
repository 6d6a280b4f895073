"""The step in a task of its own: a native asyncio cancel becomes an anyio cancel of its scope.

anyio's shields do not hold off a native ``task.cancel()`` (Temporal's activity
cancel, an ``asyncio.timeout``): one arriving while a turn writes its end mark
aborts the write. So the step runs in its own asyncio task, which no native
cancel reaches. A cancel of the caller's task cancels the step's anyio scope
instead, and the caller waits, absorbing further cancels, until the step has
finished its cleanup (within a bound), then re-raises the cancel.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, TypeVar

import anyio

from .._a2a._client import CANCEL_TASK_SECONDS
from .._turns._endings import CLEANUP_SECONDS, CLEANUP_WRITE_SECONDS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

logger = logging.getLogger("follower.temporal")

T = TypeVar("T")

# A cancelled step cancels the agent's task, lets its turn's link write finish, ends
# its turn's block and marks the step's end, each within its own bound; this is
# their sum, with a margin for the scheduling between them.
STEP_CLEANUP_SECONDS = (
    CANCEL_TASK_SECONDS + CLEANUP_WRITE_SECONDS + 2 * CLEANUP_SECONDS + CLEANUP_WRITE_SECONDS
)
# After the bound, the step is cancelled natively; this long for it to go.
_NATIVE_CANCEL_SECONDS = 1.0


async def run_cancel_safe(
    step: Callable[[], Awaitable[T]],
    *,
    on_cancel: Callable[[], object] | None = None,
    cleanup_seconds: float = STEP_CLEANUP_SECONDS,
) -> T:
    """Run ``step`` so that a native cancel of the caller lets its cleanup complete.

    ``step`` runs in its own asyncio task, inside an anyio cancel scope. When
    the caller is cancelled natively, ``on_cancel`` is called (to decide, say,
    that the step hands off), the step's scope is cancelled, and the caller
    waits for the step to finish, however many more cancels arrive, for at most
    ``cleanup_seconds``; then the cancel comes out. A step that overruns the
    bound is logged and cancelled natively. A step that raises its own exception
    on its way out raises it, as itself, in place of the cancel. asyncio only:
    the caller's loop is asyncio's (Temporal's worker).
    """
    scope = anyio.CancelScope()

    async def in_scope() -> T:
        with scope:
            return await step()
        # Only the caller cancels this scope, and it re-raises its own cancel.
        raise asyncio.CancelledError

    loop = asyncio.get_running_loop()
    task = loop.create_task(in_scope(), name="follower step")
    cancel: asyncio.CancelledError | None = None
    deadline: float | None = None
    while not task.done():
        timeout = None if deadline is None else max(0.0, deadline - loop.time())
        try:
            await asyncio.wait([task], timeout=timeout)
        except asyncio.CancelledError as exc:
            if cancel is None:
                cancel = exc
                deadline = loop.time() + cleanup_seconds
                try:
                    if on_cancel is not None:
                        on_cancel()
                except Exception:
                    logger.exception("deciding how the cancelled step ends failed")
                finally:
                    scope.cancel()
            continue
        if not task.done() and deadline is not None and loop.time() >= deadline:
            logger.error(
                "the step did not finish its cleanup within %s s of its cancel; "
                "cancelling it natively: its cleanup may not have completed",
                cleanup_seconds,
            )
            task.cancel()
            await _wait_briefly(task)
            break
    if cancel is not None:
        failure = task.exception() if task.done() and not task.cancelled() else None
        if failure is not None and not isinstance(failure, asyncio.CancelledError):
            # The step's own exception is its outcome, as the turn's block keeps it:
            # never replaced by the cancel that led to it.
            raise failure
        raise cancel
    return task.result()


async def _wait_briefly(task: asyncio.Task[T]) -> None:
    """Wait a moment for a natively cancelled step; further cancels do not cut it short."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _NATIVE_CANCEL_SECONDS
    while not task.done() and loop.time() < deadline:
        try:
            await asyncio.wait([task], timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError:
            continue
    if not task.done():
        logger.error(
            "the step is still running %s s after its native cancel", _NATIVE_CANCEL_SECONDS
        )
