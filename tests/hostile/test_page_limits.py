"""Pages an agent sends: how many events, how large, how deep, which numbers (docs/security.md).

Each limit refuses a page with a typed :class:`~follower.MalformedPageError` naming the
task and the cursor, before the page's events are built; a large page decodes in a
worker thread, so one page never stalls the event loop; numbers stay exact, on reads
and on stores alike.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import httpx
import pytest

from follower import CorruptObjectError, MalformedPageError, MalformedPageReason, MemoryStore
from follower._format import _wire
from follower._format._layout import decode_events, decode_json_object, encode_events
from follower._format._nesting import MAX_JSON_DEPTH
from follower._format._wire import LARGE_PAGE_BYTES, MAX_PAGE_EVENTS, Page
from follower._http._exchange import read_page
from follower.lowlevel import LiveTrajectoryChunks, TrajectoryBatch

from ..support.malformed import raises_malformed

if TYPE_CHECKING:
    from collections.abc import Callable

TASK = "t1"
ENDPOINT = "http://agent.test/ext/trajectory"


def body_of(
    events: list[Any] | str, *, after: int = 7, has_more: bool = True, count: int | None = None
) -> bytes:
    """A page of ``events`` (a list, or their JSON text as the agent wrote it)."""
    text = events if isinstance(events, str) else json.dumps(events, separators=(",", ":"))
    if count is None:
        count = len(json.loads(text)) if isinstance(events, str) else len(events)
    return (
        f'{{"task_id":"{TASK}","state":"running","format":null,"events":{text},'
        f'"next":{after + count},"has_more":{"true" if has_more else "false"}}}'
    ).encode()


def parse(body: bytes, **limits: int) -> Page:
    return Page.from_json(body, task_id=TASK, after=7, **limits)


# --- events per page -----------------------------------------------------------------


def test_a_page_of_the_most_events_an_agent_sends_is_read() -> None:
    page = parse(body_of(list(range(MAX_PAGE_EVENTS)), after=7))
    assert len(page.events) == MAX_PAGE_EVENTS


def test_one_event_more_than_an_agent_sends_is_refused_naming_the_task_and_cursor() -> None:
    with raises_malformed(
        MalformedPageReason.TOO_MANY_EVENTS, match=r"1001 events, over the 1000"
    ) as raised:
        parse(body_of(list(range(MAX_PAGE_EVENTS + 1)), after=7))
    assert (raised.value.task_id, raised.value.after) == (TASK, 7)
    assert isinstance(raised.value, MalformedPageError)


# --- decoded size, event size, depth ---------------------------------------------------


def test_a_large_page_of_tiny_values_is_refused_before_decoding() -> None:
    # 2 MiB of empty objects would decode to ~50 MiB: over 8 x a 4 MiB cap.
    tiny = "[" + ",".join(["{}"] * (700 * 1024)) + "]"
    with raises_malformed(MalformedPageReason.TOO_LARGE, match="would decode to about"):
        parse(body_of(tiny), max_page_bytes=4 * 1024 * 1024)


def test_a_large_page_of_large_strings_is_read_whatever_brackets_they_hold() -> None:
    # Strings cost their bytes: commas and brackets inside them are no values.
    events = ["[{," * 100_000, '\\"{[' * 50_000]
    body = body_of(events)
    assert len(body) > LARGE_PAGE_BYTES
    assert parse(body, max_page_bytes=len(body)).events == tuple(events)


def test_an_event_over_max_event_bytes_is_refused_and_one_at_it_is_read() -> None:
    event = "x" * 1000
    at_cap = len(json.dumps(event))
    body = body_of(["small", event])
    assert parse(body, max_event_bytes=at_cap).events[1] == event
    with raises_malformed(
        MalformedPageReason.EVENT_TOO_LARGE, match="event 8 is 1002 bytes"
    ) as raised:
        parse(body, max_event_bytes=at_cap - 1)
    assert (raised.value.task_id, raised.value.after) == (TASK, 7)


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_an_event_may_nest_to_the_limit_in_its_page_and_no_deeper() -> None:
    # The page is one level and its events list another: an event has the limit less two.
    assert parse(body_of("[" + nested(MAX_JSON_DEPTH - 2) + "]")).events
    with raises_malformed(MalformedPageReason.TOO_DEEP, match="deeper than 128") as raised:
        parse(body_of("[" + nested(MAX_JSON_DEPTH - 1) + "]"))
    assert (raised.value.task_id, raised.value.after) == (TASK, 7)


def test_whatever_a_page_may_hold_its_chunk_reads_back() -> None:
    # The read's depth limit and the stored chunk's agree: no page is stored unreadable.
    deepest = parse(body_of("[" + nested(MAX_JSON_DEPTH - 2) + "]")).events
    assert decode_events(encode_events(deepest), "k") == list(deepest)


# --- numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "why"),
    [
        ("NaN", "NaN is not a JSON number"),
        ("Infinity", "Infinity is not a JSON number"),
        ("-Infinity", "-Infinity is not a JSON number"),
        ("1e400", "out of the range of a double"),
        ("-1E+400", "out of the range of a double"),
        ("1" + "0" * 400 + ".5", "out of the range of a double"),
        ("9" * 5000, "more digits than Python converts"),
    ],
)
def test_a_number_json_cannot_carry_exactly_is_refused_naming_the_task_and_cursor(
    number: str, why: str
) -> None:
    with raises_malformed(MalformedPageReason.BAD_NUMBER, match=why) as raised:
        parse(body_of(f'[1,{{"x":[{number}]}}]', count=2))
    assert (raised.value.task_id, raised.value.after) == (TASK, 7)


@pytest.mark.parametrize(
    ("number", "stored"),
    [
        ("9" * sys.get_int_max_str_digits(), "9" * sys.get_int_max_str_digits()),
        ("-123456789012345678901234567890", "-123456789012345678901234567890"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("5e-324", "5e-324"),
        ("1e-400", "0.0"),  # below the smallest double: zero, as every JSON reader reads it
        ("-0.0", "-0.0"),
    ],
)
def test_a_number_in_range_is_stored_as_python_writes_it_and_reads_back(
    number: str, stored: str
) -> None:
    page = parse(body_of(f"[{number}]", count=1))
    chunk = encode_events(page.events)
    assert chunk == stored.encode() + b"\n"
    assert decode_events(chunk, "k") == list(page.events)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_chunk_is_never_written_with_a_number_that_is_no_json(value: float) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        encode_events(({"x": value},))


@pytest.mark.parametrize("number", ["NaN", "-Infinity", "1e400", "9" * 5000])
def test_a_stored_number_that_is_no_json_is_a_corrupt_object(number: str) -> None:
    # Chunks written before this rule may hold NaN verbatim: read back, they are refused.
    with pytest.raises(CorruptObjectError, match="'k'"):
        decode_events(f"1\n[{number}]\n".encode(), "k")
    with pytest.raises(CorruptObjectError, match="'k'"):
        decode_json_object(f'{{"next":{number}}}'.encode(), "k")


# --- one page must not stall the process -------------------------------------------------

# A generous bound on how long the loop may go without running a task while a page is read:
# a page decoded on the loop blocks it for the whole decode (~1 s here).
HEARTBEAT_BOUND_SECONDS = 0.25


def seconds_of(work: Callable[[], object]) -> float:
    """How long ``work`` takes on this thread now: what it would block a loop for."""
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def ran_during(heartbeat: Heartbeat, blocking_seconds: float) -> bool:
    """Whether the loop kept running through work that, on the loop, blocks it that long.

    Measured in the same run, so a busy machine slows both sides: on the loop, the longest
    gap would be the whole work; off it, well under half, however loaded the machine.
    """
    return heartbeat.longest < max(HEARTBEAT_BOUND_SECONDS, blocking_seconds / 2)


def heavy_page() -> bytes:
    """A page within every limit that takes the decoder about a second: 2 M floats."""
    return body_of([[i + 0.5] * 2000 for i in range(MAX_PAGE_EVENTS)])


def client_serving(body: bytes) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


class Heartbeat:
    """A task that wakes every 10 ms and records the longest gap between its wake-ups."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.beats = 0

    async def run(self) -> None:
        last = anyio.current_time()
        try:
            while True:
                await anyio.sleep(0.01)
                now = anyio.current_time()
                self.longest = max(self.longest, now - last)
                self.beats += 1
                last = now
        finally:
            # Cancelled right after a blocking read, the task may never wake to see that
            # gap (trio cancels it in its sleep): the gap up to the cancel counts too.
            self.longest = max(self.longest, anyio.current_time() - last)


@pytest.mark.anyio
async def test_a_heavy_page_does_not_block_the_event_loop() -> None:
    body = heavy_page()
    on_the_loop = seconds_of(lambda: Page.from_json(body, task_id=TASK, after=7))
    heartbeat = Heartbeat()
    with anyio.fail_after(60):
        async with client_serving(body) as client, anyio.create_task_group() as tg:
            tg.start_soon(heartbeat.run)
            await anyio.sleep(0.05)
            started = anyio.current_time()
            page = await read_page(client, ENDPOINT, TASK, 7)
            took = anyio.current_time() - started
            tg.cancel_scope.cancel()
    assert len(page.events) == MAX_PAGE_EVENTS
    # Not vacuous: the read took long enough that a decode on the loop would break the bound.
    assert took > HEARTBEAT_BOUND_SECONDS, f"the page decoded in {took:.2f} s: too light"
    assert ran_during(heartbeat, on_the_loop), (heartbeat.longest, on_the_loop)


@pytest.mark.anyio
async def test_a_deadline_fires_during_a_heavy_page(monkeypatch: pytest.MonkeyPatch) -> None:
    body = heavy_page()
    judge, judged = Page.from_json, threading.Event()

    def judging(*args: Any, **kwargs: Any) -> Page:
        try:
            return judge(*args, **kwargs)
        finally:
            judged.set()

    monkeypatch.setattr(Page, "from_json", judging)
    with anyio.fail_after(60):
        async with client_serving(body) as client:
            started = anyio.current_time()
            with anyio.move_on_after(0.05) as deadline:
                await read_page(client, ENDPOINT, TASK, 7)
            ended = anyio.current_time() - started
        # The read left its decode to finish in its worker thread, as it should; this
        # test waits for it, so that no later test runs beside it (the hostile page's
        # counts every decode while it runs).
        assert await anyio.to_thread.run_sync(judged.wait, 50)
    assert deadline.cancelled_caught
    assert ended < HEARTBEAT_BOUND_SECONDS


@pytest.mark.anyio
async def test_a_hostile_page_at_the_cap_is_refused_off_the_loop_and_never_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The shape that took 52.7 s and 4.66 GiB at the old 64 MiB cap, at the new 16 MiB one.
    # What the library promises for it is structural: the size estimate refuses it before
    # any decode, in a worker thread. (A gap in the loop's ticks would measure the 16 MiB
    # body's copies on a loaded machine more than the refusal, which takes tens of ms.)
    tiny = b"[" + b"0," * (8 * 1024 * 1024 - 64) + b"0]"
    body = body_of(tiny.decode(), count=8 * 1024 * 1024)
    judged_in: list[threading.Thread] = []
    decodes: list[int] = []
    judge, decode = Page.from_json, _wire.loads_strict_json

    def judging(*args: Any, **kwargs: Any) -> Page:
        judged_in.append(threading.current_thread())
        return judge(*args, **kwargs)

    def decoding(document: bytes | str) -> Any:
        decodes.append(len(document))
        return decode(document)

    monkeypatch.setattr(Page, "from_json", judging)
    monkeypatch.setattr(_wire, "loads_strict_json", decoding)
    with anyio.fail_after(60):
        async with client_serving(body) as client:
            with raises_malformed(MalformedPageReason.TOO_LARGE):
                await read_page(client, ENDPOINT, TASK, 7)
    assert decodes == []  # refused by its estimate, never decoded
    assert len(judged_in) == 1
    assert judged_in[0] is not threading.current_thread()  # not on the loop's thread


@pytest.mark.anyio
async def test_a_heavy_page_is_stored_without_blocking_the_event_loop() -> None:
    page = Page.from_json(heavy_page(), task_id=TASK, after=7)
    store = MemoryStore()
    chunks = LiveTrajectoryChunks(store, "p/", "turn-1", stored_next=7)
    heartbeat = Heartbeat()
    batch = page.to_batch()
    on_the_loop = seconds_of(lambda: encode_events(page.events))
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(heartbeat.run)
            await anyio.sleep(0.05)
            started = anyio.current_time()
            await chunks(batch)
            took = anyio.current_time() - started
            tg.cancel_scope.cancel()
    stored = await store.get(chunks.keys.chunk(7, 7 + MAX_PAGE_EVENTS))
    assert stored == encode_events(page.events)
    assert took > HEARTBEAT_BOUND_SECONDS, f"the page encoded in {took:.2f} s: too light"
    assert ran_during(heartbeat, on_the_loop), (heartbeat.longest, on_the_loop)


def test_a_batchs_body_size_is_no_part_of_its_value() -> None:
    page = parse(body_of([1, 2]))
    assert page.to_batch().wire_bytes == len(body_of([1, 2])) > 0
    assert page.to_batch() == TrajectoryBatch(
        after=7, next=9, events=(1, 2), format=None, state=page.state, last=False
    )
