"""A one-shot wake-up that one waiting follower is parked on: the least each backend needs.

A follower waits once a read, so at 5,000 followers and a 1 s poll a loop makes 5,000
waits a second, each alive for an interval. What a wait allocates outlives the
collector's young generations and is promoted to the oldest, and every so many
promotions a full pass walks every object of the process (docs/benchmarks.md). An
``anyio.Event`` is three objects (anyio's event, the backend's event, its queue of
waiters), and waiting on one two coroutines more. A parked wait needs none of that: it
is woken once, by the loop's timekeeper or its turn's stop, and only its own task waits
on it. So on asyncio the wake-up is a future, awaited as it is; on trio, the task itself,
rescheduled. Either way a cancel is the backend's own: the awaiting task is cancelled
as it would be in any wait, and a wake-up set after that does nothing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from .._backend import running_asyncio_loop

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

# trio's low-level API, imported by the first trio loop that makes a wake-up: an
# asyncio process never imports trio.
_trio_lowlevel: Any = None


class Wakeup(Protocol):
    """Awaited once, by one task; ``set`` ends the wait (before it began, too)."""

    def set(self) -> None: ...

    def __await__(self) -> Generator[Any, None, None]: ...


def wakeup_factory() -> Callable[[], Wakeup]:
    """How this thread's running loop makes a wake-up (asyncio's, else trio's)."""
    global _trio_lowlevel
    if running_asyncio_loop() is not None:
        # Made without naming its loop (a future finds the running one): the timekeeper
        # that keeps this factory must not refer to its loop (``_keeper.Timekeeper``).
        return _FutureWakeup
    import trio.lowlevel

    _trio_lowlevel = trio.lowlevel
    return _TrioWakeup


class _FutureWakeup(asyncio.Future[None]):
    """asyncio's: a future, awaited as any is, set once."""

    def set(self) -> None:
        if not self.done():  # a waiter cancelled cancels its future
            self.set_result(None)


class _TrioWakeup:
    """trio's: the waiting task, rescheduled by ``set``."""

    __slots__ = ("_set", "_task")

    def __init__(self) -> None:
        self._set = False
        self._task: Any = None  # the waiting task, while it waits

    def set(self) -> None:
        self._set = True
        task, self._task = self._task, None
        if task is not None:
            _trio_lowlevel.reschedule(task)

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()

    async def _wait(self) -> None:
        if self._set:
            return
        self._task = _trio_lowlevel.current_task()

        def abort(raise_cancel: Any) -> Any:
            self._task = None  # cancelled: a set after this reschedules nothing
            return _trio_lowlevel.Abort.SUCCEEDED

        await _trio_lowlevel.wait_task_rescheduled(abort)
