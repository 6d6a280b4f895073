"""One turn of a step: the task group that owns its follower, and its stored marks.

This is the one module that owns tasks. A turn's block opens a task group; its
follower runs in it and never raises into it; the block's exit drains (the body
returned) or cancels at once (raised or cancelled), then carries out the writes
its ledger (``_ledger.TurnRecord``) plans, shielded and bounded, so that no
outcome of the step is replaced and no follower outlives the block. Whose turn
it is, its links, hand-off and what the end mark says are the ledger's to
decide; the block only does what it is told.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from .._errors import AgentError, ClientClosedError, StoreError
from .._format._layout import TurnKeys
from .._format._wire import TrajectoryState
from .._public import NoPublicConstructor
from .._reading._keeper import TurnStop
from .._reading._record import FollowProgress
from .._reading._ways import FOLLOWERS
from .._retries import failure_reason
from .._statistics import LiveTurnStatistics
from .._storing._chunks import LiveTrajectoryChunks, write_next_turn
from .._storing._heartbeat import Heartbeat
from .._storing._stored_turn import StoredTurn, read_stored_turn
from .._telemetry import (
    AGENT_URL_ATTRIBUTE,
    BYTES_ATTRIBUTE,
    COMPLETE_ATTRIBUTE,
    EVENTS_ATTRIBUTE,
    OFF,
    OPERATION_ATTRIBUTE,
    TASK_ID_ATTRIBUTE,
    TURN_ID_ATTRIBUTE,
    TURN_SPAN,
    SpanScope,
    Telemetry,
    agent_url,
    telemetry_for,
)
from ._beats import TurnBeats
from ._chain import TurnProgress
from ._endings import bounded_cleanup, exit_unwrapped, outcome_of, run_cleanup

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from .._format._a2a import TaskSource
    from .._options import FollowOptions
    from .._stores import ObjectStore
    from ._ledger import StepLedger, TurnExit, TurnRecord

logger = logging.getLogger("follower.turns")

# Entering a turn reads what the store holds of it (to refuse or resume it).
STORED_TURN_READ_SECONDS = 10.0


@final
@attrs.define(eq=False, repr=False)
class LiveTurn(metaclass=NoPublicConstructor):
    """One turn of a step, yielded by :func:`following_live_trajectory`.

    Call :meth:`follow` once the task exists, and :meth:`ended` with the state
    the task ended in. Only the library makes one.
    """

    _block: _TurnBlock

    def __repr__(self) -> str:  # never the endpoint, nor the options' headers
        return f"<LiveTurn turn_id={self.turn_id!r} task_id={self.task_id!r}>"

    @property
    def turn_id(self) -> str:
        return self._block.turn_id

    @property
    def task_id(self) -> str | None:
        """The task this turn follows, once :meth:`follow` was called."""
        return self._block.task_id

    def follow(self, task_id: str) -> None:
        """Start following ``task_id``'s live trajectory in the turn's task group.

        One task per turn: a second call, or a call after the block ended,
        raises :class:`~follower.TurnStateError`.
        """
        self._block.follow(task_id)

    def ended(self, state: str | TrajectoryState) -> None:
        """Report the A2A state the task ended in (``completed``, ``canceled``, ...)."""
        self._block.record.ended(TrajectoryState.from_task_state(state))

    def hand_off(self) -> None:
        """Leave the turn for a later attempt: its exit writes no end mark.

        For a step that stops without ending the turn for good (a worker shutting
        down, a failure that will be retried). What is stored stays; the next
        attempt continues it with ``resume=True``.
        """
        self._block.record.hand_off()

    def statistics(self) -> LiveTurnStatistics:
        """What the turn's follower and sink have done so far; cheap, no I/O.

        A frozen snapshot, as trio's ``statistics()`` are: reads, failed reads,
        pool waits, what was stored, whether the follower runs, its lag behind
        the agent, and whether the last page was read.
        """
        return self._block.statistics()


@attrs.define(eq=False, repr=False)
class _TurnBlock:
    """The async context manager behind :func:`following_live_trajectory`.

    It owns the task group, the drain, the exit group's unwrapping, and the
    writes its record plans; every decision is the record's.
    """

    _sink_class = LiveTrajectoryChunks

    source: TaskSource
    store: ObjectStore
    keys: TurnKeys
    _options: FollowOptions = attrs.field(kw_only=True)
    _ledger: StepLedger = attrs.field(kw_only=True)
    _resume: bool = attrs.field(default=False, kw_only=True)
    record: TurnRecord = attrs.field(init=False)
    progress: FollowProgress = attrs.field(factory=FollowProgress, init=False)
    _sink: LiveTrajectoryChunks | None = attrs.field(default=None, init=False)
    _beats: TurnBeats | None = attrs.field(default=None, init=False)
    _stop: TurnStop = attrs.field(factory=TurnStop, init=False)
    # The follower and the beats' task (if it runs), which a drain waits for.
    _running: _Running = attrs.field(factory=lambda: _Running(), init=False)
    _tg: anyio.abc.TaskGroup | None = attrs.field(default=None, init=False)
    _telemetry: Telemetry = attrs.field(default=OFF, init=False)
    _span: SpanScope | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.record = self._ledger.open_turn(self.keys, resume=self._resume)

    @property
    def turn_id(self) -> str:
        return self.keys.turn_id

    @property
    def task_id(self) -> str | None:
        return self.record.task_id

    @property
    def endpoint(self) -> str:
        """Where the task is read: the cursor read's endpoint, or the agent's JSON-RPC URL."""
        return self.source.url

    # --- the body's side -------------------------------------------------------------

    def follow(self, task_id: str) -> None:
        plan = self.record.follow(task_id)
        # A new turn's first write says whose it is; a resumed one continues.
        self._sink = self._sink_class(
            self.store,
            self.keys.prefix_key,
            self.turn_id,
            task_id=task_id if plan.marks_task else None,
            endpoint=self.endpoint,
            stored_next=plan.after,
            format=plan.format,
            heartbeat_seconds=self._options.writer_heartbeat_seconds,
        )
        if plan.starts_follower:
            heartbeat = Heartbeat(self.store, self.keys, self._options.writer_heartbeat_seconds)
            self._beats = TurnBeats(heartbeat, self._start_beats)
            self._running.started()  # the follower
            self._start_follower(task_id)
        if plan.links_from is not None:
            assert self._tg is not None
            self._tg.start_soon(self._write_link, name=f"link {plan.links_from} -> {self.turn_id}")

    @property
    def running(self) -> bool:
        """Whether the turn's follower runs now."""
        return self.progress.running

    def turn_progress(self) -> TurnProgress:
        return turn_progress(self.record, self.progress, self._sink)

    def statistics(self, now: float | None = None) -> LiveTurnStatistics:
        """A snapshot from the follower's own record and the sink's counters; sync, no I/O."""
        return turn_statistics(self.record, self.progress, self._sink, now)

    def _start_follower(self, task_id: str) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._run_follower, task_id, name=f"follower {self.turn_id}")

    async def _run_follower(self, task_id: str) -> None:
        sink, beats = self._sink, self._beats
        assert sink is not None
        assert beats is not None
        # The follower's span (a child of the turn's: this task's context is a copy of
        # the block's), its record observed and its counts metered while it runs.
        traced = self._telemetry.following(
            via=str(self.source.via),
            task_id=task_id,
            turn_id=self.turn_id,
            url=self.endpoint,
            progress=self.progress,
            statistics=self.statistics,
        )
        try:
            with traced as span:
                try:
                    # Whose turn it is, and that its writer beats, at once: a reader of a
                    # task that stays silent must know what to judge its writer by.
                    await sink.store_task()  # another run's turn raises: no beat
                    if not self._stop.is_set():
                        await beats.beat()
                    follow = FOLLOWERS[self.source.via]
                    await follow(
                        self.source,
                        task_id,
                        sink,
                        stop=self._stop,
                        options=self._options,
                        after=sink.stored_next,
                        progress=self.progress,
                        turn_id=self.turn_id,
                        beats=beats,
                    )
                except Exception as exc:  # the turn's to log; the step goes on
                    log_follower_failure(exc, self.turn_id, task_id, self.endpoint, span.failed)
            if not sink.turn_taken:
                # Ended (not cancelled) before the body did: the task's last page read,
                # say. The turn is open still, so its beats go on in a task, started
                # before this one is counted out: a drain never finds none running between.
                beats.to_task()
        finally:
            if sink.turn_taken:
                # Said at once, not at the block's exit: a turn that follows next, in
                # this run, must not link from another run's turn.
                self.record.taken_by_another_run()
            self._running.ended()

    def _start_beats(self) -> None:
        """Start the beats' task: the follower no longer writes them (``_beats``)."""
        assert self._tg is not None
        if self._stop.is_set() or self._tg.cancel_scope.cancel_called:
            return  # the body has ended, or the block cancels its group: no new beat
        self._running.started()
        self._tg.start_soon(self._beat, name=f"heartbeat {self.turn_id}")

    async def _beat(self) -> None:
        """The writer's heartbeats, one every ``writer_heartbeat_seconds`` until the turn ends.

        A sign of life for readers while the turn is open and has no end mark,
        for the rest of a turn whose follower no longer writes them. Each beat is
        bounded by the interval and never raises (``Heartbeat.beat``), so the beats
        cost the step nothing but their puts; a beat that overran is followed by the
        next at once, never by a burst. A turn that ends starts no new beat, and its
        drain waits for the one in flight (within the beat's bound and the drain's):
        a put cancelled in a store's worker thread would still land, after the block.
        """
        try:
            sink, beats = self._sink, self._beats
            assert sink is not None
            assert beats is not None
            # Another run's turn: its writer says whether it lives.
            while not sink.turn_taken and not self._stop.is_set():
                if anyio.current_time() >= beats.due:
                    await beats.write()
                with anyio.CancelScope(deadline=beats.due):
                    await self._stop.wait()
        finally:
            self._running.ended()

    async def _write_link(self) -> None:
        previous = self.record.link_to_write()
        if previous is None:
            return
        keys = TurnKeys(self.keys.prefix_key, previous)
        with anyio.CancelScope(shield=True):  # a cleanup write, though it runs beside the body
            landed = await bounded_cleanup(
                f"turn {previous}: linking to turn {self.turn_id}",
                lambda: write_next_turn(self.store, keys, self.turn_id),
                extra=self._log_extra,
            )
        self.record.link_written(landed=landed)

    # --- the block ------------------------------------------------------------------

    async def __aenter__(self) -> LiveTurn:
        self.record.entering()
        self._start_span()
        try:
            self.record.found_stored(await self._read_stored())
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
        except BaseException as exc:
            self._end_span(exc)
            raise
        return LiveTurn._create(self)

    def _start_span(self) -> None:
        """The turn's span, current for the body and the follower (when a provider is set)."""
        options = self._options
        self._telemetry = telemetry_for(options.tracer_provider, options.meter_provider)
        self._span = self._telemetry.span(
            TURN_SPAN,
            {
                OPERATION_ATTRIBUTE: TURN_SPAN,
                TURN_ID_ATTRIBUTE: self.turn_id,
                AGENT_URL_ATTRIBUTE: agent_url(self.endpoint),
            },
        )

    def _end_span(self, exc: BaseException | None) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        if span.recording:
            stats = self.statistics()
            attributes: dict[str, str | int | bool] = {
                EVENTS_ATTRIBUTE: stats.events_stored,
                BYTES_ATTRIBUTE: stats.bytes_stored,
                COMPLETE_ATTRIBUTE: stats.complete,
            }
            if self.task_id is not None:
                attributes[TASK_ID_ATTRIBUTE] = self.task_id
            span.set_attributes(attributes)
        span.end(None if exc is None else outcome_of(exc).value)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.record.closing()
        try:
            if exc is None:
                await self._drain()
        except BaseException as during_drain:
            # A cancel (or interrupt) of the step while its followers drain.
            await self._close(during_drain)
            raise
        await self._close(exc)
        # Not suppressed: the body's own exception (if any) goes on as itself,
        # traceback intact.

    async def _read_stored(self) -> StoredTurn:
        return await read_stored_within_bound(self.store, self.keys)

    async def _drain(self) -> None:
        self._stop.set()
        if self.record.starts_follower:
            with anyio.move_on_after(self._options.drain_seconds):
                await self._running.none()

    async def _close(self, exc: BaseException | None) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        outcome = exc
        try:
            await self._exit_group(exc)
        except BaseException as raised:
            # A cancel arriving while the group exits ends the step too: mark it so.
            outcome = raised
            raise
        finally:
            try:
                await self._cleanup(outcome)
            finally:  # a cancel out of the cleanup too: the step keeps values, not the block
                try:
                    self._ledger.closed(self)
                finally:
                    self._end_span(outcome)

    async def _exit_group(self, exc: BaseException | None) -> None:
        assert self._tg is not None
        await exit_unwrapped(self._tg, exc)

    async def _cleanup(self, exc: BaseException | None) -> None:
        progress = self.progress
        planned = self.record.body_ended(
            outcome_of(exc), complete=progress.complete, last_state=progress.state
        )
        await run_cleanup(lambda: self._write_marks(planned), exc)

    async def _write_marks(self, planned: TurnExit) -> None:
        mark, sink = planned.end_mark, self._sink
        if mark is not None and sink is not None:
            # Each its own bound: a stalled task.json must not cut the end mark short.
            extra = self._log_extra
            await bounded_cleanup(f"turn {self.turn_id}: task mark", sink.store_task, extra=extra)
            await bounded_cleanup(
                f"turn {self.turn_id}: end mark",
                lambda: sink.end(mark.state, mark.complete),
                extra=extra,
            )
            if sink.turn_taken:  # another run's turn: that run ends its chain there
                self.record.taken_by_another_run()
        await self._write_link()

    @property
    def _log_extra(self) -> dict[str, object]:
        return {"task_id": self.task_id, "turn_id": self.turn_id}


async def read_stored_within_bound(store: ObjectStore, keys: TurnKeys) -> StoredTurn:
    """What the store holds of a turn already, read within :data:`STORED_TURN_READ_SECONDS`."""
    with anyio.move_on_after(STORED_TURN_READ_SECONDS) as scope:
        return await read_stored_turn(store, keys)
    assert scope.cancelled_caught
    raise StoreError(
        f"reading what is stored of turn {keys.turn_id!r} took over {STORED_TURN_READ_SECONDS} s",
        turn_id=keys.turn_id,
        key=keys.live,
    )


@attrs.define(eq=False)
class _Running:
    """How many of a turn's tasks a drain waits for still run, and that wait.

    The wait's event is made only when a drain has to wait: a turn whose tasks
    ended first never makes one, and every turn open in a process keeps this.
    """

    _count: int = 0
    _none_left: anyio.Event | None = None

    def started(self) -> None:
        """Counted as the task is started, not as it begins: a drain may come first."""
        self._count += 1

    def ended(self) -> None:
        self._count -= 1
        if not self._count and self._none_left is not None:
            self._none_left.set()

    async def none(self) -> None:
        """Wait until every task counted has ended; a checkpoint, as an event's wait is."""
        if not self._count:
            await anyio.lowlevel.checkpoint()
            return
        if self._none_left is None:
            self._none_left = anyio.Event()
        await self._none_left.wait()


def log_follower_failure(
    exc: Exception,
    turn_id: str,
    task_id: str,
    endpoint: str,
    noted: Callable[[str, str], None] | None = None,
) -> None:
    """Log the failure a follower ended with; it is never raised: the step goes on.

    ``noted`` is told the failure's type and the words logged (the follower's span).
    """
    extra = {"task_id": task_id, "turn_id": turn_id}
    if isinstance(exc, (AgentError, ClientClosedError)):
        # The agent's fault, or a client closed under us: one line, no traceback,
        # and never the agent's error body (a status error's message quotes it;
        # docs/security.md).
        if getattr(exc, "status_code", None) is None:
            detail = f"{type(exc).__name__}: {exc}"  # our own words on a page we refused
        else:
            detail = f"{type(exc).__name__} ({failure_reason(exc)})"
        if noted is not None:
            noted(type(exc).__name__, detail)
        logger.error(
            "turn %s: following task %s at %s ended: %s",
            turn_id,
            task_id,
            endpoint,
            detail,
            extra=extra,
        )
        return
    if noted is not None:
        noted(type(exc).__name__, failure_reason(exc))
    logger.error(
        "turn %s: following task %s failed",
        turn_id,
        task_id,
        exc_info=exc,
        extra=extra,
    )


def turn_progress(
    record: TurnRecord, progress: FollowProgress, sink: LiveTrajectoryChunks | None
) -> TurnProgress:
    """Where an open turn stands: its task, its contiguous events (a resumed turn's too)."""
    events = sink.stored_next if sink is not None else record.stored_events
    complete = record.complete(read_to_end=progress.complete)
    return TurnProgress(record.turn_id, record.task_id, events, complete)


def turn_statistics(
    record: TurnRecord,
    progress: FollowProgress,
    sink: LiveTrajectoryChunks | None,
    now: float | None = None,
) -> LiveTurnStatistics:
    """A snapshot of an open turn from its follower's own record and its sink's counters.

    Sync and without a checkpoint, so the two are seen at one moment: the
    follower moves its record right after the sink returns, in the same step.
    """
    return LiveTurnStatistics(
        turn_id=record.turn_id,
        task_id=record.task_id,
        reads=progress.reads,
        failed_reads=progress.failed_reads,
        pool_waits=progress.pool_waits,
        pages_stored=sink.chunks_stored if sink is not None else 0,
        events_stored=sink.events_stored if sink is not None else 0,
        bytes_stored=sink.bytes_stored if sink is not None else 0,
        followers_alive=1 if progress.running else 0,
        lag_seconds=progress.lag_seconds(now),
        complete=record.complete(read_to_end=progress.complete),
        poll_lag_seconds=progress.poll_lag_seconds,
    )


def open_turn(
    source: TaskSource,
    store: ObjectStore,
    keys: TurnKeys,
    *,
    options: FollowOptions,
    ledger: StepLedger,
    resume: bool,
) -> _TurnBlock:
    """The block of one turn of ``ledger``'s step, not yet entered."""
    return _TurnBlock(source, store, keys, options=options, ledger=ledger, resume=resume)
