"""Reading a step's stored live trajectory back, turn after turn, as it is written.

The reader is a tail: it waits for new objects as long as its caller lets it
(or until ``idle_timeout_seconds`` pass with nothing new), because a missing
``next.json`` cannot tell a step still working from a worker that died. Inside
a turn that has no end mark, the writer's heartbeats can: a turn whose writer
beat once and then fell silent for the bound raises :class:`~follower.WriterGoneError`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, final, overload

import anyio
import attrs

from .._errors import (
    CorruptObjectError,
    FollowerError,
    ReaderIdleError,
    WriterGoneError,
    add_context,
)
from .._format._layout import (
    END,
    NEXT,
    TASK,
    EndMark,
    HeartbeatMark,
    NextLink,
    TaskMark,
    TurnKeys,
    chunk_positions,
    decode_events,
    heartbeat_name,
    parse_heartbeat_name,
)
from .._options import positive_seconds
from .._stores._protocol import folder_version, list_keys

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._format._wire import TrajectoryState
    from .._stores._protocol import ObjectStore

DEFAULT_READER_POLL_SECONDS = 1.0
# How long a store's listing may lag behind the puts it should show (an eventually
# consistent one lists an object late, and unevenly): past it, an end mark counting
# events that no listing shows is corrupt.
DEFAULT_LISTING_LAG_SECONDS = 5.0
# A turn's writer is gone once the reader has seen no new heartbeat (nor chunk) for this many
# of its heartbeat intervals, plus the listing lag, on the reader's own clock.
WRITER_GONE_HEARTBEATS = 3


@final
@attrs.frozen
class StoredEvent:
    """One stored event: the turn it belongs to and its position in that turn."""

    turn_id: str
    index: int
    event: Any


@final
@attrs.frozen
class TurnEnd:
    """The end of one stored turn, yielded after its events when ``turn_ends=True``.

    ``events``: how many events of the turn were read. ``complete``: the end mark
    says every event of the task is stored (``None``: a mark written before that
    was recorded). ``next_turn``: the turn read next, ``None`` after the last.
    """

    turn_id: str
    state: TrajectoryState
    events: int
    complete: bool | None
    next_turn: str | None


@overload
def read_live_trajectory(
    store: ObjectStore,
    prefix_key: str,
    turn_id: str,
    *,
    poll_interval_seconds: float = ...,
    idle_timeout_seconds: float | None = ...,
    listing_lag_seconds: float = ...,
    turn_ends: Literal[False] = ...,
) -> AsyncIterator[StoredEvent]: ...


@overload
def read_live_trajectory(
    store: ObjectStore,
    prefix_key: str,
    turn_id: str,
    *,
    poll_interval_seconds: float = ...,
    idle_timeout_seconds: float | None = ...,
    listing_lag_seconds: float = ...,
    turn_ends: bool,
) -> AsyncIterator[StoredEvent | TurnEnd]: ...


async def read_live_trajectory(
    store: ObjectStore,
    prefix_key: str,
    turn_id: str,
    *,
    poll_interval_seconds: float = DEFAULT_READER_POLL_SECONDS,
    idle_timeout_seconds: float | None = None,
    listing_lag_seconds: float = DEFAULT_LISTING_LAG_SECONDS,
    turn_ends: bool = False,
) -> AsyncIterator[StoredEvent | TurnEnd]:
    """Yield a step's stored events from ``turn_id`` on, until its last turn ends.

    With ``turn_ends=True``, a :class:`TurnEnd` follows each turn's events: its
    state and whether the turn is stored complete. Raises
    :class:`~follower.ReaderIdleError` when no new object appears for
    ``idle_timeout_seconds``, and :class:`~follower.CorruptObjectError` when the
    stored objects contradict each other. ``listing_lag_seconds`` is how late the
    store's listings may show an object after its put (an end mark listed before
    a chunk below it is waited on that long, on the reader's clock).

    Raises :class:`~follower.WriterGoneError` when a turn without an end mark
    has a writer that stored heartbeats, and the reader has seen no new
    heartbeat and no new chunk of it for 3 heartbeat intervals plus
    ``listing_lag_seconds`` of its own clock: the writer stopped without an end
    mark. A turn with no heartbeat (stored before they existed) is waited on
    as before.
    """
    keys = TurnKeys(prefix_key, turn_id)
    positive_seconds("poll_interval_seconds", poll_interval_seconds)
    positive_seconds("listing_lag_seconds", listing_lag_seconds)
    if idle_timeout_seconds is not None:
        positive_seconds("idle_timeout_seconds", idle_timeout_seconds)
    idle = _IdleClock(idle_timeout_seconds)
    seen: set[str] = set()
    current: str | None = turn_id
    previous: TurnKeys | None = None
    while current is not None:
        turn_keys = attrs.evolve(keys, turn_id=current)
        if current in seen:
            assert previous is not None  # the first turn is never seen before
            # The link at fault is the one that led back: the previous turn's.
            raise CorruptObjectError(
                f"turn {previous.turn_id!r} links back to turn {current!r}: the links loop",
                turn_id=previous.turn_id,
                key=previous.next,
            )
        seen.add(current)
        turn = _TurnReader(store, turn_keys, listing_lag_seconds)
        try:
            while not turn.done:
                async for event in turn.read_new():
                    idle.touch()
                    yield event
                if turn.progressed:
                    idle.touch()
                elif not turn.done:
                    await anyio.sleep(poll_interval_seconds)
                    idle.check(turn.prefix)
        except FollowerError as exc:
            # The layout's and the store's errors know their key; the turn is known here.
            add_context(exc, turn_id=current, key=turn.prefix)
            raise
        if turn_ends:
            assert turn.end is not None
            yield TurnEnd(
                turn.turn_id, turn.end.state, turn.cursor, turn.end.complete, turn.next_turn
            )
        previous, current = turn_keys, turn.next_turn


@attrs.define(eq=False)
class _IdleClock:
    """How long the reader has found nothing new: raises once that reaches ``timeout``."""

    _timeout: float | None
    _last: float = attrs.field(init=False, factory=anyio.current_time)

    def touch(self) -> None:
        self._last = anyio.current_time()

    def check(self, where: str) -> None:
        if self._timeout is not None and anyio.current_time() - self._last >= self._timeout:
            raise ReaderIdleError(f"no new object under {where!r} for {self._timeout} s", key=where)


# Chunk names sort by position while positions fit their 8 digits; past that
# ("100000000-..." < "99999000-..."), every poll lists the whole folder.
_ORDERED_POSITIONS = 10**8
# A store's folder version is believed for this long at most: a filesystem whose folders'
# time stamps never move (some network or FUSE mounts) then delays a chunk by this, not for ever.
_RELIST_SECONDS = 30.0


@attrs.frozen
class _Listing:
    """A listing after ``start_after``, and the folder's version taken just before it."""

    start_after: str
    version: object
    names: list[str]
    at: float  # the reader's clock when it was made


@attrs.define(eq=False)
class _TurnReader:
    """One turn's objects, read as far as they go at each listing.

    A poll lists only the keys after the last chunk read (the store skips the
    rest: S3 natively, the others as cheaply as they can), and the marks, which
    sort after every chunk; a store that can tell its folder has not changed
    (``folder_version``) spares it even that. A chunk that sorts before the last one read can only
    be a late put of an earlier attempt; before a gap is waited on, or the end
    believed, one whole listing reads and checks such chunks too.
    """

    store: ObjectStore
    keys: TurnKeys
    listing_lag_seconds: float
    prefix: str = attrs.field(init=False)
    turn_id: str = attrs.field(init=False)
    cursor: int = attrs.field(init=False, default=0)
    end_next: int | None = attrs.field(init=False, default=None)
    next_turn: str | None = attrs.field(init=False, default=None)
    end: EndMark | None = attrs.field(init=False, default=None)
    done: bool = attrs.field(init=False, default=False)
    progressed: bool = attrs.field(init=False, default=False)
    # When a listing first fell short of the end.
    _short_since: float | None = attrs.field(init=False, default=None)
    # Chunk name -> (after, next), read.
    _read: dict[str, tuple[int, int]] = attrs.field(init=False, factory=dict)
    _last_read: str | None = attrs.field(init=False, default=None)  # the greatest chunk name read
    _gap: bool = attrs.field(init=False, default=False)  # the last pass stopped past the cursor
    # The last listing after a chunk, if versioned.
    _listing: _Listing | None = attrs.field(init=False, default=None)
    # The writer's heartbeats: the newest seen (its number and key), the interval it
    # gave, and when the reader last saw a sign of life (a new heartbeat or chunk).
    _heartbeat_seq: int | None = attrs.field(init=False, default=None)
    _heartbeat_seconds: float | None = attrs.field(init=False, default=None)  # None: no rule
    _alive_at: float = attrs.field(init=False, factory=anyio.current_time)
    _looked_at: float = attrs.field(init=False, default=-math.inf)  # the last listing of alive/
    _task_read: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        self.prefix = self.keys.live
        self.turn_id = self.keys.turn_id

    async def read_new(self) -> AsyncIterator[StoredEvent]:
        """Yield the events stored since the last call, and note end and link marks."""
        self.progressed = False
        start_after = self._start_after()
        names = await self._list(start_after)
        async for event in self._read_chunks(names):
            yield event
        await self._note_end(names)
        if start_after is not None and self._settling(names):
            names = await self._list(None)
            async for event in self._read_chunks(names):
                yield event
        if self.end_next is not None:
            self._check_complete()
        if self.end_next is not None and self.cursor >= self.end_next and NEXT in names:
            self.next_turn = NextLink.decode(await self._get(NEXT), self.prefix + NEXT).turn
            self.done = True
            self.progressed = True
        if not self._task_read and TASK in names:
            await self._note_task()
        if not self.done and self.end is None:
            await self._watch_writer()

    async def _note_task(self) -> None:
        """Learn from ``task.json`` whether the turn's writer beats, and how often."""
        self._task_read = True
        task = TaskMark.decode(await self._get(TASK), self.prefix + TASK)
        if task.heartbeat_seconds is not None:
            self._heartbeat_seconds = task.heartbeat_seconds
            self._alive_at = anyio.current_time()  # the writer's word is a sign of life

    async def _watch_writer(self) -> None:
        """Raise :class:`WriterGoneError` once the turn's heartbeats stopped for the bound.

        Judged on the reader's own clock only (how long since it last saw a new
        heartbeat or chunk), never by comparing the writer's clock with its own,
        so a skewed clock on either side cannot make a live writer look gone.
        A turn whose ``task.json`` names no ``heartbeat_seconds`` (an older
        writer's, or none yet) is never judged, and costs no listing.
        """
        beat = self._heartbeat_seconds
        if beat is None:
            return  # its task.json says no heartbeat: a writer from before them
        now = anyio.current_time()
        if self.progressed:
            self._alive_at = now  # a new chunk is a sign of life too
            return
        bound = WRITER_GONE_HEARTBEATS * beat + self.listing_lag_seconds
        # Looked for twice an interval, so a heartbeat is seen at most half an interval
        # (and a poll) after a listing can show it, whatever its phase; and once more
        # before the writer is judged gone, so it never is on a stale look.
        if now - self._looked_at < beat / 2 and now - self._alive_at < bound:
            return
        self._looked_at = now
        if await self._new_heartbeat():
            self._alive_at = anyio.current_time()
            return
        silent = anyio.current_time() - self._alive_at
        if silent >= bound:
            alive = self.keys.alive
            raise WriterGoneError(
                f"the writer of turn {self.turn_id!r} stopped without an end mark: no new "
                f"heartbeat under {alive!r} nor chunk for {silent:.1f} s of this reader's "
                f"clock (it beat every {beat:g} s; the bound is {WRITER_GONE_HEARTBEATS} x "
                f"{beat:g} s + {self.listing_lag_seconds:g} s of listing lag)",
                heartbeat_seconds=beat,
                silent_seconds=silent,
                turn_id=self.turn_id,
                key=alive,
            )

    async def _new_heartbeat(self) -> bool:
        """Whether the writer stored a heartbeat the reader had not seen; notes its interval."""
        alive, seen = self.keys.alive, self._heartbeat_seq
        start_after = (
            None if seen is None or seen >= _ORDERED_POSITIONS else alive + heartbeat_name(seen)
        )
        newest: tuple[int, str] | None = None
        for key in await list_keys(self.store, alive, start_after=start_after):
            if not (isinstance(key, str) and key.startswith(alive)):
                raise CorruptObjectError(
                    f"listing {alive!r} gave what is not a key under it: {key!r:.200}", key=alive
                )
            seq = parse_heartbeat_name(key[len(alive) :])
            if seq is None or (seen is not None and seq <= seen):
                continue
            if newest is None or seq > newest[0]:
                newest = (seq, key)
        if newest is None:
            return False
        mark = HeartbeatMark.decode(await self.store.get(newest[1]), newest[1])
        self._heartbeat_seq, self._heartbeat_seconds = newest[0], mark.heartbeat_seconds
        return True

    def _start_after(self) -> str | None:
        if self._last_read is None or self.cursor >= _ORDERED_POSITIONS:
            return None
        return self.prefix + self._last_read

    def _settling(self, names: list[str]) -> bool:
        """Whether a whole listing must be read before what this one shows is believed."""
        if self._gap:
            return True
        # The end mark: short of it, or about to follow the link past this turn.
        return self.end_next is not None and (self.cursor < self.end_next or NEXT in names)

    async def _list(self, start_after: str | None) -> list[str]:
        if start_after is None:
            return await self._list_keys(None)
        # A store that can tell its folder unchanged (FilesystemStore) spares an idle
        # poll the listing, which on a filesystem reads every name of a long turn.
        version = await folder_version(self.store, self.prefix)
        now = anyio.current_time()
        last = self._listing
        if (
            version is not None
            and last is not None
            and last.start_after == start_after
            and last.version == version
            and now - last.at < _RELIST_SECONDS
        ):
            return last.names
        names = await self._list_keys(start_after)
        self._listing = None if version is None else _Listing(start_after, version, names, now)
        return names

    async def _list_keys(self, start_after: str | None) -> list[str]:
        return self.keys.names(await list_keys(self.store, self.prefix, start_after=start_after))

    async def _read_chunks(self, names: list[str]) -> AsyncIterator[StoredEvent]:
        self._gap = False
        for after, next_, name in chunk_positions(names):
            if name in self._read:
                continue
            if after > self.cursor:
                self._gap = True  # the chunk before it is not written yet
                break
            events = await self._chunk_events(after, next_, name)
            if after < self.cursor:
                # Positions are absolute: a retry may store a chunk over ones already read.
                await self._check_agrees(after, name, events)
            self._read[name] = (after, next_)
            if self._last_read is None or name > self._last_read:
                self._last_read = name
            for index in range(self.cursor, next_):
                yield StoredEvent(self.turn_id, index, events[index - after])
            self.cursor = max(self.cursor, next_)
            self.progressed = True

    async def _note_end(self, names: list[str]) -> None:
        if self.end_next is None and END in names:
            self.end = EndMark.decode(await self._get(END), self.prefix + END)
            self.end_next = self.end.next
            self.progressed = True

    def _check_complete(self) -> None:
        # end.json's next means "at least this many": a put that landed after its
        # bound may continue the chain past it, and those events are read too.
        assert self.end_next is not None
        if self.cursor < self.end_next:
            # end.json is written after every chunk below it, so they are all stored.
            # A listing may still show it first (S3's is strongly consistent; other
            # stores' lag, unevenly): short for longer than a listing may lag is corrupt.
            now = anyio.current_time()
            if self._short_since is None:
                self._short_since = now
            elif now - self._short_since >= self.listing_lag_seconds:
                raise CorruptObjectError(
                    f"{self.prefix + END!r} says {self.end_next} events, "
                    f"but only {self.cursor} are stored (listed for "
                    f"{self.listing_lag_seconds:g} s after the end mark was)",
                    key=self.prefix + END,
                )

    async def _get(self, name: str) -> bytes:
        return await self.store.get(self.prefix + name)

    async def _chunk_events(self, after: int, next_: int, name: str) -> list[Any]:
        key = self.prefix + name
        events = decode_events(await self.store.get(key), key)
        if len(events) != next_ - after:
            raise CorruptObjectError(
                f"chunk {key!r} holds {len(events)} events, its name says {next_ - after}",
                key=key,
            )
        return events

    async def _check_agrees(self, after: int, name: str, events: list[Any]) -> None:
        """Two chunks that overlap must agree on every shared position, else both are suspect."""
        for other, (o_after, o_next) in self._read.items():
            start, stop = max(after, o_after), min(after + len(events), o_next)
            if start >= stop:
                continue
            theirs = await self._chunk_events(o_after, o_next, other)
            if events[start - after : stop - after] != theirs[start - o_after : stop - o_after]:
                raise CorruptObjectError(
                    f"chunks {self.prefix + other!r} and {self.prefix + name!r} overlap "
                    f"and disagree on events {start}..{stop - 1}",
                    key=self.prefix + name,
                )
