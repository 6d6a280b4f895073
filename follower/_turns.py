"""One turn of a step: the task group that owns its follower, and its stored marks.

This is the one module that owns tasks. A turn's block opens a task group; its
follower runs in it and never raises into it; the block's exit decides, from
how the body ended, whether to drain (returned) or cancel at once (raised or
cancelled), then writes the end mark and links, shielded and bounded, so that
no outcome of the step is replaced and no follower outlives the block.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from ._chunks import LiveTrajectoryChunks, put_once, write_next_turn
from ._errors import (
    InvalidArgumentError,
    StoreError,
    TurnConflictError,
    TurnExistsError,
    TurnStateError,
)
from ._follow import FollowProgress, follow_task
from ._layout import JSON, TaskMark, TurnKeys
from ._options import (
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT_SECONDS,
    FollowOptions,
)
from ._stored_turn import StoredTurn, read_stored_turn
from ._wire import TrajectoryState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractAsyncContextManager
    from types import TracebackType

    import httpx

    from ._stores import ObjectStore

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


class TurnChain:
    """The order of a step's turns: who followed last, so the next one can link from it.

    Sync and owned by one step (:class:`LiveTurns`, or a lone turn's block). A
    turn that follows a task asks :meth:`followed`, and is the previous turn of
    whichever turn follows next. ``handing_off`` is the step's word that its
    turns have not ended for good (no end marks, no null link); ``handed_off``
    names the turns that said so of themselves.
    """

    def __init__(self, last_followed: str | None = None) -> None:
        self.last_followed = last_followed
        self.handing_off = False
        self.handed_off: set[str] = set()

    @property
    def ends_for_good(self) -> bool:
        """Whether the step's last followed turn is its last: not handed off."""
        return not self.handing_off and self.last_followed not in self.handed_off

    def followed(self, turn_id: str) -> str | None:
        """Record that ``turn_id`` follows a task; the turn it links from, if any."""
        previous, self.last_followed = self.last_followed, turn_id
        return previous if previous != turn_id else None


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


class _TurnBlock:
    """The async context manager behind :func:`following_live_trajectory`."""

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
        self._sink = LiveTrajectoryChunks(store, keys.prefix_key, keys.turn_id)
        self._stop = anyio.Event()
        self._follower_done = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False

    # --- the body's side -------------------------------------------------------------

    def follow(self, task_id: str) -> None:
        if self._tg is None or self._closed:
            raise TurnStateError(f"turn {self.turn_id!r}: follow() after the turn's block ended")
        if self.task_id is not None:
            raise TurnStateError(
                f"turn {self.turn_id!r} already follows task {self.task_id!r}; one task per turn"
            )
        if not isinstance(task_id, str) or not task_id:
            raise InvalidArgumentError(f"task_id must be a non-empty string, not {task_id!r}")
        if self._stored is not None:
            self._check_resumable(self._stored, task_id)
        self.task_id = task_id
        self._linked_from = self._chain.followed(self.turn_id)
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

    def _check_resumable(self, stored: StoredTurn, task_id: str) -> None:
        where = f"turn {self.turn_id!r} under {self.keys.prefix_key!r}"
        if stored.task is not None and stored.task.task_id != task_id:
            raise TurnConflictError(
                f"{where} is stored for task {stored.task.task_id!r}, not {task_id!r}; "
                "nothing was written"
            )
        if stored.task is None and stored.end is None:
            raise TurnConflictError(
                f"{where} holds {stored.describe()} but no task.json: whose turn it is "
                "cannot be told, so it is not resumed"
            )

    def _start_follower(self, task_id: str) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._run_follower, task_id, name=f"follower {self.turn_id}")

    async def _run_follower(self, task_id: str) -> None:
        try:
            after = 0
            if self._stored is None:
                task = TaskMark(task_id, self.endpoint, _now_rfc3339())
                await put_once(self.store, self.keys.task, task.encode(), content_type=JSON)
            else:
                after = self._sink.stored_next = self._stored.contiguous_next
                self._sink.format = self._stored.format
            await follow_task(
                self.endpoint,
                task_id,
                self._sink,
                stop=self._stop,
                options=self._options,
                after=after,
                progress=self.progress,
            )
        except Exception:
            # A follower's failure is the turn's to log, never to raise: the step goes on.
            logger.exception("turn %s: following task %s failed", self.turn_id, task_id)
        finally:
            self._follower_done.set()

    async def _link_from_previous(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._write_link()

    async def _write_link(self) -> None:
        previous = self._linked_from
        assert previous is not None
        what = f"turn {previous}: linking to turn {self.turn_id}"
        keys = TurnKeys(self.keys.prefix_key, previous)
        landed = await bounded_cleanup(
            what, lambda: write_next_turn(self.store, keys, self.turn_id)
        )
        self._link_landed = self._link_landed or landed

    # --- the block ------------------------------------------------------------------

    async def __aenter__(self) -> LiveTurn:
        if self._tg is not None:
            raise TurnStateError(f"turn {self.turn_id!r}: its block can be entered once")
        self._closed = True  # until the group is open: follow() is refused
        stored = await self._read_stored()
        if not stored.is_empty:
            if not self._resume:
                raise TurnExistsError(
                    f"turn {self.turn_id!r} under {self.keys.prefix_key!r} already holds "
                    f"{stored.describe()}; pass resume=True to continue it, or use another "
                    "prefix or turn id (nothing stored was touched)"
                )
            self._stored = stored
        self._closed = False
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
        with anyio.move_on_after(CLEANUP_SECONDS) as scope:
            return await read_stored_turn(self.store, self.keys)
        assert scope.cancelled_caught
        raise StoreError(f"listing turn {self.turn_id!r} took over {CLEANUP_SECONDS} s")

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
            await self._cleanup(outcome)

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
            body_leaves = {id(leaf) for leaf in _leaves(exc)}
            leaves = _leaves(group)
            if not all(
                id(leaf) in body_leaves or isinstance(leaf, cancelled | KeyboardInterrupt)
                for leaf in leaves
            ):
                raise
            for leaf in leaves:
                if isinstance(leaf, KeyboardInterrupt) and id(leaf) not in body_leaves:
                    raise leaf from None
            if exc is None:
                raise leaves[0] from None
        except BaseException as raised:
            if raised is not exc and not (isinstance(raised, cancelled) and is_cancellation(exc)):
                raise

    async def _cleanup(self, exc: BaseException | None) -> None:
        with anyio.move_on_after(CLEANUP_SECONDS, shield=True):
            if self._marks_its_end:
                state, complete = self._end_state(exc), self.progress.complete
                await bounded_cleanup(
                    f"turn {self.turn_id}: end mark", lambda: self._sink.end(state, complete)
                )
            if self._linked_from is not None and not self._link_landed:
                await self._write_link()

    @property
    def _marks_its_end(self) -> bool:
        """Whether the exit writes end.json: a followed turn that ends for good, unmarked."""
        if self.task_id is None or self.handing_off or self._chain.handing_off:
            return False
        return self._stored is None or self._stored.end is None

    def _end_state(self, exc: BaseException | None) -> TrajectoryState:
        if self.progress.complete and self.progress.state is not None:
            return self.progress.state
        if self.reported_state is not None:
            return self.reported_state
        if exc is not None and is_stopped_from_outside(exc):
            return TrajectoryState.CANCELED
        return TrajectoryState.FAILED


def _now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _leaves(exc: BaseException | None) -> list[BaseException]:
    if exc is None:
        return []
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def following_live_trajectory(
    endpoint: str,
    store: ObjectStore,
    prefix_key: str,
    turn_id: str,
    *,
    poll_interval_seconds: float,
    previous_turn_id: str | None = None,
    drain_seconds: float = DEFAULT_DRAIN_SECONDS,
    client: httpx.AsyncClient | None = None,
    read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    resume: bool = False,
) -> AbstractAsyncContextManager[LiveTurn]:
    """Follow one turn's live trajectory for the duration of an ``async with`` block.

    Yields a :class:`LiveTurn`. When the body returns, the follower drains for at
    most ``drain_seconds``; when it raises or is cancelled, the follower is
    cancelled at once and the body's exception or cancel comes out as itself.
    Either way the turn's end mark (and the link from ``previous_turn_id``) is
    written, shielded and bounded, unless the turn was handed off.

    A turn the store already holds raises :class:`~follower.TurnExistsError`
    on entry, unless ``resume`` is true: then ``follow()`` of the same task
    continues after its last stored chunk, and another task's turn raises
    :class:`~follower.TurnConflictError`.
    """
    options = FollowOptions(
        poll_interval_seconds=poll_interval_seconds,
        drain_seconds=drain_seconds,
        client=client,
        read_timeout_seconds=read_timeout_seconds,
        max_page_bytes=max_page_bytes,
    )
    if previous_turn_id is not None:
        TurnKeys(prefix_key, previous_turn_id)  # refused now, not at the first link
    keys = TurnKeys(prefix_key, turn_id)
    chain = TurnChain(previous_turn_id)
    return open_turn(endpoint, store, keys, options=options, chain=chain, resume=resume)


def open_turn(
    endpoint: str,
    store: ObjectStore,
    keys: TurnKeys,
    *,
    options: FollowOptions,
    chain: TurnChain,
    resume: bool,
) -> AbstractAsyncContextManager[LiveTurn]:
    """The block of one turn of ``chain``'s step, not yet entered."""
    return _TurnBlock(endpoint, store, keys, options=options, chain=chain, resume=resume)
