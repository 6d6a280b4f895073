"""One turn of a step: the task group that owns its follower, and its stored marks.

This is the one module that owns tasks. A turn's block opens a task group; its
follower runs in it and never raises into it; the block's exit decides, from
how the body ended, whether to drain (returned) or cancel at once (raised or
cancelled), then writes the end mark and links, shielded and bounded, so that
no outcome of the step is replaced and no follower outlives the block.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from ._chain import TurnChain, TurnProgress
from ._chunks import LiveTrajectoryChunks, write_next_turn
from ._endings import (
    bounded_cleanup,
    is_stopped_from_outside,
    leaves,
    run_cleanup,
)
from ._errors import (
    AgentError,
    ClientClosedError,
    InvalidArgumentError,
    StoreError,
    TurnConflictError,
    TurnExistsError,
    TurnStateError,
)
from ._follow import FollowProgress, follow_task
from ._layout import TurnKeys
from ._retries import failure_reason
from ._statistics import LiveTurnStatistics
from ._stored_turn import StoredTurn, read_stored_turn
from ._wire import TrajectoryState

if TYPE_CHECKING:
    from types import TracebackType

    from ._errors import ErrorContext
    from ._options import (
        FollowOptions,
    )
    from ._stores import ObjectStore

logger = logging.getLogger("follower.turns")

# Entering a turn reads what the store holds of it (to refuse or resume it).
STORED_TURN_READ_SECONDS = 10.0


class LiveTurn:
    """One turn of a step, yielded by :func:`following_live_trajectory`.

    Call :meth:`follow` once the task exists, and :meth:`ended` with the state
    the task ended in.
    """

    def __init__(self, block: _TurnBlock) -> None:
        self._block = block

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
        self._block.reported_state = TrajectoryState.from_task_state(state)

    def hand_off(self) -> None:
        """Leave the turn for a later attempt: its exit writes no end mark.

        For a step that stops without ending the turn for good (a worker shutting
        down, a failure that will be retried). What is stored stays; the next
        attempt continues it with ``resume=True``.
        """
        self._block.hand_off()

    def statistics(self) -> LiveTurnStatistics:
        """What the turn's follower and sink have done so far; cheap, no I/O.

        A frozen snapshot, as trio's ``statistics()`` are: reads, failed reads,
        pool waits, what was stored, whether the follower runs, its lag behind
        the agent, and whether the last page was read.
        """
        return self._block.statistics()


class _TurnBlock:
    """The async context manager behind :func:`following_live_trajectory`."""

    _sink_class = LiveTrajectoryChunks

    def __init__(
        self,
        endpoint: str,
        store: ObjectStore,
        keys: TurnKeys,
        *,
        options: FollowOptions,
        chain: TurnChain,
        resume: bool = False,
    ) -> None:
        self.endpoint = endpoint
        self.store = store
        self.keys = keys
        self.turn_id = keys.turn_id
        self.task_id: str | None = None
        self.reported_state: TrajectoryState | None = None
        self.handing_off = False
        self.progress = FollowProgress()
        self._resume = resume
        self._stored: StoredTurn | None = None
        self._has_follower = False
        self._options = options
        self._chain = chain
        self._linked_from: str | None = None
        self._link_landed = False
        self._sink: LiveTrajectoryChunks | None = None
        self._stop = anyio.Event()
        self._follower_done = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False

    # --- the body's side -------------------------------------------------------------

    def follow(self, task_id: str) -> None:
        if self._tg is None or self._closed:
            raise TurnStateError(
                f"turn {self.turn_id!r}: follow() after the turn's block ended",
                turn_id=self.turn_id,
                task_id=self.task_id,
            )
        if self.task_id is not None:
            raise TurnStateError(
                f"turn {self.turn_id!r} already follows task {self.task_id!r}; one task per turn",
                turn_id=self.turn_id,
                task_id=self.task_id,
            )
        if not isinstance(task_id, str) or not task_id:
            raise InvalidArgumentError(
                f"turn {self.turn_id!r}: task_id must be a non-empty string, not {task_id!r:.100}",
                turn_id=self.turn_id,
            )
        if self._stored is not None:
            self._check_resumable(self._stored, task_id)
        self.task_id = task_id
        self._sink = self._new_sink(task_id)
        self._linked_from = self._chain.followed(self.turn_id)
        if self._linked_from in self._chain.taken:
            self._linked_from = None  # another run's turn: its links are that run's to write
        # A resumed turn that has its end mark is done: nothing more is read.
        self._has_follower = self._stored is None or self._stored.end is None
        if self._has_follower:
            self._start_follower(task_id)
        if self._linked_from is not None:
            self._tg.start_soon(
                self._link_from_previous, name=f"link {self._linked_from} -> {self.turn_id}"
            )

    def hand_off(self) -> None:
        self.handing_off = True
        self._chain.handed_off.add(self.turn_id)

    @property
    def running(self) -> bool:
        """Whether the turn's follower runs now."""
        return self.progress.running

    def turn_progress(self) -> TurnProgress:
        stored = self._stored
        if self._sink is not None:
            events = self._sink.stored_next
        else:
            events = stored.contiguous_next if stored is not None else 0
        return TurnProgress(self.turn_id, self.task_id, events, self._complete)

    def statistics(self, now: float | None = None) -> LiveTurnStatistics:
        """A snapshot from the follower's own record and the sink's counters.

        Sync and without a checkpoint, so the two are seen at one moment: the
        follower moves its record right after the sink returns, in the same step.
        """
        progress, sink = self.progress, self._sink
        return LiveTurnStatistics(
            turn_id=self.turn_id,
            task_id=self.task_id,
            reads=progress.reads,
            failed_reads=progress.failed_reads,
            pool_waits=progress.pool_waits,
            pages_stored=sink.chunks_stored if sink is not None else 0,
            events_stored=sink.events_stored if sink is not None else 0,
            bytes_stored=sink.bytes_stored if sink is not None else 0,
            followers_alive=1 if progress.running else 0,
            lag_seconds=progress.lag_seconds(now),
            complete=self._complete,
        )

    @property
    def _complete(self) -> bool:
        """Whether the last page was read: by this block's follower, or by an earlier attempt."""
        stored = self._stored
        return self.progress.complete or bool(stored and stored.end and stored.end.complete)

    def _check_resumable(self, stored: StoredTurn, task_id: str) -> None:
        where = f"turn {self.turn_id!r} under {self.keys.prefix_key!r}"
        context: ErrorContext = {"turn_id": self.turn_id, "task_id": task_id, "key": self.keys.live}
        if stored.task is not None and stored.task.task_id != task_id:
            raise TurnConflictError(
                f"{where} is stored for task {stored.task.task_id!r}, not {task_id!r}; "
                "nothing was written",
                **context,
            )
        if stored.task is None and stored.end is None and stored.chunks:
            raise TurnConflictError(
                f"{where} holds {stored.describe()} but no task.json: whose turn it is "
                "cannot be told, so it is not resumed",
                **context,
            )

    def _new_sink(self, task_id: str) -> LiveTrajectoryChunks:
        """The turn's sink: a new turn's first writes say whose it is; a resumed one continues."""
        prefix, turn, stored = self.keys.prefix_key, self.turn_id, self._stored
        if stored is None:
            return self._sink_class(
                self.store, prefix, turn, task_id=task_id, endpoint=self.endpoint
            )
        # A stored turn with no task.json holds no event either (else it was refused).
        return self._sink_class(
            self.store,
            prefix,
            turn,
            task_id=task_id if stored.task is None else None,
            endpoint=self.endpoint,
            stored_next=stored.contiguous_next,
            format=stored.format,
        )

    def _start_follower(self, task_id: str) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._run_follower, task_id, name=f"follower {self.turn_id}")

    async def _run_follower(self, task_id: str) -> None:
        try:
            sink = self._sink
            assert sink is not None
            await follow_task(
                self.endpoint,
                task_id,
                sink,
                stop=self._stop,
                options=self._options,
                after=sink.stored_next,
                progress=self.progress,
                turn_id=self.turn_id,
            )
        except (AgentError, ClientClosedError) as exc:
            # The agent's fault, or a client closed under us: one line, no traceback,
            # and never the agent's error body (a status error's message quotes it;
            # docs/security.md).
            if getattr(exc, "status_code", None) is None:
                detail = f"{type(exc).__name__}: {exc}"  # our own words on a page we refused
            else:
                detail = f"{type(exc).__name__} ({failure_reason(exc)})"
            logger.error(  # noqa: TRY400 (no traceback: it would quote the body)
                "turn %s: following task %s at %s ended: %s",
                self.turn_id,
                task_id,
                self.endpoint,
                detail,
                extra={"task_id": task_id, "turn_id": self.turn_id},
            )
        except Exception:
            # A follower's failure is the turn's to log, never to raise: the step goes on.
            logger.exception(
                "turn %s: following task %s failed",
                self.turn_id,
                task_id,
                extra={"task_id": task_id, "turn_id": self.turn_id},
            )
        finally:
            if self._sink is not None and self._sink.turn_taken:
                # Said at once, not at the block's exit: a turn that follows next, in
                # this run, must not link from another run's turn.
                self._chain.taken.add(self.turn_id)
            self._follower_done.set()

    async def _link_from_previous(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._write_link()

    async def _write_link(self) -> None:
        previous = self._linked_from
        assert previous is not None
        if previous in self._chain.taken:  # lost to another run since follow(): not ours
            return
        what = f"turn {previous}: linking to turn {self.turn_id}"
        keys = TurnKeys(self.keys.prefix_key, previous)
        landed = await bounded_cleanup(
            what, lambda: write_next_turn(self.store, keys, self.turn_id), extra=self._log_extra
        )
        self._link_landed = self._link_landed or landed

    # --- the block ------------------------------------------------------------------

    async def __aenter__(self) -> LiveTurn:
        if self._tg is not None:
            raise TurnStateError(
                f"turn {self.turn_id!r}: its block can be entered once", turn_id=self.turn_id
            )
        stored = await self._read_stored()
        if not stored.is_empty:
            if not self._resume:
                raise TurnExistsError(
                    f"turn {self.turn_id!r} under {self.keys.prefix_key!r} already holds "
                    f"{stored.describe()}; pass resume=True to continue it, or use another "
                    "prefix or turn id (nothing stored was touched)",
                    turn_id=self.turn_id,
                    key=self.keys.live,
                )
            self._stored = stored
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return LiveTurn(self)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closed = True
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
        """What the store holds of this turn already, read within a bound."""
        with anyio.move_on_after(STORED_TURN_READ_SECONDS) as scope:
            return await read_stored_turn(self.store, self.keys)
        assert scope.cancelled_caught
        raise StoreError(
            f"reading what is stored of turn {self.turn_id!r} took over "
            f"{STORED_TURN_READ_SECONDS} s",
            turn_id=self.turn_id,
            key=self.keys.live,
        )

    async def _drain(self) -> None:
        self._stop.set()
        if self._has_follower:
            with anyio.move_on_after(self._options.drain_seconds):
                await self._follower_done.wait()

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
                self._chain.closed(self)

    async def _exit_group(self, exc: BaseException | None) -> None:
        """Exit the task group; unwrap exactly the body's exception and cancels."""
        assert self._tg is not None
        cancelled = anyio.get_cancelled_exc_class()
        try:
            await self._tg.__aexit__(
                type(exc) if exc else None, exc, exc.__traceback__ if exc else None
            )
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

    async def _cleanup(self, exc: BaseException | None) -> None:
        state = self._end_state(stopped=exc is not None and is_stopped_from_outside(exc))
        await run_cleanup(lambda: self._write_marks(state), exc)

    async def _write_marks(self, state: TrajectoryState) -> None:
        if self._marks_its_end:
            sink = self._sink
            assert sink is not None
            complete = self.progress.complete
            # Each its own bound: a stalled task.json must not cut the end mark short.
            extra = self._log_extra
            await bounded_cleanup(f"turn {self.turn_id}: task mark", sink.store_task, extra=extra)
            await bounded_cleanup(
                f"turn {self.turn_id}: end mark", lambda: sink.end(state, complete), extra=extra
            )
            if sink.turn_taken:  # another run's turn: that run ends its chain there
                self._chain.taken.add(self.turn_id)
        if self._linked_from is not None and not self._link_landed:
            await self._write_link()

    @property
    def _log_extra(self) -> dict[str, object]:
        return {"task_id": self.task_id, "turn_id": self.turn_id}

    @property
    def _marks_its_end(self) -> bool:
        """Whether the exit writes end.json: a followed turn that ends for good, unmarked."""
        if self.task_id is None or self.handing_off or self._chain.handing_off:
            return False
        return self._stored is None or self._stored.end is None

    def _end_state(self, *, stopped: bool) -> TrajectoryState:
        if self.progress.complete and self.progress.state is not None:
            return self.progress.state
        if self.reported_state is not None:
            return self.reported_state
        if stopped:
            return TrajectoryState.CANCELED
        return TrajectoryState.FAILED


def open_turn(
    endpoint: str,
    store: ObjectStore,
    keys: TurnKeys,
    *,
    options: FollowOptions,
    chain: TurnChain,
    resume: bool,
) -> _TurnBlock:
    """The block of one turn of ``chain``'s step, not yet entered."""
    return _TurnBlock(endpoint, store, keys, options=options, chain=chain, resume=resume)
