"""One attempt of a step run as a Temporal activity: its turns, heartbeats and the end-mark rule.

The step runs under :func:`~follower.temporal.run_cancel_safe`, so the
activity's cancel ends it through anyio, cleanup included. Heartbeats run in
an asyncio task beside it, owned by the attempt's block: cancelled and awaited
before the activity returns. Each is a sync call that queues the details, so a
heartbeat never waits on the step, nor the step on a heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, final

import attrs
from temporalio import activity

from .._errors import TurnStateError
from .._format._layout import TurnKeys
from .._public import NoPublicConstructor
from .._telemetry import ATTEMPT_ATTRIBUTE, previous_attempt_link
from .._turns._endings import is_cancellation
from .._turns._step import LiveTurns
from ._bridge import STEP_CLEANUP_SECONDS, run_cancel_safe
from ._rule import cancel_ends_for_good, failure_ends_for_good
from ._run import StepRun, claim_turn

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

    from .._format._a2a import TaskSource
    from .._stores import ObjectStore
    from .._telemetry import SpanLink
    from .._turns._block import LiveTurn
    from .._turns._chain import TurnProgress

logger = logging.getLogger("follower.temporal")

T = TypeVar("T")

DEFAULT_HEARTBEAT_SECONDS = 10.0
MIN_HEARTBEAT_SECONDS = 0.05
MAX_HEARTBEAT_TURNS = 100
"""A heartbeat lists at most this many turns (the latest unfinished); it sums the rest."""
HEARTBEAT_STOP_SECONDS = 1.0
"""How long a step's end waits for its cancelled heartbeat task to end (a tick, as a rule)."""


class _TurnBlock(Protocol):
    """What ``LiveTurns.following()`` hands back: the turn's block, which knows its progress.

    Asked of the block itself, one turn's progress costs the same at any turn of a
    step; ``LiveTurns.progress()`` walks every turn opened so far.
    """

    def turn_progress(self) -> TurnProgress: ...


@attrs.define
class _Sums:
    """How many turns, their events stored, and how many are complete."""

    turns: int = 0
    events_stored: int = 0
    complete: int = 0

    def add(self, progress: TurnProgress) -> None:
        self.turns += 1
        self.events_stored += progress.events_stored
        self.complete += progress.complete

    def plus(self, more: Iterable[TurnProgress]) -> _Sums:
        sums = attrs.evolve(self)
        for progress in more:
            sums.add(progress)
        return sums

    def as_details(self) -> dict[str, int]:
        return {"turns": self.turns, "events_stored": self.events_stored, "complete": self.complete}


@final
@attrs.define(eq=False)
class StepAttempt(metaclass=NoPublicConstructor):
    """This attempt of the step: the turns it follows, and whether it hands them off.

    Made by :func:`run_activity_step`, never by users. :meth:`live_turns` makes
    the step's :class:`~follower.LiveTurns`, always with ``resume=True``, so a
    retried attempt continues what an earlier one stored.
    """

    turns: LiveTurns | None = attrs.field(default=None, init=False)
    handing_off: bool = attrs.field(default=False, init=False)
    # Turns opened through following() and not ended for good, in order: each one's
    # progress, asked of its block. A turn that ended for good is only summed.
    _unfinished: dict[str, Callable[[], TurnProgress]] = attrs.field(factory=dict, init=False)
    _ended: _Sums = attrs.field(factory=_Sums, init=False)
    _exited: TurnProgress | None = attrs.field(default=None, init=False)
    # The step span's ids (W3C hex), once it records: the next attempt links to it.
    _span: dict[str, str] | None = attrs.field(default=None, init=False)

    @asynccontextmanager
    async def live_turns(
        self, endpoint: str | TaskSource, store: ObjectStore, prefix_key: str, **options: Any
    ) -> AsyncIterator[LiveTurns]:
        """The step's :class:`~follower.LiveTurns`, entered; heartbeats report their progress.

        ``options`` are LiveTurns' own; ``resume`` is always true. A failure
        leaving the block is judged by the end-mark rule before the turns' exit
        marks (or hands off) the step's last turn.

        With a tracer provider, the step's span has the attempt's number
        (``follower.attempt``), and a retried attempt's a link to the previous
        attempt's step span (from its last heartbeat); the heartbeats carry this
        span's ids for the next attempt, from a beat sent as it begins.
        """
        if self.turns is not None:
            raise TurnStateError("an attempt follows one LiveTurns")
        self.turns = LiveTurns(endpoint, store, prefix_key, resume=True, **options)
        previous = self._previous_step_span_link()
        self.turns._trace_step(
            {ATTEMPT_ATTRIBUTE: activity.info().attempt}, (previous,) if previous else ()
        )
        if self.handing_off:
            self.turns.hand_off()
        async with self.turns as turns:
            self._span = turns._span_context()
            if self._span is not None:
                # At once, not at the next beat: an attempt that fails before it would
                # leave the next one nothing to link to.
                _heartbeat(self)
            try:
                yield turns
            except BaseException as exc:
                self.hand_off_unless_final(exc)
                raise

    @asynccontextmanager
    async def following(self, turn_id: str) -> AsyncIterator[LiveTurn]:
        """The block of the next turn (``LiveTurns.following``), under the end-mark rule.

        The turn is first claimed for this workflow run: a turn another run
        stored is refused (``follower.temporal._run``). A failure leaving the
        block is judged before the block writes its end mark: one that will be
        retried hands the turn off instead.
        """
        turns = self.turns
        if turns is None:
            raise TurnStateError(
                f"turn {turn_id!r}: following() needs live_turns() entered first", turn_id=turn_id
            )
        info = activity.info()
        keys = TurnKeys(turns.prefix_key, turn_id)
        await claim_turn(turns.store, keys, StepRun.of(info), retried=info.attempt > 1)
        block = turns.following(turn_id)
        progress = cast("_TurnBlock", block).turn_progress
        self._unfinished[turn_id] = progress
        try:
            async with block as turn:
                try:
                    yield turn
                except BaseException as exc:
                    self.hand_off_unless_final(exc)
                    raise
        finally:
            self._exited = progress()
            if not self.handing_off:
                # Ended for good: its marks are stored, so a later attempt needs nothing
                # of it from the heartbeats.
                del self._unfinished[turn_id]
                self._ended.add(self._exited)

    def exited_progress(self, turn_id: str) -> TurnProgress:
        """Where ``turn_id`` stood when its block (the last to exit) exited."""
        exited = self._exited
        if exited is None or exited.turn_id != turn_id:
            raise TurnStateError(f"turn {turn_id!r} is not the last to exit", turn_id=turn_id)
        return exited

    def hand_off(self) -> None:
        """Leave every turn for the next attempt: no end marks, no null link."""
        self.handing_off = True
        if self.turns is not None:
            self.turns.hand_off()

    def hand_off_unless_final(self, exc: BaseException) -> bool:
        """Apply the end-mark rule to ``exc``, ending the attempt; True when it hands off.

        :meth:`following` and :meth:`live_turns` call it; a step that opens
        its blocks itself calls it inside each block, before the exception
        leaves it (the block writes its end mark as it exits). A cancel was
        judged when it arrived.
        """
        if self.handing_off or is_cancellation(exc):
            return self.handing_off
        try:
            ends = failure_ends_for_good(exc)
        except Exception:
            # Undecided, the turn is left for a later attempt: never claim it ended.
            logger.exception("deciding whether the failure is retried failed; handing off")
            ends = False
        if not ends:
            self.hand_off()
        return self.handing_off

    def previous_task_ids(self) -> dict[str, str]:
        """The task of each turn, as the previous attempt's last heartbeat reported them."""
        found: dict[str, str] = {}
        for details in activity.info().heartbeat_details:
            if isinstance(details, dict):
                for turn in details.get("turns", ()):
                    if isinstance(turn, dict) and turn.get("task_id"):
                        found[str(turn["turn_id"])] = str(turn["task_id"])
        return found

    def _previous_step_span_link(self) -> SpanLink | None:
        """The link to the previous attempt's step span, from its last heartbeat; or None.

        None on a first attempt, and for details that carry no span (no tracer
        provider then, or a version that sent none).
        """
        for details in reversed(activity.info().heartbeat_details):
            if isinstance(details, dict):
                link = previous_attempt_link(details.get("span"))
                if link is not None:
                    return link
        return None

    def heartbeat_details(self) -> dict[str, Any]:
        """What a heartbeat carries, of a size bounded at any count of turns.

        ``turns``: the latest unfinished turns (at most :data:`MAX_HEARTBEAT_TURNS`),
        each with its id, task id, events stored and completeness; a retried
        attempt takes their task ids (:meth:`previous_task_ids`). ``others``:
        how many other turns there are, their events stored, and how many are
        complete. A turn ended for good is among the others: its ``task.json``
        and end mark are in the store. ``span``, once the step's span records (a
        tracer provider is configured): its ``trace_id``, ``span_id`` and
        ``trace_flags`` as W3C hex strings, which the next attempt's step span
        links to.
        """
        details = self._progress_details()
        if self._span is not None:
            details["span"] = dict(self._span)
        return details

    def _progress_details(self) -> dict[str, Any]:
        if self.turns is None:
            return {"turns": [], "others": _Sums().as_details()}
        if self._unfinished or self._ended.turns:
            # Only the unfinished turns are asked: in a step that runs its turns in
            # order, the one running now and any handed off.
            asks = list(self._unfinished.values())
            cut = max(0, len(asks) - MAX_HEARTBEAT_TURNS)
            listed = [ask() for ask in asks[cut:]]
            others = self._ended.plus(ask() for ask in asks[:cut])
        else:
            # The step opened its blocks itself (not through following()): every turn is
            # asked of LiveTurns, once a beat; the complete ones need nothing from a beat.
            every = self.turns.progress()
            unfinished = [p for p in every if not p.complete]
            listed = unfinished[-MAX_HEARTBEAT_TURNS:]
            named = {p.turn_id for p in listed}
            others = _Sums().plus(p for p in every if p.turn_id not in named)
        return {"turns": [_details(p) for p in listed], "others": others.as_details()}


def _details(progress: TurnProgress) -> dict[str, Any]:
    return {
        "turn_id": progress.turn_id,
        "task_id": progress.task_id,
        "events_stored": progress.events_stored,
        "complete": progress.complete,
    }


def heartbeat_interval_seconds_for(given: float | None = None) -> float:
    """``given``, or a third of the activity's heartbeat timeout, or 10 s without one."""
    if given is None:
        timeout = activity.info().heartbeat_timeout
        given = timeout.total_seconds() / 3 if timeout else DEFAULT_HEARTBEAT_SECONDS
    return max(given, MIN_HEARTBEAT_SECONDS)


async def run_activity_step(
    step: Callable[[StepAttempt], Awaitable[T]],
    *,
    heartbeat_interval_seconds: float | None = None,
    cleanup_seconds: float = STEP_CLEANUP_SECONDS,
) -> T:
    """Run one attempt of a step inside an async activity; returns what ``step`` returns.

    ``step`` gets the :class:`StepAttempt`; it makes its turns with
    :meth:`StepAttempt.live_turns` and enters them. The activity's cancel
    cancels the step's anyio scope and waits for its cleanup before it comes
    out; heartbeats carry the turns' progress at a bounded rate; and the
    end-mark rule decides whether the turns end for good or are handed off to
    the next attempt (see ``follower.temporal._rule``).
    """
    attempt = StepAttempt._create()
    interval = heartbeat_interval_seconds_for(heartbeat_interval_seconds)

    def on_cancel() -> None:
        if not cancel_ends_for_good():
            attempt.hand_off()

    async def run() -> T:
        return await step(attempt)

    async with _heartbeating(attempt, interval):
        return await run_cancel_safe(run, on_cancel=on_cancel, cleanup_seconds=cleanup_seconds)


@asynccontextmanager
async def _heartbeating(attempt: StepAttempt, interval: float) -> AsyncIterator[None]:
    """Heartbeats in a task beside the block, for as long as it runs: ended before it exits.

    The block's outcome comes out once the beats have stopped; a cancel that
    arrives while they stop comes out after them, unless the block raised.
    """
    beats = asyncio.get_running_loop().create_task(
        _beat(attempt, interval), name="follower heartbeats"
    )
    try:
        yield
    except BaseException:
        await _stopped(beats)  # the block's own exception goes on, as run_cancel_safe's
        raise
    cancel = await _stopped(beats)
    if cancel is not None:
        raise cancel


async def _stopped(beats: asyncio.Task[None]) -> asyncio.CancelledError | None:
    """Cancel the beats and wait for them to end, within a bound; a cancel of ours meanwhile."""
    beats.cancel()
    cancel: asyncio.CancelledError | None = None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HEARTBEAT_STOP_SECONDS
    while not beats.done() and loop.time() < deadline:
        try:
            await asyncio.wait([beats], timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError as exc:
            cancel = exc
    if not beats.done():
        logger.error("the heartbeats did not stop within %s s", HEARTBEAT_STOP_SECONDS)
    return cancel


async def _beat(attempt: StepAttempt, interval: float) -> None:
    while True:
        _heartbeat(attempt)
        await asyncio.sleep(interval)


def _heartbeat(attempt: StepAttempt) -> None:
    try:
        activity.heartbeat(attempt.heartbeat_details())
    except Exception:
        logger.exception("heartbeat failed")
