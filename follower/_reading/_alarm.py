"""A turn's follower waits on one timer for the whole loop, and its stop ends the wait.

At 5,000 followers and a 1 s poll a loop makes 5,000 waits a second. A wait made of an
anyio cancel scope around an event costs each one a scope, a timer, its context and
the event's waiter, and a waiting follower keeps them all (``benchmarks/waits.py``:
about half of the wait is the scope and its timer). Here a waiting follower parks on
its loop's :class:`Alarm`, which keeps a heap of the parked waits by deadline and one
timer for the earliest of them; its turn's :class:`TurnStop` wakes it when set.

Only the library's own stop can end a parked wait: a caller's ``anyio.Event``, given
to ``follow_trajectory``, tells nobody when it is set, so a follower of one waits as
before, in a cancel scope (``_shell.wait_or_stop``).

Cancellation is the backend's own: on asyncio a cancel cancels the future the task
awaits; on trio the parked task's abort function lets the cancel through. A parked
wait that ended early (stopped, or cancelled) stays in the heap, marked done, until
its deadline comes round or no wait is parked: nothing has to find it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import sys
import weakref
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Awaitable


class Alarm:
    """One timer for the parked waits of one event loop (made by :func:`loop_alarm`).

    It lives in a ``RunVar``, whose value must not refer to its loop (anyio keys the
    loop's variables weakly by the loop): so once no wait is parked it keeps nothing,
    no heap entry and no timer, and a run that has ended leaves no loop behind.
    """

    __slots__ = ("_heap", "_live", "_order", "_run")

    def __init__(self, run: object) -> None:
        # The run's own token (asyncio's loop, trio's token), weakly: what says which
        # run's alarm this is, to a stop that kept it from an earlier wait.
        self._run = weakref.ref(run)
        self._heap: list[tuple[float, int, Any]] = []
        self._order = itertools.count()  # deadlines that tie never compare what is parked
        self._live = 0  # waits parked now: the rest of the heap ended early

    def park(self, stop: TurnStop, seconds: float) -> Awaitable[None]:
        """Wait ``seconds``, or until ``stop`` is set; the caller checks neither first."""
        raise NotImplementedError

    def is_current(self) -> bool:
        """Whether this is the running loop's alarm."""
        raise NotImplementedError

    def wake(self, parked: Any) -> None:
        """End the parked wait ``parked`` (what :meth:`park` gave ``stop``), if it still waits."""
        raise NotImplementedError

    def _left(self) -> None:
        """A parked wait has ended; the last one to end clears what ended early."""
        self._live -= 1
        if not self._live:
            self._heap.clear()
            self._idle()

    def _idle(self) -> None:
        """No wait is parked: drop the timer."""


class _AsyncioAlarm(Alarm):
    """Futures in a heap by deadline, and one ``loop.call_at`` for the earliest."""

    __slots__ = ("_timer", "_timer_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    async def park(self, stop: TurnStop, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._live += 1
        try:
            deadline = loop.time() + seconds
            parked = loop.create_future()
            heapq.heappush(self._heap, (deadline, next(self._order), parked))
            if deadline < self._timer_at:
                self._set_timer(loop, deadline)
            stop._parked = parked
            await parked
        finally:
            stop._parked = None
            self._left()

    def wake(self, parked: asyncio.Future[None]) -> None:
        if not parked.done():
            parked.set_result(None)

    def is_current(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._run()
        except RuntimeError:  # no asyncio loop runs here
            return False

    def _idle(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf

    def _set_timer(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(deadline, self._ring)
        self._timer_at = deadline

    def _ring(self) -> None:
        # Never a wait ended before its deadline on the loop's clock, though a loop may fire
        # a timer a little early (uvloop's are milliseconds; then it is set again, as
        # anyio's own deadlines are): a caller that finds time left waits again.
        self._timer, self._timer_at = None, math.inf
        loop = asyncio.get_running_loop()
        heap, now = self._heap, loop.time()
        while heap:
            deadline, _, parked = heap[0]
            if parked.done():  # stopped or cancelled before its deadline
                heapq.heappop(heap)
            elif deadline <= now:
                heapq.heappop(heap)
                parked.set_result(None)
            else:
                self._set_timer(loop, deadline)
                return


class _TrioParked:
    """A parked trio task, woken once: by its deadline, its stop, or a cancel."""

    __slots__ = ("done", "task")

    def __init__(self, task: Any) -> None:
        self.task = task
        self.done = False

    def abort(self, raise_cancel: Any) -> Any:
        self.done = True  # a cancel ends the wait: the deadline or stop must not wake it again
        self.task = None  # what stays in the heap until its deadline keeps no task
        return _trio.lowlevel.Abort.SUCCEEDED


# trio, imported by the first alarm of a trio run: an asyncio process never imports it.
_trio: Any = None


class _TrioAlarm(Alarm):
    """Parked tasks in a heap by deadline, and a system task asleep until the earliest."""

    __slots__ = ("_scope",)

    def __init__(self, token: object) -> None:
        global _trio
        import trio

        _trio = trio
        super().__init__(token)
        self._scope: Any = None  # the ticker's sleep, whose deadline is the earliest
        # A system task: it belongs to the run, not to any step, and ends with the run.
        trio.lowlevel.spawn_system_task(self._tick, name="follower's alarm")

    async def park(self, stop: TurnStop, seconds: float) -> None:
        lowlevel = _trio.lowlevel
        self._live += 1
        try:
            deadline = _trio.current_time() + seconds
            parked = _TrioParked(lowlevel.current_task())
            heapq.heappush(self._heap, (deadline, next(self._order), parked))
            scope = self._scope
            if scope is not None and deadline < scope.deadline:
                scope.deadline = deadline
            stop._parked = parked
            await lowlevel.wait_task_rescheduled(parked.abort)
        finally:
            stop._parked = None
            self._left()

    def wake(self, parked: _TrioParked) -> None:
        if not parked.done:
            parked.done = True
            task, parked.task = parked.task, None
            _trio.lowlevel.reschedule(task)

    def is_current(self) -> bool:
        try:
            return bool(_trio.lowlevel.current_trio_token() is self._run())
        except RuntimeError:  # no trio run here
            return False

    def _idle(self) -> None:
        if self._scope is not None:
            self._scope.deadline = math.inf

    async def _tick(self) -> None:
        trio = _trio
        try:
            while True:
                with trio.CancelScope(deadline=self._earliest()) as self._scope:
                    await trio.sleep_forever()
                self._scope = None
                heap, now = self._heap, trio.current_time()
                while heap and heap[0][0] <= now:
                    self.wake(heapq.heappop(heap)[2])
        finally:
            self._scope = None  # the run ends: its scope is no alarm's to keep

    def _earliest(self) -> float:
        heap = self._heap
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf


_run_alarm: anyio.lowlevel.RunVar[Alarm] = anyio.lowlevel.RunVar("follower_alarm")


def loop_alarm() -> Alarm:
    """This event loop's alarm, made at its first wait."""
    try:
        return _run_alarm.get()
    except LookupError:
        # What anyio keys the run's variables by: the asyncio loop or trio's token (an
        # asyncio task in a loop that hosts a trio guest run is asyncio's, as anyio says).
        native: Any = anyio.lowlevel.current_token().native_token
        trio = sys.modules.get("trio")  # never imported: not trio's run
        alarm: Alarm
        if trio is not None and isinstance(native, trio.lowlevel.TrioToken):
            alarm = _TrioAlarm(native)
        else:
            alarm = _AsyncioAlarm(native)
        _run_alarm.set(alarm)
        return alarm


class TurnStop(anyio.Event):
    """A turn's stop: an event that also ends its follower's wait on the loop's alarm.

    Set once, by the turn's block, when the step's body has ended. The event its
    other waiters (a drain, the beats' task) wait on is made only when one does: most
    turns never need it.
    """

    __slots__ = ("_alarm", "_event", "_parked", "_set")

    def __new__(cls) -> TurnStop:
        return object.__new__(cls)

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None
        self._alarm: Alarm | None = None
        self._parked: Any = None  # the follower's parked wait, while it waits

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        if self._event is not None:
            self._event.set()
        if self._parked is not None:
            assert self._alarm is not None
            self._alarm.wake(self._parked)

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

    def statistics(self) -> anyio.EventStatistics:
        waiting = 0 if self._event is None else self._event.statistics().tasks_waiting
        return anyio.EventStatistics(tasks_waiting=waiting + (self._parked is not None))

    async def wait_or_set(self, seconds: float) -> None:
        """Wait ``seconds`` on the loop's alarm, or until this stop is set.

        A checkpoint, as any wait; a cancel pending when the wait ends goes first.
        """
        if self._set or seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        if self._parked is not None:  # another task waits already: one parks, this one not
            with anyio.move_on_after(seconds):
                await self.wait()
        else:
            alarm = self._alarm
            if alarm is None or not alarm.is_current():  # a stop made in another run
                alarm = self._alarm = loop_alarm()
            await alarm.park(self, seconds)
        # After a wait wakes, a pending cancel goes first (the 3.11 lesson).
        await anyio.lowlevel.checkpoint_if_cancelled()
