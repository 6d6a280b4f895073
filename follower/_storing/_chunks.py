"""The sink that stores one turn's pages as contiguous, write-once chunks, and its links."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

import anyio.to_thread
import attrs

from .._errors import (
    FollowerError,
    ObjectConflictError,
    ObjectExistsError,
    UsageError,
    add_context,
)
from .._format._layout import (
    JSON,
    JSONL,
    EndMark,
    MetaMark,
    NextLink,
    TaskMark,
    TurnKeys,
    encode_events,
)
from .._format._wire import LARGE_PAGE_BYTES
from .._redact import scrub
from .._retries import FailureStreak, retry_while_unavailable
from .._stores._protocol import check_same_bytes

if TYPE_CHECKING:
    from .._errors import ErrorContext
    from .._format._wire import TrajectoryBatch, TrajectoryState
    from .._stores._protocol import ObjectStore

logger = logging.getLogger("follower.chunks")


# Converted at construction only: no hook on the counters every batch moves.
@final
@attrs.define(eq=False, on_setattr=attrs.setters.NO_OP)
class LiveTrajectoryChunks:
    """Stores each batch of one turn under ``<prefix_key><turn_id>/live/``.

    Call it with each :class:`TrajectoryBatch` in order; :meth:`end` writes the
    end mark. ``stored_next`` only moves once a chunk is written, so the end
    mark never claims an event that is not stored. A put that finds the store
    unavailable (:class:`~follower.StoreUnavailableError`) is retried with
    backoff for up to two minutes before the call returns or raises, so chunks
    land in order, each once. Given ``task_id`` (and the ``endpoint`` it is
    read from), the sink writes ``task.json`` before any other object of the
    turn, naming ``heartbeat_seconds`` when its writer stores heartbeats;
    ``stored_next`` and ``format`` let it continue a turn already stored (a
    resume). ``chunks_stored``, ``events_stored`` and ``bytes_stored`` count
    the chunks this sink wrote, once each put returned.
    """

    _store: ObjectStore
    _prefix_key: str
    turn_id: str
    _task_id: str | None = attrs.field(default=None, kw_only=True)
    _endpoint: str = attrs.field(default="", kw_only=True, converter=scrub)  # kept hidden
    # The writer's heartbeat interval, told readers in task.json (None: it stores none).
    _heartbeat_seconds: float | None = attrs.field(default=None, kw_only=True)
    stored_next: int = attrs.field(default=0, kw_only=True)
    format: str | None = attrs.field(default=None, kw_only=True)
    final_state: TrajectoryState | None = attrs.field(init=False, default=None)
    # Another run's task.json was found where this one's was to go: the turn is
    # that run's, and nothing more of this one may land in it.
    turn_taken: bool = attrs.field(init=False, default=False)
    chunks_stored: int = attrs.field(init=False, default=0)
    events_stored: int = attrs.field(init=False, default=0)
    bytes_stored: int = attrs.field(init=False, default=0)
    _keys: TurnKeys = attrs.field(init=False, repr=False)
    _task: TaskMark | None = attrs.field(init=False, repr=False)  # until it is put
    _ended: bool = attrs.field(init=False, default=False, repr=False)
    _format_warned: bool = attrs.field(init=False, default=False, repr=False)
    # The turn's task and turn ids: an error's context, and its log records' ``extra``.
    _context: ErrorContext = attrs.field(init=False, repr=False)
    _failing: FailureStreak = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        task_id, turn_id = self._task_id, self.turn_id
        self._keys = TurnKeys(self._prefix_key, turn_id)
        self._task = (
            None
            if task_id is None
            else TaskMark.started_now(task_id, self._endpoint, self._heartbeat_seconds)
        )
        self._context = {"task_id": task_id, "turn_id": turn_id}
        self._failing = FailureStreak(
            logger, f"puts of turn {turn_id}", noun="put", extra=self._context
        )

    @property
    def prefix(self) -> str:
        """The key prefix of this turn's objects."""
        return self._keys.live

    @property
    def keys(self) -> TurnKeys:
        return self._keys

    async def __call__(self, batch: TrajectoryBatch) -> None:
        if self._ended:
            raise UsageError(f"turn {self.turn_id!r} is already marked ended", **self._context)
        if self.turn_taken:
            raise UsageError(
                f"turn {self.turn_id!r} is another run's: nothing more is stored", **self._context
            )
        if batch.after != self.stored_next:
            raise UsageError(
                f"turn {self.turn_id!r}: batch starts at {batch.after}, "
                f"but {self.stored_next} events are stored; chunks must be contiguous",
                **self._context,
            )
        await self.store_task()
        if batch.format is not None:
            await self._store_format(batch.format)
        if batch.events:
            key = self._keys.chunk(batch.after, batch.next)
            if batch.wire_bytes > LARGE_PAGE_BYTES:
                # Encoding a large page takes about as long as decoding it: off the loop too.
                body = await anyio.to_thread.run_sync(
                    encode_events, batch.events, abandon_on_cancel=True
                )
            else:
                body = encode_events(batch.events)
            await self._put(key, body, JSONL)
            self.stored_next = batch.next
            self.chunks_stored += 1
            self.events_stored += len(batch.events)
            self.bytes_stored += len(body)
        if batch.last:
            self.final_state = batch.state

    async def end(self, state: TrajectoryState, complete: bool | None = None) -> None:
        """Write the end mark: the turn's state, how many events are stored, and if all are.

        ``complete``: the terminal page was stored, so every event of the task is;
        by default, whether this sink was handed the last batch.
        """
        if complete is None:
            complete = self.final_state is not None
        mark = EndMark(state, self.stored_next, complete)
        try:
            await self.store_task()
        finally:
            # Whose turn it is may stay unknown; that the turn ended must not. But a
            # turn another run claimed is that run's to end: this run's mark (fewer
            # events, not complete) could land first and be the one readers believe.
            if not self.turn_taken:
                await self._put(self._keys.end, mark.encode(), JSON)
            self._ended = True

    async def store_task(self) -> None:
        """Write ``task.json`` if it is still to be written; one put only (with its retries).

        Whose turn it is goes first: no reader or resume ever sees a chunk
        without it. A put that failed is not made again by :meth:`end`, so a
        stalled store cannot take the end mark's time too.
        """
        task, self._task = self._task, None
        if task is not None:
            try:
                await self._put(self._keys.task, task.encode(), JSON)
            except ObjectConflictError:
                self.turn_taken = True
                raise

    async def _store_format(self, fmt: str) -> None:
        if self.format is None:
            await self._put(self._keys.meta, MetaMark(fmt).encode(), JSON)
            self.format = fmt
        elif fmt != self.format and not self._format_warned:
            # Once a turn: an agent that changed its format names it on every page after.
            self._format_warned = True
            logger.warning(
                "turn %s: a page names format %.100r, but %.100r is stored; keeping it "
                "(later pages that differ are not logged)",
                self.turn_id,
                fmt,
                self.format,
                extra=self._context,
            )

    async def _put(self, key: str, body: bytes, content_type: str) -> None:
        """One object, retried while the store is unavailable, before anything after it."""
        try:
            await retry_while_unavailable(
                lambda: put_once(self._store, key, body, content_type=content_type),
                self._failing,
            )
        except FollowerError as exc:
            add_context(exc, key=key, turn_id=self.turn_id, task_id=self._context.get("task_id"))
            raise


async def put_once(store: ObjectStore, key: str, body: bytes, *, content_type: str) -> None:
    """A write-once put: done when the key holds these bytes, a conflict when it holds others.

    The library's stores compare by themselves; for a store that only says the
    key exists (:class:`~follower.ObjectExistsError`), the bytes are compared here.
    """
    try:
        await store.put(key, body, content_type=content_type)
    except ObjectConflictError:
        raise
    except ObjectExistsError:
        check_same_bytes(key, await store.get(key), body)


async def write_next_turn(store: ObjectStore, keys: TurnKeys, next_turn_id: str | None) -> None:
    """Write a turn's ``next.json``: the turn after it, or null after the step's last.

    Retried while the store is unavailable, as a turn's other puts are; a cleanup
    write's bound ends the retries.
    """
    failing = FailureStreak(
        logger, f"the link of turn {keys.turn_id}", noun="put", extra={"turn_id": keys.turn_id}
    )
    body = NextLink(next_turn_id).encode()
    try:
        await retry_while_unavailable(
            lambda: put_once(store, keys.next, body, content_type=JSON), failing
        )
    except FollowerError as exc:
        add_context(exc, turn_id=keys.turn_id, key=keys.next)
        raise
