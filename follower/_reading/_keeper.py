"""A turn's follower waits on one timer for the whole loop, and its stop ends the wait.

At 5,000 followers and a 1 s poll a loop makes 5,000 waits a second. A wait made of an
anyio cancel scope around an event costs each one a scope, a timer and a cancellation
delivered to end it, at its deadline, as most waits end (``benchmarks/waits.py``).
Here a waiting follower parks on an event of its own in its loop's
:class:`Timekeeper`, a heap of the parked waits by deadline; one of the parked
followers, in turn, keeps the time: it sleeps until the earliest deadline, sets the
event of every wait due, and sleeps again. When its own wait ends it hands its turn to
another parked wait. Setting a turn's :class:`TurnStop` sets its parked wait's event.

Everything is anyio's own (an event, a sleep, a cancel scope), so cancellation is the
backend's: a parked follower that is cancelled leaves its event, and one that keeps
the time leaves its sleep. A wait that ended early (stopped, or cancelled) stays in
the heap, marked, until it comes to the top, no wait is parked, or the ended outnumber
the parked (then they are swept out together): nothing has to find it.

Only the library's own stop can end a parked wait: a caller's ``anyio.Event``, given to
``follow_trajectory``, tells nobody when it is set, so a follower of one waits as
before, in a cancel scope (``_shell.wait_or_stop``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from .._backend import running_backend
from .._loop_local import LoopLocal

if TYPE_CHECKING:
    from anyio.abc import AsyncBackend


class _Parked:
    """One parked wait: its event, whether it has ended, and whether it is to keep the time."""

    __slots__ = ("ended", "turn", "wake")

    def __init__(self, wake: anyio.Event) -> None:
        self.wake = wake
        self.ended = False  # due, stopped or cancelled: the keeper wakes it no more
        self.turn = False  # handed the keeper's turn, and not yet keeping it


class Timekeeper:
    """One event loop's parked waits, and the turn to keep their time (:func:`loop_timekeeper`).

    It lives in a ``RunVar``, whose value must not refer to its loop (anyio keys the
    loop's variables weakly by the loop): so once no wait is parked it keeps nothing,
    no heap entry, no event and no scope, and a run that has ended leaves no loop behind.
    """

    __slots__ = ("_aim", "_heap", "_keeper", "_live", "_order", "_scope", "backend")

    def __init__(self) -> None:
        # Its waits' clock, events and sleeps, without anyio's lookup each (``_backend``).
        self.backend: type[AsyncBackend] = running_backend()
        # By deadline, then the order parked: the heap compares tuples in C, never a wait.
        self._heap: list[tuple[float, int, _Parked]] = []
        self._order = itertools.count()
        self._live = 0  # waits parked now: the rest of the heap ended early
        self._keeper: _Parked | None = None  # the wait whose turn it is to keep the time
        self._scope: anyio.CancelScope | None = None  # the keeper's sleep, to re-aim or stop it
        self._aim = -math.inf  # the deadline the keeper sleeps until (-inf: not asleep yet)

    async def park(self, stop: TurnStop, seconds: float) -> None:
        """Wait ``seconds``, or until ``stop`` is set; the caller checks neither first."""
        backend = self.backend
        deadline = backend.current_time() + seconds
        parked = _Parked(backend.create_event())
        self._live += 1
        try:
            heapq.heappush(self._heap, (deadline, next(self._order), parked))
            stop._parked, stop._keeper = parked, self
            if self._keeper is None:
                self._keeper = parked
                await self._keep(parked)
                return
            if deadline < self._aim:  # sooner than the keeper sleeps until: re-aim it
                assert self._scope is not None
                self._scope.cancel()
            await parked.wake.wait()
            while parked.turn:  # woken to keep the time (an heir that ended keeps it no time)
                parked.turn = False
                parked.wake = backend.create_event()
                await self._keep(parked)
        finally:
            parked.ended = True  # a cancelled wait has not been marked yet
            stop._parked = None
            if self._keeper is parked:  # however its wait ended, its turn goes on
                self._scope, self._aim = None, -math.inf
                self._hand_over()
            self._live -= 1
            if not self._live:
                self._heap.clear()
            elif len(self._heap) > 2 * self._live + _SWEEP_SLACK:
                self._sweep()

    async def _keep(self, keeper: _Parked) -> None:
        """Keep the time until ``keeper``'s own wait ends."""
        heap, backend = self._heap, self.backend
        while not keeper.ended:
            with backend.create_cancel_scope() as self._scope:
                while not keeper.ended:
                    while heap[0][2].ended:  # ended early: nothing to wake
                        heapq.heappop(heap)
                    self._aim = heap[0][0]
                    # From the clock as it is now: serving a batch of due waits takes
                    # time, which a reading from before it would add to the next wait.
                    await _sleep_until(backend, self._aim)
                    # Never a wait ended before its deadline on the loop's clock: a
                    # caller that finds time left waits again.
                    now = backend.current_time()
                    while heap and heap[0][0] <= now:
                        due = heapq.heappop(heap)[2]
                        if not due.ended:
                            due.ended = True
                            due.wake.set()
            # Cancelled to re-aim (an earlier deadline), or by the keeper's own stop.

    def _hand_over(self) -> None:
        """The wait that kept the time has ended: wake one still parked to keep it."""
        self._keeper = None
        # A late leaf of the heap: a late deadline, so a long turn before the next hand-over.
        for _, _, parked in reversed(self._heap):
            if not parked.ended:
                self._keeper, parked.turn = parked, True
                parked.wake.set()
                return

    def _sweep(self) -> None:
        """Drop the waits that ended early, once they outnumber the parked ones.

        Turns that end while their followers wait (a stop, a cancel) leave their entries
        behind until each would have come due: with long polls and many turns ending, the
        heap would carry far more of them than live waits. Swept in place (the keeper
        holds the list) when they are more than the live ones, so each costs O(1) over time.
        The keeper's aim may now be an entry swept away: it wakes then, finds nothing
        due, and sleeps on to the new earliest deadline.
        """
        heap = self._heap
        heap[:] = [entry for entry in heap if not entry[2].ended]
        heapq.heapify(heap)

    def stop(self, parked: _Parked) -> None:
        """End the parked wait ``parked`` (its turn's stop is set), if it still waits."""
        if parked.ended:
            return
        parked.ended = True
        parked.wake.set()
        if self._keeper is parked and self._scope is not None:
            self._scope.cancel()


# Ended waits the heap may carry beyond as many as the live ones before it is swept: a
# few turns ending among few followers never pay for a sweep.
_SWEEP_SLACK = 64

# Less than any loop's clock can tell: a timer set sooner than its resolution rings at
# once (asyncio's, 1 ns), without the loop's clock moving on.
_TICK = 1e-6


async def _sleep_until(backend: type[AsyncBackend], deadline: float) -> None:
    """Sleep until ``deadline`` on the loop's clock, or a microsecond past it (past: a checkpoint).

    A loop's timer may ring a hair before its time (asyncio's, by its clock's
    resolution; a virtual clock's rounds to its own tick), and a keeper woken then finds
    nothing due. Its next sleep is at least a tick: one of ``deadline - now`` would ring
    at once, and on a virtual clock, which moves only when the loop would block, forever.
    """
    delay = deadline - backend.current_time()
    await backend.sleep(0 if delay <= 0 else max(delay, _TICK))


loop_timekeeper = LoopLocal("follower_timekeeper", Timekeeper).get
"""This event loop's timekeeper, made at its first wait."""


class TurnStop(anyio.Event):
    """A turn's stop: an event that also ends its follower's wait on the loop's timekeeper.

    Set once, by the turn's block, when the step's body has ended. The event its
    other waiters (a drain, the beats' task) wait on is made only when one does: most
    turns never need it.
    """

    __slots__ = ("_event", "_keeper", "_parked", "_set")

    def __new__(cls) -> TurnStop:
        return object.__new__(cls)

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None
        self._parked: _Parked | None = None  # the follower's parked wait, while it waits
        # Its loop's timekeeper, kept by its first park (a turn runs in one loop): the
        # loop's variable is looked up once, not each wait.
        self._keeper: Timekeeper | None = None

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        if self._event is not None:
            self._event.set()
        if self._parked is not None:
            assert self._keeper is not None
            self._keeper.stop(self._parked)

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
        """Wait ``seconds`` on the loop's timekeeper, or until this stop is set.

        A checkpoint, as any wait; a cancel pending when the wait ends goes first.
        """
        if self._set or seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        if self._parked is not None:  # another task waits already: one parks, this one not
            await wait_in_scope(self, seconds)
            return
        await (self._keeper or loop_timekeeper()).park(self, seconds)  # park keeps it
        # After a wait wakes, a pending cancel goes first (the 3.11 lesson).
        await anyio.lowlevel.checkpoint_if_cancelled()


async def wait_in_scope(stop: anyio.Event, seconds: float) -> None:
    """Wait ``seconds``, or until ``stop`` is set, in a cancel scope of its own.

    How any event is waited on that cannot park: a caller's (``follow_trajectory``'s
    ``stop``), or a turn's stop whose follower is parked already.
    """
    with anyio.move_on_after(seconds):
        await stop.wait()
    # After a wait wakes, a pending cancel goes first (the 3.11 lesson).
    await anyio.lowlevel.checkpoint_if_cancelled()
