"""Followers broken on purpose, each the way a follower has gone or could go wrong.

Each is the library with one piece replaced (a subclass of its follower loop,
of its turn block or of its ledger's turn record, patched in for one example by
a :class:`Variant`), so that ``tests/properties/test_properties_bite.py`` can
show the properties catch each mistake.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

import anyio
import attrs

import follower._reading._follow
import follower._turns._block
import follower._turns._ledger
from follower._format._layout import JSON, EndMark
from follower._format._wire import TrajectoryBatch, TrajectoryState
from follower._reading._follow import AFTER_STOP_PAUSE_SECONDS, _Follower
from follower._storing._chunks import LiveTrajectoryChunks
from follower._storing._stored_turn import StoredTurn
from follower._turns._block import _TurnBlock
from follower._turns._ledger import EndMarkPlan, Outcome, TurnRecord

from .run import Variant

# --- the 3.11 wait_for race, with the old follower's free task -------------------------


class WaitForFollower(_Follower):
    """Waits between reads in ``asyncio.wait_for(stop.wait(), ...)``, as the old follower did.

    On Python 3.11, a cancel that arrives in the same tick as ``stop`` is set is
    lost: ``wait_for`` sees its inner wait done and returns normally.
    """

    async def _wait_or_stop(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)


class FreeTaskBlock(_TurnBlock):
    """Runs its follower as a free asyncio task, as the old follower did.

    Everything else is the library's; the only change is who cancels the
    follower: ``task.cancel()``, in the same tick as ``stop`` is set, then a wait
    for the task that trusts the cancel to land (anyio's scopes would deliver it
    again; a bare task cancel is delivered once).
    """

    _task: asyncio.Task[None] | None = None

    def _start_follower(self, task_id: str) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run_follower(task_id))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._closed = True
        try:
            if exc is None:
                await self._drain()
        except BaseException as during_drain:
            await self._stop_task()
            await self._close(during_drain)
            raise
        await self._stop_task()
        await self._close(exc)
        return False

    async def _stop_task(self) -> None:
        self._stop.set()
        if self._task is None:
            return
        self._task.cancel()  # the same tick as the stop
        with anyio.CancelScope(shield=True):
            await asyncio.wait({self._task})


WAIT_FOR = Variant(
    "waits with asyncio.wait_for, in a free task",
    patches=(
        (follower._reading._follow, "_Follower", WaitForFollower),
        (follower._turns._block, "_TurnBlock", FreeTaskBlock),
    ),
    # asyncio.wait_for and free asyncio tasks exist on asyncio only.
    backends=("asyncio",),
)


# --- retrying forever after stop --------------------------------------------------------


class RetryingFollower(_Follower):
    """After stop, retries a failed read every 0.2 s, as the old follower did: no sentinel."""

    def _gone_after_stop(self) -> bool:
        return False

    async def _wait_or_stop(self, seconds: float) -> None:
        if self.stop.is_set():
            await anyio.sleep(min(AFTER_STOP_PAUSE_SECONDS, self.poll))
        else:
            await super()._wait_or_stop(seconds)


RETRIES_AFTER_STOP = Variant(
    "retries a failed read forever after stop",
    patches=((follower._reading._follow, "_Follower", RetryingFollower),),
)


# --- draining without a deadline ---------------------------------------------------------


class UnboundedDrainBlock(_TurnBlock):
    """Lets its follower drain until it ends by itself: no ``drain_seconds``."""

    async def _drain(self) -> None:
        self._stop.set()
        if self.task_id is not None:
            await self._running.none()


DRAINS_FOREVER = Variant(
    "drains without a deadline",
    patches=((follower._turns._block, "_TurnBlock", UnboundedDrainBlock),),
)


# --- wrapping the step's exception ------------------------------------------------------


class WrappingBlock(_TurnBlock):
    """Lets the task group's exception group out, the body's exception inside it."""

    async def _exit_group(self, exc: BaseException | None) -> None:
        assert self._tg is not None
        await self._tg.__aexit__(
            type(exc) if exc else None, exc, exc.__traceback__ if exc else None
        )


WRAPS_EXCEPTION = Variant(
    "wraps the step's exception",
    patches=((follower._turns._block, "_TurnBlock", WrappingBlock),),
)


# --- the end mark before the last chunk ---------------------------------------------------


class EarlyEndChunks(LiveTrajectoryChunks):
    """Marks the turn ended as soon as the last page arrives, before storing its chunk."""

    async def __call__(self, batch: TrajectoryBatch) -> None:
        if batch.last:
            mark = EndMark(batch.state, batch.next)
            await self._put(self.keys.end, mark.encode(), JSON)
        await super().__call__(batch)


class EarlyEndBlock(_TurnBlock):
    _sink_class = EarlyEndChunks


END_BEFORE_LAST_CHUNK = Variant(
    "writes end.json before its last chunk",
    patches=((follower._turns._block, "_TurnBlock", EarlyEndBlock),),
)


# --- resuming from the first event again --------------------------------------------------


class RereadingBlock(_TurnBlock):
    """Resumes a stored turn from its first event, as if none of its chunks were stored."""

    async def _read_stored(self) -> StoredTurn:
        return attrs.evolve(await super()._read_stored(), chunks=())


REREADS_STORED_EVENTS = Variant(
    "resumes a turn from its first event again",
    patches=((follower._turns._block, "_TurnBlock", RereadingBlock),),
)


# --- an end mark on hand-off --------------------------------------------------------------


class EndOnHandOffRecord(TurnRecord):
    """Plans an end mark at its exit, handed off or not: the next attempt finds the turn ended."""

    def _end_mark(
        self, outcome: Outcome, complete: bool, last_state: TrajectoryState | None
    ) -> EndMarkPlan | None:
        said = self.handing_off, self.ledger.handing_off
        self.handing_off = self.ledger.handing_off = False  # as if no hand-off was said
        try:
            return super()._end_mark(outcome, complete, last_state)
        finally:
            self.handing_off, self.ledger.handing_off = said


ENDS_ON_HAND_OFF = Variant(
    "writes end.json though it was handed off",
    patches=((follower._turns._ledger, "TurnRecord", EndOnHandOffRecord),),
)

BROKEN = (
    WAIT_FOR,
    RETRIES_AFTER_STOP,
    DRAINS_FOREVER,
    WRAPS_EXCEPTION,
    END_BEFORE_LAST_CHUNK,
    REREADS_STORED_EVENTS,
    ENDS_ON_HAND_OFF,
)
