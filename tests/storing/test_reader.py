"""Reading a step's stored live trajectory back (docs/protocol.md, "Reading a step back").

The reader lists a turn's chunks in order, yields their events, polls until
``end.json``, then follows ``next.json`` to the next turn until ``{"turn": null}``.

Most tests run on virtual time with the in-memory store, so polls and idle
timeouts take no real time. The filesystem store works in worker threads, which
virtual clocks would time out: its tests (the class at the end) use real time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import follower
from follower import (
    CorruptObjectError,
    FilesystemStore,
    FollowerError,
    InvalidArgumentError,
    InvalidKeyError,
    MemoryStore,
    ObjectStore,
    ReaderIdleError,
    StoredEvent,
    TrajectoryState,
    read_live_trajectory,
)
from follower._format._layout import TurnKeys
from follower._storing._chunks import write_next_turn
from follower.lowlevel import LiveTrajectoryChunks, TrajectoryBatch

from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"
POLL = 0.1
FORMAT = "demo/v1"
JSON = "application/json"


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


# --- helpers --------------------------------------------------------------------------


class ObservedStore:
    """Passes everything to ``inner``; wakes whoever waits once a listing finishes.

    The writer side of a test orders itself on the reader's listings, never on sleeps.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.listings = 0
        self.asked: list[str | None] = []  # each listing's start_after
        self.returned: list[list[str]] = []  # and what it returned
        self._listed = anyio.Event()

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await self.inner.put(key, body, content_type=content_type)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        keys = await self.inner.list(prefix, start_after=start_after)
        self.listings += 1
        self.asked.append(start_after)
        self.returned.append(keys)
        listed, self._listed = self._listed, anyio.Event()
        listed.set()
        return keys

    async def next_listing(self) -> None:
        """Wait until a listing that had not finished when this was called finishes."""
        await self._listed.wait()


def live(turn_id: str, name: str) -> str:
    return f"{PREFIX}{turn_id}/live/{name}"


def expected(turn_id: str, events: Sequence[Any], start: int = 0) -> list[StoredEvent]:
    return [StoredEvent(turn_id, start + n, event) for n, event in enumerate(events)]


def batch(after: int, events: Sequence[Any], *, last: bool = False) -> TrajectoryBatch:
    return TrajectoryBatch(
        after=after,
        next=after + len(events),
        events=events,
        format=FORMAT,
        state=TrajectoryState.COMPLETED if last else TrajectoryState.RUNNING,
        last=last,
    )


async def store_turn(
    store: ObjectStore,
    turn_id: str,
    pages: Sequence[Sequence[Any]],
    *,
    next_turn: str | None = None,
    linked: bool = True,
    ended: bool = True,
) -> list[StoredEvent]:
    """Store one turn the way a follower does; return the events a reader should yield."""
    sink = LiveTrajectoryChunks(store, PREFIX, turn_id)
    after = 0
    for n, page in enumerate(pages):
        await sink(batch(after, page, last=n == len(pages) - 1))
        after += len(page)
    if ended:
        await sink.end(TrajectoryState.COMPLETED)
    if linked:
        await write_next_turn(store, TurnKeys(PREFIX, turn_id), next_turn)
    return expected(turn_id, [event for page in pages for event in page])


# On virtual time a reader that loops without sleeping never lets the clock reach
# the test's deadline: bound the events read, so such a bug fails instead of hanging.
MAX_EVENTS = 1000


async def read_all(store: ObjectStore, turn_id: str, **options: Any) -> list[StoredEvent]:
    options.setdefault("poll_interval_seconds", POLL)
    got: list[StoredEvent] = []
    async for event in read_live_trajectory(store, PREFIX, turn_id, **options):
        got.append(event)
        if len(got) > MAX_EVENTS:
            pytest.fail(f"the reader yielded more than {MAX_EVENTS} events")
    return got


async def read_until_error(
    store: ObjectStore, turn_id: str, error: type[BaseException], **options: Any
) -> list[StoredEvent]:
    """Read until ``error`` is raised (the test fails if it is not); return what came first."""
    options.setdefault("poll_interval_seconds", POLL)
    got: list[StoredEvent] = []
    with pytest.raises(error):
        async for event in read_live_trajectory(store, PREFIX, turn_id, **options):
            got.append(event)
            if len(got) > MAX_EVENTS:
                pytest.fail(f"the reader yielded more than {MAX_EVENTS} events")
    return got


async def put(store: ObjectStore, key: str, body: bytes) -> None:
    await store.put(key, body, content_type=JSON)


EVENTS = [
    {"kind": "message", "text": "hello"},
    [1, 2.5, None],
    "line\nbreak",
    None,
    True,
    {"nested": {"deep": ["é", "\u2028"]}},
    0,
    "",
]


# --- one turn, several turns ----------------------------------------------------------


async def test_one_turn_yields_its_events_in_order_with_their_indexes() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        want = await store_turn(store, "t1", [EVENTS[:3], EVENTS[3:4], EVENTS[4:]])
        got = await read_all(store, "t1")
        assert got == want
        assert [e.index for e in got] == list(range(len(EVENTS)))
        assert [e.event for e in got] == EVENTS
        assert {e.turn_id for e in got} == {"t1"}


def test_stored_event_is_a_frozen_value() -> None:
    event = follower.StoredEvent("t1", 0, {"a": 1})
    assert event == StoredEvent(turn_id="t1", index=0, event={"a": 1})
    with pytest.raises(AttributeError):
        event.index = 1  # type: ignore[misc]


async def test_turns_linked_by_next_json_are_read_in_order_until_a_null_link() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        want = await store_turn(store, "t1", [EVENTS[:2], EVENTS[2:3]], next_turn="t2")
        want += await store_turn(store, "t2", [], next_turn="t3")  # a turn with no events
        want += await store_turn(store, "t3", [EVENTS[3:]], next_turn=None)
        # A turn nothing links to is not read.
        await store_turn(store, "t4", [["unlinked"]], next_turn=None)
        got = await read_all(store, "t1")
        assert got == want
        assert [(e.turn_id, e.index) for e in got] == [
            ("t1", 0),
            ("t1", 1),
            ("t1", 2),
            *[("t3", n) for n in range(len(EVENTS) - 3)],
        ]


async def test_reading_can_start_at_a_later_turn() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await store_turn(store, "t1", [EVENTS[:2]], next_turn="t2")
        want = await store_turn(store, "t2", [EVENTS[2:]], next_turn=None)
        assert await read_all(store, "t2") == want


async def test_turns_under_the_empty_prefix_are_read() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        sink = LiveTrajectoryChunks(store, "", "t1")
        await sink(batch(0, ["a", "b"], last=True))
        await sink.end(TrajectoryState.COMPLETED)
        await write_next_turn(store, TurnKeys("", "t1"), None)
        got = [e async for e in read_live_trajectory(store, "", "t1", poll_interval_seconds=POLL)]
        assert got == expected("t1", ["a", "b"])


async def test_objects_other_than_chunks_are_ignored() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await put(store, live("t1", "notes.txt"), b"not a chunk")
        await put(store, live("t1", "sub/00000000-00000001.jsonl"), b'"deeper"\n')
        want = await store_turn(store, "t1", [["a"], ["b"]], next_turn=None)
        assert store.content_type(live("t1", "meta.json")) == JSON
        assert await read_all(store, "t1") == want


@settings(max_examples=30, deadline=None)
@given(
    turns=st.lists(
        st.lists(st.lists(st.integers() | st.text(max_size=5) | st.none(), max_size=3), max_size=3),
        min_size=1,
        max_size=4,
    )
)
async def test_any_stored_trajectory_is_read_back_exactly(turns: list[list[list[Any]]]) -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        ids = [f"turn-{n}" for n in range(len(turns))]
        want: list[StoredEvent] = []
        for n, (turn_id, pages) in enumerate(zip(ids, turns, strict=True)):
            following = ids[n + 1] if n + 1 < len(ids) else None
            want += await store_turn(store, turn_id, pages, next_turn=following)
        assert await read_all(store, ids[0]) == want


# --- a reader that starts before the writer -------------------------------------------


async def follow_a_concurrent_writer(inner: ObjectStore, poll: float) -> None:
    """Start a reader on an empty store; write two turns as it reads; check every event."""
    store = ObservedStore(inner)
    send, receive = anyio.create_memory_object_stream[StoredEvent](math.inf)
    got: list[StoredEvent] = []

    async def read() -> None:
        async with send:
            async for event in read_live_trajectory(
                store, PREFIX, "t1", poll_interval_seconds=poll
            ):
                await send.send(event)

    async def receive_events(count: int) -> None:
        for _ in range(count):
            got.append(await receive.receive())

    async with receive, anyio.create_task_group() as tg:
        tg.start_soon(read)
        await store.next_listing()  # the reader found nothing
        t1 = LiveTrajectoryChunks(store, PREFIX, "t1")
        await t1(batch(0, EVENTS[:2]))
        await receive_events(2)
        await t1(batch(2, []))  # a page with no events stores nothing
        await t1(batch(2, EVENTS[2:3]))
        await receive_events(1)
        await t1(batch(3, EVENTS[3:4], last=True))
        await t1.end(TrajectoryState.COMPLETED)  # chunk and end mark land together
        await receive_events(1)
        await store.next_listing()  # ended, not linked yet: the reader waits
        await write_next_turn(store, TurnKeys(PREFIX, "t1"), "t2")
        await store.next_listing()
        await store.next_listing()  # the reader polls t2, which holds nothing yet
        t2 = LiveTrajectoryChunks(store, PREFIX, "t2")
        await t2(batch(0, EVENTS[4:6]))
        await receive_events(2)
        await t2(batch(2, EVENTS[6:], last=True))
        await receive_events(len(EVENTS) - 6)
        await t2.end(TrajectoryState.COMPLETED)
        await store.next_listing()
        await write_next_turn(store, TurnKeys(PREFIX, "t2"), None)
        # The reader ends on the null link, closing the stream.
        got.extend([event async for event in receive])

    assert got == expected("t1", EVENTS[:4]) + expected("t2", EVENTS[4:])


async def test_a_reader_started_first_yields_exactly_the_events_written_while_it_reads() -> None:
    with anyio.fail_after(10):
        await follow_a_concurrent_writer(MemoryStore(), POLL)


async def test_a_new_chunk_is_yielded_within_one_poll_interval() -> None:
    with anyio.fail_after(10):
        store = ObservedStore(MemoryStore())
        poll = 2.0
        send, receive = anyio.create_memory_object_stream[StoredEvent](math.inf)

        async def read() -> None:
            async with send:
                async for event in read_live_trajectory(
                    store, PREFIX, "t1", poll_interval_seconds=poll
                ):
                    await send.send(event)

        async with receive, anyio.create_task_group() as tg:
            tg.start_soon(read)
            await store.next_listing()
            sink = LiveTrajectoryChunks(store, PREFIX, "t1")
            written_at = anyio.current_time()
            await sink(batch(0, ["a"], last=True))
            assert await receive.receive() == StoredEvent("t1", 0, "a")
            assert anyio.current_time() - written_at <= poll + 0.01
            await sink.end(TrajectoryState.COMPLETED)
            await write_next_turn(store, TurnKeys(PREFIX, "t1"), None)
            assert [event async for event in receive] == []


async def test_the_reader_polls_at_its_interval() -> None:
    with anyio.fail_after(10):
        store = ObservedStore(MemoryStore())
        started = anyio.current_time()
        await read_until_error(
            store, "t1", ReaderIdleError, poll_interval_seconds=0.25, idle_timeout_seconds=2.0
        )
        # Over 2 s at a 0.25 s interval: about 8 listings, not one and not thousands.
        assert 7 <= store.listings <= 9
        assert anyio.current_time() - started == pytest.approx(2.0, abs=0.3)


# --- listing only what is new ------------------------------------------------------------


class ReaderTask:
    """A reader of turn t1 in a task, its events delivered through a stream."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._send, self._receive = anyio.create_memory_object_stream[StoredEvent](math.inf)

    async def run(self) -> None:
        async with self._send:
            async for event in read_live_trajectory(
                self.store, PREFIX, "t1", poll_interval_seconds=POLL
            ):
                await self._send.send(event)

    async def events(self, count: int) -> list[StoredEvent]:
        return [await self._receive.receive() for _ in range(count)]

    async def rest(self) -> list[StoredEvent]:
        async with self._receive:
            return [event async for event in self._receive]


async def test_an_idle_poll_lists_only_what_sorts_after_the_last_chunk_read() -> None:
    with anyio.fail_after(10):
        store = ObservedStore(MemoryStore())
        sink = LiveTrajectoryChunks(store, PREFIX, "t1")
        for n in range(20):
            await sink(batch(n, [n]))
        reader = ReaderTask(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.run)
            assert await reader.events(20) == expected("t1", list(range(20)))
            await store.next_listing()
            await store.next_listing()
            last_chunk = live("t1", "00000019-00000020.jsonl")
            assert store.asked[0] is None  # nothing read yet: the whole folder
            assert store.asked[-1] == last_chunk
            assert store.returned[-1] == [live("t1", "meta.json")]  # the marks only
            await sink(batch(20, [20], last=True))
            await sink.end(TrajectoryState.COMPLETED)
            await write_next_turn(store, TurnKeys(PREFIX, "t1"), None)
            assert await reader.rest() == expected("t1", [20], start=20)
        # Only the listing that was about to follow the link listed the folder whole.
        assert store.asked.count(None) == 2
        assert max(len(keys) for keys in store.returned[1:-1]) <= 4


async def test_a_late_chunk_that_sorts_before_the_last_one_read_is_not_waited_for() -> None:
    # An earlier attempt's put lands late: [1, 6) sorts before [2, 4), which was read,
    # and holds events 4 and 5 that the chunk after them, [6, 8), needs.
    with anyio.fail_after(10):
        store = ObservedStore(MemoryStore())
        await put(store, live("t1", "00000000-00000002.jsonl"), b'"a"\n"b"\n')
        await put(store, live("t1", "00000002-00000004.jsonl"), b'"c"\n"d"\n')
        reader = ReaderTask(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.run)
            assert await reader.events(4) == expected("t1", ["a", "b", "c", "d"])
            await put(store, live("t1", "00000001-00000006.jsonl"), b'"b"\n"c"\n"d"\n"e"\n"f"\n')
            await put(store, live("t1", "00000006-00000008.jsonl"), b'"g"\n"h"\n')
            # Before any end mark: a gap is never waited on without a whole listing.
            assert await reader.events(4) == expected("t1", ["e", "f", "g", "h"], start=4)
            await put(store, live("t1", "end.json"), b'{"state":"completed","next":8}')
            await put(store, live("t1", "next.json"), b'{"turn":null}')
            assert await reader.rest() == []


async def test_a_late_chunk_that_disagrees_is_corrupt_though_it_sorts_before_the_last_read() -> (
    None
):
    with anyio.fail_after(10):
        store = ObservedStore(MemoryStore())
        await put(store, live("t1", "00000000-00000002.jsonl"), b'"a"\n"b"\n')
        await put(store, live("t1", "00000002-00000004.jsonl"), b'"c"\n"d"\n')
        reader = ReaderTask(store)
        corrupt = pytest.RaisesExc(CorruptObjectError, match="00000001-00000003")
        with pytest.RaisesGroup(corrupt):
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run)
                assert await reader.events(4) == expected("t1", ["a", "b", "c", "d"])
                await put(store, live("t1", "00000001-00000003.jsonl"), b'"x"\n"y"\n')
                await store.next_listing()  # an idle poll does not see it
                await put(store, live("t1", "end.json"), b'{"state":"completed","next":4}')
                await put(store, live("t1", "next.json"), b'{"turn":null}')
                await reader.rest()


class OldProtocolStore:
    """A store written before ``start_after``: ``list(prefix)`` only; wakes on listings."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self._listed = anyio.Event()

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await self.inner.put(key, body, content_type=content_type)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def list(self, prefix: str) -> list[str]:
        keys = await self.inner.list(prefix)
        listed, self._listed = self._listed, anyio.Event()
        listed.set()
        return keys

    async def next_listing(self) -> None:
        await self._listed.wait()


async def test_a_store_of_the_old_protocol_is_read_as_it_is_written() -> None:
    with anyio.fail_after(10):
        store = OldProtocolStore()
        sink = LiveTrajectoryChunks(store, PREFIX, "t1")  # type: ignore[arg-type]
        await sink(batch(0, ["a", "b"]))
        reader = ReaderTask(store)  # type: ignore[arg-type]
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.run)
            assert await reader.events(2) == expected("t1", ["a", "b"])
            await store.next_listing()
            await sink(batch(2, ["c"], last=True))
            assert await reader.events(1) == expected("t1", ["c"], start=2)
            await sink.end(TrajectoryState.COMPLETED)
            await write_next_turn(store, TurnKeys(PREFIX, "t1"), None)  # type: ignore[arg-type]
            assert await reader.rest() == []


# --- waiting and idleness ---------------------------------------------------------------


async def test_idle_timeout_raises_reader_idle_error_on_an_empty_store() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        started = anyio.current_time()
        with pytest.raises(ReaderIdleError) as caught:
            await read_all(store, "t1", poll_interval_seconds=1.0, idle_timeout_seconds=5.0)
        elapsed = anyio.current_time() - started
        assert 5.0 <= elapsed <= 6.0 + 0.01
        assert isinstance(caught.value, FollowerError)
        assert isinstance(caught.value, TimeoutError)


async def test_idle_timeout_raises_after_the_events_when_the_link_never_comes() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        want = await store_turn(store, "t1", [EVENTS[:3]], linked=False)
        got = await read_until_error(
            store, "t1", ReaderIdleError, poll_interval_seconds=1.0, idle_timeout_seconds=3.0
        )
        assert got == want


async def test_idle_timeout_raises_while_waiting_for_the_end_mark() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        want = await store_turn(store, "t1", [EVENTS[:2]], ended=False, linked=False)
        got = await read_until_error(
            store, "t1", ReaderIdleError, poll_interval_seconds=1.0, idle_timeout_seconds=3.0
        )
        assert got == want


async def test_each_new_object_restarts_the_idle_clock() -> None:
    with anyio.fail_after(10):
        store = ObservedStore(MemoryStore())
        idle = 2.0
        gap = 1.5  # each object lands within the idle timeout of the one before
        send, receive = anyio.create_memory_object_stream[StoredEvent](math.inf)
        got: list[StoredEvent] = []

        async def read() -> None:
            async with send:
                async for event in read_live_trajectory(
                    store, PREFIX, "t1", poll_interval_seconds=0.25, idle_timeout_seconds=idle
                ):
                    await send.send(event)

        started = anyio.current_time()
        async with receive, anyio.create_task_group() as tg:
            tg.start_soon(read)
            sink = LiveTrajectoryChunks(store, PREFIX, "t1")
            for n in range(2):
                # Virtual time passes here; the order comes from the stream below.
                await anyio.sleep(gap)
                await sink(batch(n, [n]))
                got.append(await receive.receive())
            await anyio.sleep(gap)
            await sink.end(TrajectoryState.COMPLETED)  # the end mark is new too
            await store.next_listing()
            await anyio.sleep(gap)
            await write_next_turn(store, TurnKeys(PREFIX, "t1"), None)
            got.extend([event async for event in receive])

        assert got == expected("t1", [0, 1])
        assert anyio.current_time() - started >= 4 * gap > 2 * idle


async def test_without_idle_timeout_the_reader_waits_as_long_as_its_caller_lets_it() -> None:
    with anyio.fail_after(10):
        store = ObservedStore(MemoryStore())
        got: list[StoredEvent] = []
        with anyio.move_on_after(8.0) as scope:
            async for event in read_live_trajectory(store, PREFIX, "t1", poll_interval_seconds=1):
                got.append(event)
        assert scope.cancelled_caught
        assert got == []
        assert store.listings >= 7  # it kept polling the whole time


# --- bad arguments ----------------------------------------------------------------------


@pytest.mark.parametrize("poll", [0, -1.0])
async def test_a_poll_interval_that_is_not_positive_is_refused(poll: float) -> None:
    with anyio.fail_after(10), pytest.raises(ValueError, match="poll_interval_seconds"):
        await read_all(MemoryStore(), "t1", poll_interval_seconds=poll)


@pytest.mark.parametrize(("prefix", "turn_id"), [("steps", "t1"), ("/s/", "t1"), (PREFIX, "a/b")])
async def test_bad_prefixes_and_turn_ids_are_refused(prefix: str, turn_id: str) -> None:
    with anyio.fail_after(10), pytest.raises(InvalidKeyError):
        async for _ in read_live_trajectory(
            MemoryStore(), prefix, turn_id, poll_interval_seconds=POLL
        ):
            pass


# --- corrupt stores ---------------------------------------------------------------------


async def test_a_chunk_line_that_is_not_json_is_corrupt() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await put(store, live("t1", "00000000-00000002.jsonl"), b'"a"\n"b"\n')
        await put(store, live("t1", "00000002-00000004.jsonl"), b'"c"\n{not json\n')
        # The events stored before the bad chunk still come out.
        got = await read_until_error(store, "t1", CorruptObjectError)
        assert got == expected("t1", ["a", "b"])


@pytest.mark.parametrize(
    "body", [b'"a"\n', b'"a"\n"b"\n"c"\n', b""], ids=["fewer", "more", "empty"]
)
async def test_a_chunk_holding_another_count_of_events_than_its_name_is_corrupt(
    body: bytes,
) -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await put(store, live("t1", "00000000-00000002.jsonl"), body)
        await read_until_error(store, "t1", CorruptObjectError)


async def test_overlapping_chunks_are_corrupt() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await put(store, live("t1", "00000000-00000002.jsonl"), b'"a"\n"b"\n')
        await put(store, live("t1", "00000001-00000003.jsonl"), b'"x"\n"y"\n')
        await read_until_error(store, "t1", CorruptObjectError)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("00000000-00000002.jsonl", b'"a"\n"b"\n'), ("00000001-00000003.jsonl", b'"b"\n"c"\n')),
        (
            ("00000000-00000002.jsonl", b'"a"\n"b"\n'),
            ("00000000-00000003.jsonl", b'"a"\n"b"\n"c"\n'),
        ),
        (("00000000-00000003.jsonl", b'"a"\n"b"\n"c"\n'), ("00000001-00000002.jsonl", b'"b"\n')),
    ],
    ids=["partly", "a-longer-retry", "inside"],
)
async def test_overlapping_chunks_that_agree_are_read_as_one(
    first: tuple[str, bytes], second: tuple[str, bytes]
) -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        for name, body in (first, second):
            await put(store, live("t1", name), body)
        await put(store, live("t1", "end.json"), b'{"state":"completed","next":3}')
        await put(store, live("t1", "next.json"), b'{"turn":null}')
        assert await read_all(store, "t1") == expected("t1", ["a", "b", "c"])


async def test_overlapping_chunks_that_disagree_name_both_keys() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await put(store, live("t1", "00000000-00000003.jsonl"), b'"a"\n"b"\n"c"\n')
        await put(store, live("t1", "00000001-00000002.jsonl"), b'"x"\n')
        with pytest.raises(CorruptObjectError) as caught:
            await read_all(store, "t1")
        assert "00000000-00000003.jsonl" in str(caught.value)
        assert "00000001-00000002.jsonl" in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[2]", b'{"state":"completed"}', b'{"next":-1}', b'{"next":"2"}'],
    ids=["not-json", "not-an-object", "no-next", "negative-next", "string-next"],
)
async def test_an_unreadable_end_mark_is_corrupt(body: bytes) -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await put(store, live("t1", "00000000-00000002.jsonl"), b'"a"\n"b"\n')
        await put(store, live("t1", "end.json"), body)
        await read_until_error(store, "t1", CorruptObjectError)


@pytest.mark.parametrize(
    "objects",
    [
        pytest.param(
            {"end.json": b'{"state":"completed","next":5}', "next.json": b'{"turn":null}'},
            id="more-than-stored",
        ),
        pytest.param(
            {"00000003-00000004.jsonl": b'"d"\n', "end.json": b'{"state":"completed","next":4}'},
            id="past-a-gap",
        ),
    ],
)
async def test_an_end_mark_counting_events_that_are_not_stored_is_corrupt(
    objects: dict[str, bytes],
) -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await put(store, live("t1", "00000000-00000002.jsonl"), b'"a"\n"b"\n')
        for name, body in objects.items():
            await put(store, live("t1", name), body)
        got = await read_until_error(store, "t1", CorruptObjectError)
        assert got == expected("t1", ["a", "b"])


async def test_an_end_mark_counting_fewer_events_than_stored_is_at_least_that_many() -> None:
    # end.json's next means "at least": a chunk whose put landed after its bound is read.
    with anyio.fail_after(10):
        store = MemoryStore()
        await put(store, live("t1", "00000000-00000003.jsonl"), b'"a"\n"b"\n"c"\n')
        await put(store, live("t1", "end.json"), b'{"state":"completed","next":2}')
        await put(store, live("t1", "next.json"), b'{"turn":null}')
        assert await read_all(store, "t1") == expected("t1", ["a", "b", "c"])


async def test_a_chunk_stored_after_the_end_mark_continues_the_chain() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await store_turn(store, "t1", [["a"]])
        await put(store, live("t1", "00000001-00000002.jsonl"), b'"late"\n')
        assert await read_all(store, "t1") == expected("t1", ["a", "late"])


# --- listings that lag -------------------------------------------------------------------


class LaggingStore:
    """A store whose listings show each object only some seconds after its put returned.

    As an eventually consistent store's listing would: reads see an object at
    once, listings unevenly late. ``lags`` maps an object's name (the part after
    the turn's folder) to its lag on the reader's clock; other objects show at once.
    """

    def __init__(self, lags: dict[str, float]) -> None:
        self.inner = MemoryStore()
        self.lags = lags
        self._shown_at: dict[str, float] = {}

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await self.inner.put(key, body, content_type=content_type)
        lag = self.lags.get(key.rsplit("/", 1)[-1], 0.0)
        self._shown_at.setdefault(key, anyio.current_time() + lag)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        now = anyio.current_time()
        keys = await self.inner.list(prefix, start_after=start_after)
        return [key for key in keys if self._shown_at[key] <= now]


def four_chunks_ended() -> list[tuple[str, bytes]]:
    chunks = [(f"{n:08d}-{n + 1:08d}.jsonl", f'"{n}"\n'.encode()) for n in range(4)]
    return [
        *chunks,
        ("end.json", b'{"state":"completed","next":4}'),
        ("next.json", b'{"turn":null}'),
    ]


@pytest.mark.parametrize("poll", [POLL, 0.01])
@pytest.mark.parametrize("late", ["00000001-00000002.jsonl", "00000003-00000004.jsonl"])
async def test_a_good_turn_whose_chunk_is_listed_late_is_read_whole(poll: float, late: str) -> None:
    # The end mark is listed 0.2 s before a chunk below it: not corrupt, only late.
    with anyio.fail_after(10):
        store = LaggingStore({late: 0.2})
        for name, body in four_chunks_ended():
            await put(store, live("t1", name), body)
        got = await read_all(store, "t1", poll_interval_seconds=poll)  # type: ignore[arg-type]
        assert got == expected("t1", ["0", "1", "2", "3"])


async def test_a_chunk_listed_later_than_the_lag_allowed_is_corrupt() -> None:
    with anyio.fail_after(30):
        store = LaggingStore({"00000001-00000002.jsonl": 6.0})  # over the default 5 s
        for name, body in four_chunks_ended():
            await put(store, live("t1", name), body)
        started = anyio.current_time()
        got = await read_until_error(store, "t1", CorruptObjectError)  # type: ignore[arg-type]
        assert got == expected("t1", ["0"])
        assert 5.0 <= anyio.current_time() - started <= 5.0 + POLL + 0.01


async def test_a_longer_listing_lag_can_be_allowed() -> None:
    with anyio.fail_after(30):
        store = LaggingStore({"00000001-00000002.jsonl": 6.0})
        for name, body in four_chunks_ended():
            await put(store, live("t1", name), body)
        got = await read_all(store, "t1", listing_lag_seconds=10.0)  # type: ignore[arg-type]
        assert got == expected("t1", ["0", "1", "2", "3"])


@pytest.mark.parametrize("lag", [0.0, -1.0, math.nan, math.inf])
async def test_a_listing_lag_that_is_not_a_positive_time_is_refused(lag: float) -> None:
    with pytest.raises(InvalidArgumentError):
        await read_all(MemoryStore(), "t1", listing_lag_seconds=lag)


@pytest.mark.parametrize(
    "body",
    [b"not json", b'["t2"]', b'{"turn":5}', b'{"turn":["t2"]}', b'{"turn":{"id":"t2"}}'],
    ids=["not-json", "not-an-object", "number", "list", "object"],
)
async def test_a_link_that_names_no_turn_is_corrupt(body: bytes) -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        want = await store_turn(store, "t1", [EVENTS[:2]], linked=False)
        await put(store, live("t1", "next.json"), body)
        got = await read_until_error(store, "t1", CorruptObjectError)
        assert got == want


@pytest.mark.parametrize("turn", ["a/b", "..", ""], ids=["slash", "dotdot", "empty"])
async def test_a_link_to_a_string_that_is_no_turn_id_is_corrupt(turn: str) -> None:
    # The store holds a bad object: that is a CorruptObjectError (a StoreError),
    # not the caller's InvalidKeyError (a UsageError).
    with anyio.fail_after(10):
        store = MemoryStore()
        want = await store_turn(store, "t1", [EVENTS[:2]], linked=False)
        await put(store, live("t1", "next.json"), json.dumps({"turn": turn}).encode())
        got = await read_until_error(store, "t1", CorruptObjectError)
        assert got == want


async def test_a_link_without_a_turn_field_is_corrupt_not_the_last_turn() -> None:
    # {"turn": null} marks the last turn; {} says nothing, and must not end the
    # reading silently (the turns after it would be lost without a word).
    with anyio.fail_after(10):
        store = MemoryStore()
        await store_turn(store, "t1", [EVENTS[:2]], linked=False)
        await put(store, live("t1", "next.json"), b'{"next":"t2"}')
        await store_turn(store, "t2", [EVENTS[2:]], next_turn=None)
        await read_until_error(store, "t1", CorruptObjectError)


async def test_links_that_loop_back_are_corrupt() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        want = await store_turn(store, "t1", [EVENTS[:2]], next_turn="t2")
        want += await store_turn(store, "t2", [EVENTS[2:4]], next_turn="t3")
        want += await store_turn(store, "t3", [EVENTS[4:]], next_turn="t1")
        # Every event is yielded once, then the loop is refused, blaming the link that
        # led back (t3's), not t1's, which rightly names t2.
        got: list[StoredEvent] = []
        with pytest.raises(CorruptObjectError) as caught:
            async for event in read_live_trajectory(
                store, PREFIX, "t1", poll_interval_seconds=POLL
            ):
                got.append(event)
        assert got == want
        assert caught.value.turn_id == "t3"
        assert caught.value.key == live("t3", "next.json")
        assert "'t3' links back to turn 't1'" in str(caught.value)


async def test_a_turn_that_links_to_itself_is_corrupt() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        want = await store_turn(store, "t1", [EVENTS[:2]], next_turn="t1")
        got = await read_until_error(store, "t1", CorruptObjectError)
        assert got == want
        with pytest.raises(CorruptObjectError) as caught:
            async for _ in read_live_trajectory(store, PREFIX, "t1", poll_interval_seconds=POLL):
                pass
        assert (caught.value.turn_id, caught.value.key) == ("t1", live("t1", "next.json"))


# --- on the filesystem store, in real time ------------------------------------------------


class TestOnTheFilesystemStore:
    """The same reads through :class:`FilesystemStore`: worker threads, so real time."""

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> Any:
        return request.param

    async def test_turns_are_read_in_order_until_a_null_link(self, tmp_path: Path) -> None:
        with anyio.fail_after(10):
            store = FilesystemStore(tmp_path)
            want = await store_turn(store, "t1", [EVENTS[:3], EVENTS[3:5]], next_turn="t2")
            want += await store_turn(store, "t2", [EVENTS[5:]], next_turn=None)
            assert await read_all(store, "t1", poll_interval_seconds=0.01) == want

    async def test_a_reader_started_first_yields_exactly_the_events_written_while_it_reads(
        self, tmp_path: Path
    ) -> None:
        with anyio.fail_after(10):
            await follow_a_concurrent_writer(FilesystemStore(tmp_path), 0.01)

    async def test_a_corrupt_chunk_on_disk_is_reported(self, tmp_path: Path) -> None:
        with anyio.fail_after(10):
            store = FilesystemStore(tmp_path)
            await put(store, live("t1", "00000000-00000001.jsonl"), b'{"a":\n')
            await read_until_error(store, "t1", CorruptObjectError, poll_interval_seconds=0.01)
