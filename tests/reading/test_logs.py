"""What a follower logs: bounded however many reads fail, with its task and turn, no secrets.

An agent that starts failing is one warning; its recovery, or the end of
following, one summary; each failed read in between a debug line at most. An agent
that flaps is one run: one more warning as it fails again, one summary as it
settles. On virtual time against in-memory agents, so 1,000 failed reads take a
second or so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

import follower._reading._follow as _follow
from follower import A2AAgent, MemoryStore, _retries, following_live_trajectory
from follower.lowlevel import follow_trajectory

from ..support.agents import ENDPOINT, RecordingSink
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

POLL = 1.0
SECRET = "SECRET-7f3a"


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Callable[[int], list[logging.LogRecord]]:
    """The library's records at ``level`` or above (everything is captured, debug too)."""
    caplog.set_level(logging.DEBUG, logger="follower")

    def records(level: int = logging.DEBUG) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name.startswith("follower") and r.levelno >= level]

    return records


def page(
    after: int = 0,
    events: tuple[Any, ...] = (),
    *,
    state: str = "running",
    fmt: str = "test/v1",
    has_more: bool = False,
) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "context_id": "ctx",
            "task_id": "t1",
            "state": state,
            "format": fmt,
            "events": list(events),
            "next": after + len(events),
            "has_more": has_more,
        },
    )


class Reads:
    """An in-memory agent answering each read from ``answer(n, request)``, n counting from 0."""

    def __init__(self, answer: Callable[[int, httpx.Request], httpx.Response]) -> None:
        self.answer = answer
        self.count = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        n, self.count = self.count, self.count + 1
        return self.answer(n, request)

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle), **kwargs)


# --- volume ----------------------------------------------------------------------------


@pytest.mark.parametrize("failures", [10, 1_000])
async def test_failed_reads_log_a_fixed_number_of_records_however_many_there_are(
    failures: int, logged: Callable[[int], list[logging.LogRecord]]
) -> None:
    stop = anyio.Event()

    def down(n: int, request: httpx.Request) -> httpx.Response:
        if n + 1 == failures:
            stop.set()  # the step returns during the last read before stop
        return httpx.Response(503, text="down for maintenance")

    agent = Reads(down)
    with anyio.fail_after(10**7):
        async with agent.client() as client:
            outcome = await follow_trajectory(
                ENDPOINT,
                "t1",
                RecordingSink(),
                poll_interval_seconds=POLL,
                stop=stop,
                client=client,
            )
    assert outcome.failed_reads == failures  # the last one after stop, which ended it
    loud = logged(logging.INFO)
    # The same three lines for 10 failed reads as for 1,000: the outage began; the
    # read after stop failed; the run's summary.
    assert [r.levelname for r in loud] == ["WARNING", "INFO", "WARNING"], [
        r.getMessage() for r in loud
    ]
    assert "are failing" in loud[0].getMessage()
    assert f"after {failures} failed reads" in loud[2].getMessage()
    assert loud[2].failed_reads == failures
    # One debug line a retried read at most, never more.
    assert len(logged(logging.DEBUG)) <= failures + 3


async def test_a_recovery_is_one_summary_with_its_counts_and_duration(
    monkeypatch: pytest.MonkeyPatch, logged: Callable[[int], list[logging.LogRecord]]
) -> None:
    monkeypatch.setattr(_follow, "backoff_fraction", lambda: 1.0)  # exact times
    # Two outages a quiet minute apart (none fails for SETTLE_SECONDS between them).
    answers = {0: 503, 1: 502, 2: 503, 64: 503, 65: 503}

    def flaky(n: int, request: httpx.Request) -> httpx.Response:
        if n in answers:
            return httpx.Response(answers[n], text="busy")
        return page(state="completed") if n == 66 else page()

    with anyio.fail_after(1000):
        async with Reads(flaky).client() as client:
            await follow_trajectory(
                ENDPOINT,
                "t1",
                RecordingSink(),
                poll_interval_seconds=POLL,
                stop=anyio.Event(),
                client=client,
            )
    warnings = logged(logging.WARNING)
    assert len(warnings) == 4, [r.getMessage() for r in warnings]  # each a warning and a summary
    first, recovered, second, recovered_again = warnings
    assert "are failing (HTTP 503)" in first.getMessage()
    # Failed at 0, 6, 17 (backoffs 6, 11), read again 16 s later: 33 s of failing.
    assert "recovered after 3 failed reads in 33.0 s (last: HTTP 503)" in recovered.getMessage()
    assert (recovered.failed_reads, recovered.failing_seconds) == (3, pytest.approx(33.0))
    # Failed at 94 s (the last failure before at 17 s) and 100 s, read again 11 s later.
    assert "are failing (HTTP 503)" in second.getMessage()
    assert "recovered after 2 failed reads in 17.0 s" in recovered_again.getMessage()
    assert recovered_again.failed_reads == 2
    assert second.levelno == logging.WARNING


async def test_a_format_change_is_logged_once_however_many_pages_follow(
    logged: Callable[[int], list[logging.LogRecord]],
) -> None:
    pages = 1000

    def changed_after_the_first(n: int, request: httpx.Request) -> httpx.Response:
        last = n + 1 == pages
        return page(
            n,
            (n,),
            fmt="test/v1" if n == 0 else "test/v2",
            has_more=not last,
            state="completed" if last else "running",
        )

    store = MemoryStore()
    with anyio.fail_after(1000):
        async with Reads(changed_after_the_first).client() as client:
            async with following_live_trajectory(
                ENDPOINT, store, "p/", "turn-1", poll_interval_seconds=POLL, client=client
            ) as turn:
                turn.follow("t1")
            assert turn.statistics().events_stored == pages
    warnings = logged(logging.WARNING)
    assert len(warnings) == 1
    assert "'test/v2'" in warnings[0].getMessage()


# --- what a record carries -------------------------------------------------------------


async def test_every_record_of_a_turn_carries_its_task_and_turn(
    logged: Callable[[int], list[logging.LogRecord]],
) -> None:
    script = {
        0: lambda: httpx.Response(503, text="busy"),
        1: lambda: page(0, ("a",)),
        2: lambda: page(1, ("b",), fmt="test/v2"),
        3: lambda: httpx.Response(503, text="busy"),
        4: lambda: httpx.Response(400, text="no"),
    }
    store = MemoryStore()
    client = Reads(lambda n, _: script[n]()).client()
    with anyio.fail_after(1000):
        async with (
            client,
            following_live_trajectory(
                ENDPOINT, store, "p/", "turn-1", poll_interval_seconds=POLL, client=client
            ) as turn,
        ):
            turn.follow("t1")
            await anyio.sleep(100)
    records = logged(logging.DEBUG)
    names = {r.name for r in records}
    assert {"follower.follow", "follower.turns", "follower.chunks"} <= names, names
    for record in records:
        assert (record.task_id, record.turn_id) == ("t1", "turn-1"), record.getMessage()
    assert all(name.startswith("follower.") for name in names)


async def test_no_header_token_or_body_reaches_a_log_line(
    logged: Callable[[int], list[logging.LogRecord]],
) -> None:
    def leaky(n: int, request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {SECRET}-token"
        echoed = {"x-echo": request.headers["authorization"], "retry-after": "1"}
        if n < 3:
            return httpx.Response(503 if n else 429, headers=echoed, text=f"{SECRET}-body {n}")
        if n == 3:
            return page(0, ("a",))
        return httpx.Response(401, headers=echoed, text=f"{SECRET}-body: bad token {SECRET}")

    store = MemoryStore()
    client = Reads(leaky).client(headers={"authorization": f"Bearer {SECRET}-token"})
    with anyio.fail_after(1000):
        async with (
            client,
            following_live_trajectory(
                ENDPOINT, store, "p/", "turn-1", poll_interval_seconds=POLL, client=client
            ) as turn,
        ):
            turn.follow("t1")
            await anyio.sleep(300)
    records = logged(logging.DEBUG)
    assert len(records) >= 4  # the outage, its recovery, the refusal: something was logged
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    for record in records:
        text = formatter.format(record) + repr(vars(record))
        assert SECRET not in text, text
    refusal = [r for r in records if r.name == "follower.turns"]
    assert len(refusal) == 1
    assert "HTTP 401" in refusal[0].getMessage()


# --- the A2A client's wait ------------------------------------------------------------


async def test_a_failing_tasks_get_is_one_warning_and_one_summary(
    logged: Callable[[int], list[logging.LogRecord]],
) -> None:
    def rpc(n: int, request: httpx.Request) -> httpx.Response:
        if n < 50:
            return httpx.Response(503 if n % 2 else 429, text="busy")
        task = {"kind": "task", "id": "t1", "contextId": "c", "status": {"state": "completed"}}
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": "x", "result": task})

    with anyio.fail_after(10_000):
        async with Reads(rpc).client() as client:
            agent = A2AAgent._create("http://agent.test/a2a", {}, client)
            task = await agent.wait_for_task("t1", deadline_seconds=5000)
    assert task.state == "completed"
    warnings = logged(logging.WARNING)
    assert len(warnings) == 2, [r.getMessage() for r in warnings]
    assert "recovered after 50 failed calls" in warnings[1].getMessage()
    assert all(r.task_id == "t1" for r in warnings)


# --- an agent that flaps ---------------------------------------------------------------


@pytest.mark.parametrize("every", [2, 10], ids=["every-other-read", "one-in-ten"])
async def test_a_flapping_agent_logs_one_run_however_many_reads_it_fails(
    every: int, logged: Callable[[int], list[logging.LogRecord]]
) -> None:
    # A failure every `every` reads, never SETTLE_SECONDS apart: one run, not one a flap.
    # (It logged a warning and a summary for each: 10,003 records for 10,003 reads.)
    reads = 1_000
    failed = len(range(0, reads, every))

    def flapping(n: int, request: httpx.Request) -> httpx.Response:
        if n == reads:
            return page(state="completed")
        if n % every == 0:
            return httpx.Response(503, text="busy")
        return page()

    with anyio.fail_after(10**7):
        async with Reads(flapping).client() as client:
            outcome = await follow_trajectory(
                ENDPOINT,
                "t1",
                RecordingSink(),
                poll_interval_seconds=POLL,
                stop=anyio.Event(),
                client=client,
            )
    assert (outcome.reads, outcome.failed_reads, outcome.complete) == (reads + 1, failed, True)
    loud = logged(logging.INFO)
    messages = [r.getMessage() for r in loud]
    # The run began; its first recovery; it failed again (one run, going on); its summary.
    assert len(loud) == 4, messages
    assert "are failing (HTTP 503)" in messages[0]
    assert "recovered after 1 failed read " in messages[1]
    assert "are failing again (HTTP 503)" in messages[2]
    assert f"stopped (it ended) after {failed} failed reads of {reads + 1}" in messages[3]
    summary = loud[3]
    assert (summary.failed_reads, summary.answered_reads) == (failed, reads + 1 - failed)
    assert summary.failing_seconds > 0
    assert all(r.levelno == logging.WARNING for r in loud)


async def test_a_flap_ends_after_a_quiet_while_and_the_next_failure_is_a_new_run(
    monkeypatch: pytest.MonkeyPatch, logged: Callable[[int], list[logging.LogRecord]]
) -> None:
    monkeypatch.setattr(_follow, "backoff_fraction", lambda: 0.0)  # retried after POLL
    quiet = _retries.SETTLE_SECONDS
    # Reads a second apart: fail, answer, fail, answer (a flap), then answered for
    # `quiet` seconds (the run settles), then one more outage of one read.
    flap = {0, 2}
    later = 4 + int(quiet) + 5
    last = later + 3

    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if n in flap or n == later:
            return httpx.Response(503, text="busy")
        return page(state="completed") if n == last else page()

    with anyio.fail_after(10_000):
        async with Reads(answer).client() as client:
            await follow_trajectory(
                ENDPOINT,
                "t1",
                RecordingSink(),
                poll_interval_seconds=POLL,
                stop=anyio.Event(),
                client=client,
            )
    messages = [r.getMessage() for r in logged(logging.INFO)]
    assert len(messages) == 6, messages
    first, recovered, again, settled, second, recovered_again = messages
    assert "are failing (HTTP 503)" in first
    assert "recovered after 1 failed read in 1.0 s" in recovered
    assert "are failing again (HTTP 503)" in again
    # From the first failure (read 0, at 0 s) to the first answer after the last (read 3,
    # at 3 s); settled by the first read `quiet` seconds after that answer (read 63).
    assert f"settled after 2 failed reads of {4 + int(quiet)} in 3.0 s" in settled
    assert "are failing (HTTP 503)" in second
    assert "recovered after 1 failed read in 1.0 s" in recovered_again


async def test_a_flapping_tasks_get_logs_one_run(
    logged: Callable[[int], list[logging.LogRecord]],
) -> None:
    calls = 200

    def rpc(n: int, request: httpx.Request) -> httpx.Response:
        if n % 2 == 0 and n < calls:
            return httpx.Response(503, text="busy")
        state = "completed" if n >= calls else "working"
        task = {"kind": "task", "id": "t1", "contextId": "c", "status": {"state": state}}
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": "x", "result": task})

    with anyio.fail_after(10**7):
        async with Reads(rpc).client() as client:
            agent = A2AAgent._create("http://agent.test/a2a", {}, client)
            task = await agent.wait_for_task("t1", deadline_seconds=10**6)
    assert task.state == "completed"
    messages = [r.getMessage() for r in logged(logging.INFO)]
    assert len(messages) == 4, messages
    assert "recovered after 1 failed call " in messages[1]
    assert "are failing again" in messages[2]
    summary = f"stopped (the wait ended) after {calls // 2} failed calls of {calls + 1}"
    assert summary in messages[3]


async def test_a_flap_then_a_long_outage_is_still_one_run(
    monkeypatch: pytest.MonkeyPatch, logged: Callable[[int], list[logging.LogRecord]]
) -> None:
    # Fail, answer, fail (a flap), then down for 40 reads: the backoff reaches its cap,
    # failures a minute apart. None answered between them, and the answer after the last
    # one is no quiet minute: one run, summarised as following ends.
    monkeypatch.setattr(_follow, "backoff_fraction", lambda: 1.0)
    down = {0} | set(range(2, 42))

    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if n in down:
            return httpx.Response(503, text="busy")
        return page(state="completed") if n == 43 else page()

    with anyio.fail_after(10**6):
        async with Reads(answer).client() as client:
            await follow_trajectory(
                ENDPOINT,
                "t1",
                RecordingSink(),
                poll_interval_seconds=POLL,
                stop=anyio.Event(),
                client=client,
            )
    messages = [r.getMessage() for r in logged(logging.INFO)]
    assert len(messages) == 4, messages
    assert "are failing again" in messages[2]
    assert "stopped (it ended) after 41 failed reads of 44" in messages[3]
