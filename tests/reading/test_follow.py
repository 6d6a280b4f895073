"""``follow_trajectory`` against the scripted agent, row by row of the table of reads.

The table is in docs/protocol.md, "Following one task".

Every test runs on virtual time, so the timings asserted are exact: the agent
stamps each read with the virtual clock (``agent.reads[i].at``). Steps are
ordered by what the agent saw (``wait_reads``). The only sleeps are
``anyio.sleep_until`` calls that place an action (setting ``stop``) at a chosen
virtual instant inside a wait the follower is already in; they order nothing.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

import follower._reading._follow as _follow
from follower import AgentRefusedError, MalformedPageError, MalformedPageReason, TrajectoryState
from follower._backoff import retry_delay
from follower._reading._policy import (
    BACKLOG_PAGE_BYTES,
    NOT_FOUND_GRACE_SECONDS,
    NOT_FOUND_RETRY_SECONDS,
)
from follower.lowlevel import TrajectoryBatch, follow_trajectory

from ..support.agents import ENDPOINT, RecordingSink, ScriptedAgent
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

POLL = 2.0
# docs/protocol.md ("Following one task"): after stop, a page not last is read again
# after 0.2 s (or the poll interval if shorter); a failed read before stop after
# poll + 5 s x failures.
AFTER_STOP_PAUSE = 0.2
FMT = "test/v1"
RUNNING = TrajectoryState.RUNNING
COMPLETED = TrajectoryState.COMPLETED


# A page refused half-read leaves httpx's inner async generators to the garbage
# collector, which trio reports as a ResourceWarning: a bug with its own test in
# test_http.py. The cases marked with this one check something else.
HALF_READ_BODY = pytest.mark.filterwarnings("ignore:Async generator 'httpx[.]:ResourceWarning")


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(autouse=True)
def backoff_at_its_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every backoff at the top of its jitter, so the tables' times are exact.

    The jitter itself is tested in test_retries.py.
    """
    monkeypatch.setattr(_follow, "backoff_fraction", lambda: 1.0)


def follower_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name.startswith("follower") and r.levelno >= logging.WARNING
    ]


def exactly(values: Iterable[float]) -> Any:
    """Virtual times compared exactly, up to float rounding of the clocks."""
    return pytest.approx(list(values), abs=1e-6)


def read_times(agent: ScriptedAgent) -> list[float]:
    """When each read reached the agent, from the first one."""
    start = agent.reads[0].at
    return [read.at - start for read in agent.reads]


def batch(
    after: int,
    events: Iterable[Any],
    state: TrajectoryState = RUNNING,
    *,
    last: bool = False,
) -> TrajectoryBatch:
    listed = tuple(events)
    return TrajectoryBatch(
        after=after, next=after + len(listed), events=listed, format=FMT, state=state, last=last
    )


def page(after: int, events: Iterable[Any] = (), **overrides: Any) -> dict[str, Any]:
    """A valid page of task t1 read from ``after``; ``overrides`` break it on purpose."""
    listed = list(events)
    body: dict[str, Any] = {
        "context_id": "ctx",
        "task_id": "t1",
        "state": "running",
        "format": FMT,
        "events": listed,
        "next": after + len(listed),
        "has_more": False,
    }
    body.update(overrides)
    return body


class Following:
    """One ``follow_trajectory`` run, started in a task group: when and how it ended."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        sink: RecordingSink | None = None,
        stop: anyio.Event | None = None,
        task_id: str = "t1",
        **options: Any,
    ) -> None:
        self.client = client
        self.sink = sink if sink is not None else RecordingSink()
        self.stop = stop if stop is not None else anyio.Event()
        self.task_id = task_id
        self.options = {"poll_interval_seconds": POLL, **options}
        self.ended_at: float | None = None
        self.error: Exception | None = None
        self.done = anyio.Event()

    async def __call__(self) -> None:
        try:
            await follow_trajectory(
                ENDPOINT,
                self.task_id,
                self.sink,
                stop=self.stop,
                client=self.client,
                **self.options,
            )
        except Exception as exc:
            self.error = exc
        finally:
            self.ended_at = anyio.current_time()
            self.done.set()


@asynccontextmanager
async def following(client: httpx.AsyncClient, **options: Any) -> AsyncIterator[Following]:
    """A :class:`Following` run on ``client`` for the block; it has ended when the block exits."""
    async with client, anyio.create_task_group() as tg:
        run = Following(client, **options)
        tg.start_soon(run)
        yield run
        await run.done.wait()


async def follow_t1(
    client: httpx.AsyncClient,
    sink: RecordingSink | None = None,
    *,
    stop: anyio.Event | None = None,
    **options: Any,
) -> None:
    """``follow_trajectory`` of task t1 to its end, every ``POLL`` seconds unless told otherwise."""
    await follow_trajectory(
        ENDPOINT,
        "t1",
        RecordingSink() if sink is None else sink,
        stop=anyio.Event() if stop is None else stop,
        client=client,
        **{"poll_interval_seconds": POLL, **options},
    )


async def seconds_to_follow_t1(
    client: httpx.AsyncClient, sink: RecordingSink, *, stop: anyio.Event | None = None
) -> float:
    """How long :func:`follow_t1` took, in virtual seconds."""
    start = anyio.current_time()
    await follow_t1(client, sink, stop=stop)
    return anyio.current_time() - start


def agent_with_t1(*events: Any, page_limit: int = 1000) -> ScriptedAgent:
    """The scripted agent with task t1, ``events`` published (none: t1 is still pending)."""
    agent = ScriptedAgent(page_limit=page_limit)
    agent.add_task("t1")
    if events:
        agent.publish("t1", *events)
    return agent


def stop_event(stopped: bool) -> anyio.Event:
    """A step's stop event, already set if ``stopped``."""
    stop = anyio.Event()
    if stopped:
        stop.set()
    return stop


class BusyPool(httpx.AsyncBaseTransport):
    """The agent behind a connection pool of ours that is full for the next ``busy`` reads.

    A read refused by the pool never reaches the agent: it is stamped here.
    """

    def __init__(self, agent: ScriptedAgent, busy: int = 0) -> None:
        self._agent = httpx.ASGITransport(app=agent)
        self.busy = busy
        self.attempts: list[float] = []
        self.refused: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        now = anyio.current_time()
        self.attempts.append(now)
        if self.busy > 0:
            self.busy -= 1
            self.refused.append(now)
            raise httpx.PoolTimeout("no free connection in the pool")
        return await self._agent.handle_async_request(request)

    async def aclose(self) -> None:
        await self._agent.aclose()


def relative(times: list[float], start: float) -> list[float]:
    return [t - start for t in times]


# --- arguments -------------------------------------------------------------------------


def no_reads_client() -> httpx.AsyncClient:
    """A client that fails the test on any read: bad arguments must be refused first."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"read {request.content!r} with bad arguments")

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("poll", [0.0, -1.0])
async def test_poll_interval_must_be_positive(poll: float) -> None:
    with anyio.fail_after(10):
        async with no_reads_client() as client:
            with pytest.raises(ValueError, match="poll_interval_seconds"):
                await follow_t1(client, poll_interval_seconds=poll)


async def test_start_cursor_must_not_be_negative() -> None:
    with anyio.fail_after(10):
        async with no_reads_client() as client:
            with pytest.raises(ValueError, match="after"):
                await follow_t1(client, after=-1)


# --- page, has_more: read again at once ----------------------------------------------


async def test_pages_that_have_more_are_read_back_to_back() -> None:
    agent = agent_with_t1(*range(5), page_limit=2)
    with anyio.fail_after(100):
        async with following(agent.client()) as run:
            await agent.wait_reads(3)  # 0-2, 2-4, 4-5: the last of them has no more
            agent.finish("t1")
    assert run.error is None
    assert [read.after for read in agent.reads] == [0, 2, 4, 5]
    assert read_times(agent) == exactly([0, 0, 0, POLL])
    assert run.sink.batches == [
        batch(0, [0, 1]),
        batch(2, [2, 3]),
        batch(4, [4]),
        batch(5, [], COMPLETED, last=True),
    ]
    assert run.ended_at == pytest.approx(agent.reads[-1].at, abs=1e-6)


async def test_after_a_hundred_pages_in_a_row_that_have_more_the_follower_pauses() -> None:
    # An agent that always has more must not keep one follower reading without a pause.
    agent = agent_with_t1(*range(250), page_limit=1)
    agent.finish("t1")
    sink = RecordingSink()
    with anyio.fail_after(100):
        async with agent.client() as client:
            await follow_t1(client, sink)
    times = read_times(agent)
    assert len(times) == 250
    pause = min(AFTER_STOP_PAUSE, POLL)
    # Reads 1-100 at once, then a pause; reads 101-200, a pause; then the rest.
    assert times == exactly([0.0] * 100 + [pause] * 100 + [2 * pause] * 50)
    assert sink.events == list(range(250))


@pytest.mark.parametrize("event", ["x" * 400, 1], ids=["large-pages", "tiny-events"])
async def test_a_backlog_in_large_pages_is_read_without_a_pause(event: Any) -> None:
    # Pages of BACKLOG_PAGE_BYTES or more are a backlog paying its way: 150 such pages in
    # a row are read back to back. 150 pages of 100 tiny events (cheap for an agent to
    # send for ever) pause once, as any small pages do.
    agent = agent_with_t1(*([event] * 15_000), page_limit=100)
    agent.finish("t1")
    sink = RecordingSink()
    with anyio.fail_after(100):
        async with agent.client() as client:
            await follow_t1(client, sink)
    times = read_times(agent)
    if event == 1:
        pause = min(AFTER_STOP_PAUSE, POLL)
        assert times == exactly([0.0] * 100 + [pause] * 50)
    else:
        assert 100 * len(json.dumps(event)) > BACKLOG_PAGE_BYTES
        assert times == exactly([0.0] * 150)
    assert len(sink.events) == 15_000


async def test_finished_task_is_read_to_the_end_at_once() -> None:
    agent = agent_with_t1(*range(5), page_limit=2)
    agent.finish("t1", TrajectoryState.FAILED)
    sink = RecordingSink()
    with anyio.fail_after(100):
        async with agent.client() as client:
            ended = await seconds_to_follow_t1(client, sink)
    failed = TrajectoryState.FAILED
    assert sink.batches == [
        batch(0, [0, 1], failed),
        batch(2, [2, 3], failed),
        batch(4, [4], failed, last=True),
    ]
    assert read_times(agent) == exactly([0, 0, 0])
    assert ended == pytest.approx(0, abs=1e-6)


# --- page, not last: wait the poll interval, or until stop ---------------------------


async def test_page_not_last_is_read_again_after_exactly_the_poll_interval() -> None:
    agent = agent_with_t1()  # pending: no events yet
    with anyio.fail_after(100):
        async with following(agent.client()) as run:
            await agent.wait_reads(3)
            agent.publish("t1", "a")
            await agent.wait_reads(4)
            agent.finish("t1")
    assert run.error is None
    assert read_times(agent) == exactly([0, POLL, 2 * POLL, 3 * POLL, 4 * POLL])
    assert [read.after for read in agent.reads] == [0, 0, 0, 0, 1]
    # Empty pages that are not last hand nothing over; the last one does.
    assert run.sink.batches == [batch(0, ["a"]), batch(1, [], COMPLETED, last=True)]
    assert run.ended_at == pytest.approx(agent.reads[-1].at, abs=1e-6)


async def test_stop_ends_the_poll_wait_at_once_then_reads_after_the_short_pause() -> None:
    poll = 10.0
    agent = agent_with_t1("a")
    with anyio.fail_after(100):
        async with following(agent.client(), poll_interval_seconds=poll) as run:
            await agent.wait_reads(1)
            await anyio.sleep_until(agent.reads[0].at + 3.0)  # inside the 10 s wait
            run.stop.set()
            await agent.wait_reads(4)
            agent.finish("t1")
    assert run.error is None
    pause = AFTER_STOP_PAUSE
    assert read_times(agent) == exactly([0, 3.0, 3.0 + pause, 3.0 + 2 * pause, 3.0 + 3 * pause])
    assert run.sink.batches == [batch(0, ["a"]), batch(1, [], COMPLETED, last=True)]


@pytest.mark.parametrize(("poll", "pause"), [(10.0, 0.2), (0.2, 0.2), (0.05, 0.05)])
async def test_after_stop_a_page_not_last_is_read_again_after_the_short_pause(
    poll: float, pause: float
) -> None:
    agent = agent_with_t1()
    stop = stop_event(True)
    with anyio.fail_after(100):
        async with following(agent.client(), stop=stop, poll_interval_seconds=poll) as run:
            await agent.wait_reads(3)
            agent.publish("t1", "a", "b")
            agent.finish("t1", TrajectoryState.CANCELED)
    assert run.error is None
    assert read_times(agent) == exactly([0, pause, 2 * pause, 3 * pause])
    assert run.sink.batches == [batch(0, ["a", "b"], TrajectoryState.CANCELED, last=True)]


# --- last page: hand it over, end ------------------------------------------------------


@pytest.mark.parametrize(
    "state", [TrajectoryState.COMPLETED, TrajectoryState.FAILED, TrajectoryState.CANCELED]
)
@pytest.mark.parametrize("stopped", [False, True], ids=["before-stop", "after-stop"])
async def test_last_page_is_handed_over_even_when_empty(
    state: TrajectoryState, stopped: bool
) -> None:
    agent = agent_with_t1("a", "b")
    agent.finish("t1", state)
    sink = RecordingSink()
    stop = stop_event(stopped)
    with anyio.fail_after(100):
        async with agent.client() as client:
            await follow_t1(client, sink, stop=stop, after=2)
            assert not client.is_closed  # the caller's client stays the caller's
    assert [read.after for read in agent.reads] == [2]
    assert sink.batches == [batch(2, [], state, last=True)]


async def test_start_cursor_reads_from_there() -> None:
    agent = agent_with_t1(*range(5))
    with anyio.fail_after(100):
        async with following(agent.client(), after=3) as run:
            await agent.wait_reads(1)
            agent.publish("t1", 5)
            agent.finish("t1")
    assert run.error is None
    assert [read.after for read in agent.reads] == [3, 5]
    assert run.sink.batches == [batch(3, [3, 4]), batch(5, [5], COMPLETED, last=True)]


async def test_batches_are_contiguous_and_hold_every_event_once_in_order() -> None:
    agent = agent_with_t1(page_limit=3)
    bursts = [list(range(0, 7)), [7], [], list(range(8, 16)), [16, 17], []]
    with anyio.fail_after(1000):
        async with following(agent.client()) as run:
            for burst in bursts:
                seen = len(agent.reads)
                agent.publish("t1", *burst)
                await agent.wait_reads(seen + 1)
            agent.finish("t1")
    assert run.error is None
    batches = run.sink.batches
    assert run.sink.events == list(range(18))
    assert batches[0].after == 0
    assert all(b.after == a.next for a, b in itertools.pairwise(batches))
    assert all(b.events or b.last for b in batches)
    assert all(len(b.events) <= 3 for b in batches)
    assert [b.last for b in batches] == [False] * (len(batches) - 1) + [True]
    # The cursor only moves with a batch: every read starts where the last batch ended.
    assert {read.after for read in agent.reads} <= {0} | {b.next for b in batches}


# --- 404: end quietly ------------------------------------------------------------------


async def test_unknown_task_ends_following_after_the_grace_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = ScriptedAgent()  # knows no task, and never will
    sink = RecordingSink()
    with anyio.fail_after(100):
        async with agent.client() as client:
            ended = await seconds_to_follow_t1(client, sink)
    # Read again every second (the poll interval, at most 1 s) for the grace, then given up.
    reads = int(NOT_FOUND_GRACE_SECONDS / NOT_FOUND_RETRY_SECONDS) + 1
    assert [read.answered for read in agent.reads] == [404] * reads
    assert read_times(agent) == exactly(NOT_FOUND_RETRY_SECONDS * i for i in range(reads))
    assert ended == pytest.approx(NOT_FOUND_GRACE_SECONDS, abs=1e-6)
    assert sink.batches == []
    warnings = follower_warnings(caplog)
    assert len(warnings) == 1
    assert "t1" in warnings[0].getMessage()


async def test_unknown_task_after_stop_ends_following_at_once_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = ScriptedAgent()  # knows no task
    sink = RecordingSink()
    with anyio.fail_after(100):
        async with agent.client() as client:
            ended = await seconds_to_follow_t1(client, sink, stop=stop_event(True))
    assert [read.answered for read in agent.reads] == [404]
    assert ended == pytest.approx(0, abs=1e-6)
    assert sink.batches == []
    warnings = follower_warnings(caplog)
    assert len(warnings) == 1
    assert "t1" in warnings[0].getMessage()


async def test_a_task_registered_a_moment_late_is_followed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = ScriptedAgent()  # message/send answered; the trajectory is not registered yet
    with anyio.fail_after(100):
        async with following(agent.client()) as run:
            await agent.wait_reads(3)
            agent.add_task("t1")
            agent.publish("t1", "a")
            agent.finish("t1")
    assert run.error is None
    assert [read.answered for read in agent.reads] == [404, 404, 404, 200]
    assert read_times(agent) == exactly([0, 1, 2, 3])
    assert run.sink.batches == [batch(0, ["a"], COMPLETED, last=True)]
    assert follower_warnings(caplog) == []


async def test_a_stop_during_the_grace_ends_following_at_the_next_404() -> None:
    agent = ScriptedAgent()
    with anyio.fail_after(100):
        async with following(agent.client()) as run:
            await agent.wait_reads(1)
            await anyio.sleep_until(agent.reads[0].at + 0.5)  # inside the 1 s wait
            run.stop.set()
    assert run.error is None
    assert read_times(agent) == exactly([0, 0.5])
    assert run.ended_at == pytest.approx(agent.reads[1].at, abs=1e-6)


async def test_task_forgotten_midway_ends_following_and_keeps_what_was_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = agent_with_t1("a")
    with anyio.fail_after(100):
        async with following(agent.client()) as run:
            await agent.wait_reads(1)
            agent.forget()  # the agent restarted
    assert run.error is None
    assert [read.answered for read in agent.reads] == [200, 404]
    assert run.ended_at == pytest.approx(agent.reads[1].at, abs=1e-6)
    assert run.sink.batches == [batch(0, ["a"])]
    assert len(follower_warnings(caplog)) == 1


# --- other 4xx, malformed body: raise a clear error ------------------------------------


@pytest.mark.parametrize("status", [400, 405, 409])
@pytest.mark.parametrize("stopped", [False, True], ids=["before-stop", "after-stop"])
async def test_refused_read_raises(status: int, stopped: bool) -> None:
    agent = agent_with_t1()
    agent.faults.append((status, "no"))
    sink = RecordingSink()
    stop = stop_event(stopped)
    with anyio.fail_after(100):
        async with agent.client() as client:
            with pytest.raises(AgentRefusedError) as caught:
                await follow_t1(client, sink, stop=stop)
    assert caught.value.status_code == status
    assert len(agent.reads) == 1  # never retried
    assert sink.batches == []


async def test_cursor_past_the_agents_end_raises_refused() -> None:
    agent = agent_with_t1("a")
    with anyio.fail_after(100):
        async with agent.client() as client:
            with pytest.raises(AgentRefusedError) as caught:
                await follow_t1(client, after=5)
    assert caught.value.status_code == 400


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("not json at all", MalformedPageReason.NOT_AN_OBJECT),
        ("[1, 2]", MalformedPageReason.NOT_AN_OBJECT),
        (page(1, ["b"], next=7), MalformedPageReason.CURSOR_MISMATCH),
        (page(1, ["b"], task_id="t2"), MalformedPageReason.TASK_MISMATCH),
        (page(1, ["b"], state="paused"), MalformedPageReason.UNKNOWN_STATE),
        (page(1, [], has_more=True), MalformedPageReason.NO_PROGRESS),
        (
            {k: v for k, v in page(1, ["b"]).items() if k != "has_more"},
            MalformedPageReason.BAD_FIELD,
        ),
        pytest.param(page(1, ["b" * 5000]), MalformedPageReason.TOO_LARGE, marks=HALF_READ_BODY),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "cursor-mismatch",
        "task-mismatch",
        "unknown-state",
        "no-progress",
        "missing-field",
        "too-large",
    ],
)
async def test_malformed_page_raises_its_error_after_handing_over_the_valid_ones(
    answer: str | dict[str, Any], reason: MalformedPageReason
) -> None:
    agent = agent_with_t1("a")
    with anyio.fail_after(100):
        async with following(agent.client(), max_page_bytes=1000) as run:
            await agent.wait_reads(1)
            agent.faults.append((200, answer))
    assert isinstance(run.error, MalformedPageError)
    assert run.error.reason is reason
    assert [read.after for read in agent.reads] == [0, 1]  # not read again
    assert run.sink.batches == [batch(0, ["a"])]


# --- 5xx, transport error, timeout: back off before stop, end after --------------------


def test_retry_delay_grows_by_five_seconds_a_failure_up_to_a_minute() -> None:
    assert [retry_delay(2.0, n) for n in range(1, 5)] == [7.0, 12.0, 17.0, 22.0]
    assert retry_delay(2.0, 11) == 57.0
    assert retry_delay(2.0, 12) == 60.0
    assert retry_delay(2.0, 1000) == 60.0
    assert retry_delay(0.5, 1) == 5.5
    assert retry_delay(120.0, 1) == 60.0


# What an agent that cannot be read answers: made fresh for each read.
FAILURES: dict[str, Callable[[], Any]] = {
    "500": lambda: (500, "internal error"),
    "502": lambda: (502, "bad gateway"),
    "503": lambda: (503, "unavailable"),
    "ConnectError": lambda: httpx.ConnectError("connection refused"),
    "ReadError": lambda: httpx.ReadError("connection reset"),
    "RemoteProtocolError": lambda: httpx.RemoteProtocolError("server disconnected"),
    "ReadTimeout": lambda: httpx.ReadTimeout("timed out"),
}


async def test_failed_reads_before_stop_back_off_up_to_a_minute() -> None:
    agent = agent_with_t1("a")
    agent.finish("t1")
    failures = 14
    kinds = list(FAILURES.values())
    agent.faults.extend(kinds[i % len(kinds)]() for i in range(failures))
    sink = RecordingSink()
    with anyio.fail_after(3600):
        async with agent.client() as client:
            await follow_t1(client, sink)
    delays = [7, 12, 17, 22, 27, 32, 37, 42, 47, 52, 57, 60, 60, 60]
    assert delays == [retry_delay(POLL, n) for n in range(1, failures + 1)]
    expected, at = [0.0], 0.0
    for delay in delays:
        at += delay
        expected.append(at)
    assert read_times(agent) == exactly(expected)
    assert sink.batches == [batch(0, ["a"], COMPLETED, last=True)]


async def test_a_successful_read_resets_the_backoff() -> None:
    agent = agent_with_t1("a")
    agent.faults.extend([(503, "busy"), (503, "busy")])
    with anyio.fail_after(1000):
        async with following(agent.client()) as run:
            await agent.wait_reads(3)  # two failures, then a page
            agent.faults.append((502, "bad gateway"))
            agent.finish("t1")
    assert run.error is None
    first, second = POLL + 5, POLL + 10
    assert read_times(agent) == exactly(
        [0, first, first + second, first + second + POLL, first + second + POLL + first]
    )
    assert [read.answered for read in agent.reads] == [503, 503, 200, 502, 200]
    assert run.sink.batches == [batch(0, ["a"]), batch(1, [], COMPLETED, last=True)]


@pytest.mark.parametrize("failure", FAILURES)
async def test_stop_during_a_backoff_reads_at_once_and_a_failure_then_ends_following(
    failure: str,
) -> None:
    agent = agent_with_t1()
    agent.faults.extend([(503, "busy"), FAILURES[failure]()])
    with anyio.fail_after(100):
        async with following(agent.client()) as run:
            await agent.wait_reads(1)
            await anyio.sleep_until(agent.reads[0].at + 3.0)  # inside the 7 s backoff
            run.stop.set()
    assert run.error is None  # the sentinel never leaves follow_trajectory
    assert read_times(agent) == exactly([0, 3.0])  # exactly one failed read after stop
    assert run.ended_at == pytest.approx(agent.reads[1].at, abs=1e-6)
    assert run.sink.batches == []


async def test_stop_during_a_backoff_then_an_answer_keeps_reading_to_the_last_page() -> None:
    agent = agent_with_t1("a")
    agent.faults.append((503, "busy"))
    with anyio.fail_after(100):
        async with following(agent.client()) as run:
            await agent.wait_reads(1)
            await anyio.sleep_until(agent.reads[0].at + 3.0)
            run.stop.set()
            await agent.wait_reads(3)
            agent.finish("t1")
    assert run.error is None
    pause = AFTER_STOP_PAUSE
    assert read_times(agent) == exactly([0, 3.0, 3.0 + pause, 3.0 + 2 * pause])
    assert run.sink.batches == [batch(0, ["a"]), batch(1, [], COMPLETED, last=True)]


@pytest.mark.parametrize("failure", FAILURES)
async def test_failed_read_after_stop_ends_following_at_once(failure: str) -> None:
    agent = agent_with_t1()
    agent.faults.append(FAILURES[failure]())
    stop = stop_event(True)
    sink = RecordingSink()
    with anyio.fail_after(100):
        async with agent.client() as client:
            ended = await seconds_to_follow_t1(client, sink, stop=stop)
    assert len(agent.reads) == 1
    assert ended == pytest.approx(0, abs=1e-6)
    assert sink.batches == []


async def test_after_stop_pages_are_read_until_a_read_fails() -> None:
    agent = agent_with_t1("a")
    stop = stop_event(True)
    with anyio.fail_after(100):
        async with following(agent.client(), stop=stop) as run:
            await agent.wait_reads(2)
            agent.faults.append(httpx.ReadError("connection reset"))
    assert run.error is None
    pause = AFTER_STOP_PAUSE
    assert read_times(agent) == exactly([0, pause, 2 * pause])
    assert run.ended_at == pytest.approx(agent.reads[2].at, abs=1e-6)
    assert run.sink.batches == [batch(0, ["a"])]


# --- our own pool full: never a failure of the agent -----------------------------------


async def test_pool_busy_before_stop_is_not_a_failure() -> None:
    agent = agent_with_t1()
    pool = BusyPool(agent, busy=3)
    with anyio.fail_after(1000):
        async with following(httpx.AsyncClient(transport=pool)) as run:
            await agent.wait_reads(1)  # after three refusals by our pool
            agent.faults.append((503, "busy"))
            await agent.wait_reads(2)
            agent.finish("t1")
    assert run.error is None
    start = pool.attempts[0]
    # Refused reads are retried at the poll interval: no backoff growing with them.
    assert relative(pool.refused, start) == exactly([0, POLL, 2 * POLL])
    # The agent's first failure is its first: the shortest backoff.
    t = 3 * POLL
    assert relative([read.at for read in agent.reads], start) == exactly(
        [t, t + POLL, t + POLL + POLL + 5]
    )
    assert run.sink.batches == [batch(0, [], COMPLETED, last=True)]


async def test_pool_busy_after_stop_does_not_end_following() -> None:
    agent = agent_with_t1("a")
    pool = BusyPool(agent, busy=3)
    stop = stop_event(True)
    with anyio.fail_after(100):
        async with following(httpx.AsyncClient(transport=pool), stop=stop) as run:
            await agent.wait_reads(1)
            pool.busy = 2  # full again for the next two reads
            agent.publish("t1", "b")
            agent.finish("t1")
    assert run.error is None
    pause = AFTER_STOP_PAUSE
    assert relative(pool.attempts, pool.attempts[0]) == exactly([pause * i for i in range(7)])
    assert len(pool.refused) == 5
    assert [read.after for read in agent.reads] == [0, 1]
    assert run.sink.batches == [batch(0, ["a"]), batch(1, ["b"], COMPLETED, last=True)]


# --- the sink --------------------------------------------------------------------------


async def test_a_sink_that_raises_ends_following_with_its_exception() -> None:
    agent = agent_with_t1("a")
    error = OSError("disk full")

    def refuse(_batch: Any) -> None:
        raise error

    sink = RecordingSink(on_batch=refuse)
    with anyio.fail_after(100):
        async with agent.client() as client:
            with pytest.raises(OSError, match="disk full") as caught:
                await follow_t1(client, sink)
    assert caught.value is error
    assert len(agent.reads) == 1


# --- cancellation ----------------------------------------------------------------------


async def test_a_cancel_during_a_backoff_ends_following_at_once() -> None:
    agent = agent_with_t1()
    agent.faults.append((503, "busy"))
    with anyio.fail_after(100):
        async with agent.client() as client:
            with anyio.move_on_after(3.0) as scope:
                await follow_t1(client)
            ended = anyio.current_time() - agent.reads[0].at
    assert scope.cancelled_caught
    assert ended == pytest.approx(3.0, abs=1e-6)
    assert len(agent.reads) == 1
