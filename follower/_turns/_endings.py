"""How a turn's block ends: its task group unwrapped, cancels and Ctrl-C told apart, cleanup.

:func:`exit_unwrapped` takes the group apart so that the body's exception
comes out as itself; :func:`outcome_of` tells the ledger how the body ended. A
cleanup write runs after the body; each is bounded here, and logged, never
raised, so that it cannot replace the step's outcome. A block's cleanup as a
whole runs in :func:`run_cleanup`, which a native asyncio cancel cannot cut short.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from ._ledger import Outcome

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

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


def outcome_of(exc: BaseException | None) -> Outcome:
    """How a body or a step ended, for its ledger: returned, raised, or stopped from outside."""
    if exc is None:
        return Outcome.RETURNED
    return Outcome.STOPPED if is_stopped_from_outside(exc) else Outcome.RAISED


async def bounded_cleanup(
    what: str, write: Callable[[], Awaitable[None]], *, extra: Mapping[str, object] | None = None
) -> bool:
    """Run one cleanup write within its bound; log, never raise, if it fails.

    Whatever keeps the write from landing is logged, a cancel or Ctrl-C that
    reaches it too (then let go): a mark is never missing without a record.
    ``extra`` names the turn and task, as the library's other records do.
    """
    with anyio.move_on_after(CLEANUP_WRITE_SECONDS) as scope:
        try:
            await write()
        except Exception:
            logger.exception("%s failed", what, extra=extra)
            return False
        except BaseException as exc:
            if not scope.cancel_called:  # not its own bound: that one is said below
                logger.error(  # noqa: TRY400 (a cancel's traceback says nothing)
                    "%s was not written: %s cut it short", what, type(exc).__name__, extra=extra
                )
            raise
        return True
    if scope.cancelled_caught:
        logger.error("%s did not finish within %s s", what, CLEANUP_WRITE_SECONDS, extra=extra)
    return False


async def run_cleanup(
    cleanup: Callable[[], Awaitable[None]], outcome: BaseException | None
) -> None:
    """Run a block's cleanup to its end (within :data:`CLEANUP_SECONDS`), whatever cancel lands.

    anyio's shield holds off anyio's cancels, not a native asyncio one (an
    ``asyncio.timeout``, ``wait_for``, ``task.cancel()``, a ``TaskGroup``
    cancelling its tasks): arriving at a shielded write, it aborts the write.
    So the cleanup runs, shielded, in a task of its own, which no native
    cancel reaches; the task group that waits for it takes the cancel in and
    raises it once the cleanup is done (anyio's asyncio task group does;
    temporal/_bridge.py is the same idea around a whole step).

    A native cancel that came meanwhile comes out if the step had ended well
    (``outcome`` None); after the step's own exception or cancel, that goes on
    as itself. An anyio cancel is left to land where it would have without the
    task (at the caller's next checkpoint). Ctrl-C in the cleanup's task (trio
    raises it where it runs) comes out as itself, not in a group.
    """

    async def sheltered() -> None:
        with anyio.move_on_after(CLEANUP_SECONDS, shield=True):
            await cleanup()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sheltered, name="follower cleanup")
    except BaseExceptionGroup as group:
        interrupts = [e for e in leaves(group) if isinstance(e, KeyboardInterrupt)]
        if interrupts and all(is_stopped_from_outside(e) for e in leaves(group)):
            raise interrupts[0] from None
        raise
    except anyio.get_cancelled_exc_class():
        # anyio's cancel is delivered again at the caller's next checkpoint, outside
        # the block, as it was before the cleanup; a native one only once: now.
        if outcome is None and anyio.current_effective_deadline() != -math.inf:
            raise
        # Or the step raised or was cancelled already: its own outcome goes on, as itself.


async def exit_unwrapped(tg: anyio.abc.TaskGroup, exc: BaseException | None) -> None:
    """Exit a turn's task group after ``exc``; unwrap exactly the body's exception and cancels.

    ``exc`` is the body's exception, None if it returned. Unwrapped, the body's
    own exception goes on as itself (its traceback intact, once the caller's
    ``__aexit__`` returns False); anything else is a bug, never hidden.
    """
    cancelled = anyio.get_cancelled_exc_class()
    try:
        await tg.__aexit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
    except BaseExceptionGroup as group:
        # Followers never raise into the group, so it can only hold the body's
        # exception and cancels. Anything else is a bug: never hide it. (Compare
        # leaves: a backend may rebuild the body's own group around them.)
        # Ctrl-C is delivered on trio inside whichever task runs: a follower's too.
        body_leaves = {id(leaf) for leaf in leaves(exc)}
        group_leaves = leaves(group)
        if not all(
            id(leaf) in body_leaves or isinstance(leaf, cancelled | KeyboardInterrupt)
            for leaf in group_leaves
        ):
            raise
        for leaf in group_leaves:
            if isinstance(leaf, KeyboardInterrupt) and id(leaf) not in body_leaves:
                raise leaf from None
        if exc is None:
            raise group_leaves[0] from None
    except BaseException as raised:
        # A cancel while the group exits does not replace the body's own exception
        # or cancel (a native asyncio one may land here, after the body raised).
        if raised is not exc and not (isinstance(raised, cancelled) and exc is not None):
            raise


def leaves(exc: BaseException | None) -> list[BaseException]:
    if exc is None:
        return []
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]
