"""Retries: statuses that mean "later", Retry-After, jitter, the bounds after stop and on a run.

The read rules are in docs/protocol.md ("Following one task"). Timing tests run on
virtual time against in-memory fakes, so their times are exact; the jitter is
pinned (``backoff_fraction``) or seeded (``_retries._jitter``), never left to chance.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

import follower._reading._follow as _follow
from follower import (
    AgentRefusedError,
    AgentUnavailableError,
    ClientClosedError,
    InvalidArgumentError,
    LiveTurns,
    MemoryStore,
    TrajectoryState,
    UsageError,
    _retries,
    following_live_trajectory,
)
from follower._backoff import BACKOFF_CAP_SECONDS, BACKOFF_STEP_SECONDS, retry_delay
from follower._format._layout import TurnKeys
from follower._http._exchange import read_page, retry_after_seconds
from follower._reading._follow import AFTER_STOP_PAUSE_SECONDS
from follower.lowlevel import follow_trajectory

from ..support.agents import ENDPOINT, RecordingSink, ScriptedAgent
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

POLL = 2.0


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


def pin_backoff(monkeypatch: pytest.MonkeyPatch, fraction: float) -> None:
    monkeypatch.setattr(_follow, "backoff_fraction", lambda: fraction)


def page(after: int = 0, events: tuple[Any, ...] = (), state: str = "running") -> dict[str, Any]:
    return {
        "context_id": "ctx",
        "task_id": "t1",
        "state": state,
        "format": "test/v1",
        "events": list(events),
        "next": after + len(events),
        "has_more": False,
    }


Answer = httpx.Response | BaseException


class ScriptedReads:
    """An in-memory agent: each read takes the next answer; past the script, ``then``.

    Stamps each read with the (virtual) clock.
    """

    def __init__(self, answers: list[Answer], then: Callable[[], Answer]) -> None:
        self.answers = list(answers)
        self.then = then
        self.reads: list[float] = []
        self.first_read = anyio.Event()

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.reads.append(anyio.current_time())
        self.first_read.set()
        answer = self.answers.pop(0) if self.answers else self.then()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle))

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.reads, self.reads[1:], strict=False)]


def last_page() -> httpx.Response:
    return httpx.Response(200, json=page(state="completed"))


async def follow(client: httpx.AsyncClient, *, stop: anyio.Event | None = None, **kw: Any) -> Any:
    async with client:
        return await follow_trajectory(
            ENDPOINT,
            "t1",
            RecordingSink(),
            stop=anyio.Event() if stop is None else stop,
            client=client,
            **{"poll_interval_seconds": POLL, **kw},
        )


# --- the backoff's formula and its jitter ----------------------------------------------


def test_the_jitter_spreads_each_backoff_evenly_between_its_floor_and_its_ceiling() -> None:
    draws = random.Random(20240611)
    for failures in (1, 3, 12, 100):
        floor = POLL
        ceiling = min(POLL + BACKOFF_STEP_SECONDS * failures, BACKOFF_CAP_SECONDS)
        delays = [retry_delay(POLL, failures, draws.random()) for _ in range(10_000)]
        assert floor <= min(delays)
        assert max(delays) <= ceiling
        # Ten equal bins of the range each hold about a tenth (seeded: never flaky).
        bins = [0] * 10
        for delay in delays:
            bins[min(9, int((delay - floor) / (ceiling - floor) * 10))] += 1
        assert all(850 <= n <= 1150 for n in bins), bins
        assert sum(delays) / len(delays) == pytest.approx((floor + ceiling) / 2, rel=0.02)


def test_the_ends_of_the_jitter_are_the_poll_interval_and_the_backoff_without_it() -> None:
    assert [retry_delay(POLL, n, 1.0) for n in (1, 2, 11, 12, 1000)] == [7, 12, 57, 60, 60]
    assert [retry_delay(POLL, n, 0.0) for n in (1, 2, 1000)] == [POLL, POLL, POLL]
    assert retry_delay(120.0, 1, 0.0) == retry_delay(120.0, 1, 1.0) == 60.0


def test_retry_after_is_the_floor_of_the_backoff_within_the_cap() -> None:
    assert retry_delay(POLL, 1, 0.0, 30.0) == 30.0
    assert retry_delay(POLL, 1, 1.0, 30.0) == 35.0
    assert retry_delay(POLL, 1, 0.5, 1.0) == POLL + 2.5  # shorter than the poll: the poll wins
    assert retry_delay(POLL, 1, 0.0, 3600.0) == BACKOFF_CAP_SECONDS
    assert retry_delay(POLL, 1, 1.0, 3600.0) == BACKOFF_CAP_SECONDS


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds("120") == 120.0
    assert retry_after_seconds(" 0 ") == 0.0
    in_45 = email.utils.formatdate(now + 45, usegmt=True)
    assert retry_after_seconds(in_45, now=now) == pytest.approx(45.0)
    past = email.utils.formatdate(now - 45, usegmt=True)
    assert retry_after_seconds(past, now=now) == 0.0
    for unreadable in (None, "", "-5", "1.5", "soon", "Wed, 21 Oct 2015 07:28:00", "٣"):
        assert retry_after_seconds(unreadable) is None, unreadable


# --- 429 and 408: later, not no --------------------------------------------------------


@pytest.mark.parametrize("status", [429, 408])
async def test_throttled_or_timed_out_by_a_proxy_is_retried_with_backoff(
    status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pin_backoff(monkeypatch, 1.0)
    agent = ScriptedReads([httpx.Response(status, text="later")] * 3, then=last_page)
    with anyio.fail_after(1000):
        outcome = await follow(agent.client())
    assert outcome.complete
    assert agent.gaps() == pytest.approx([7.0, 12.0, 17.0])
    assert outcome.failed_reads == 3


@pytest.mark.parametrize("status", [429, 408, 503])
async def test_retry_after_in_seconds_is_honoured(
    status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pin_backoff(monkeypatch, 0.0)
    later = httpx.Response(status, headers={"retry-after": "30"}, text="slow down")
    agent = ScriptedReads([later], then=last_page)
    with anyio.fail_after(1000):
        assert (await follow(agent.client())).complete
    assert agent.gaps() == pytest.approx([30.0])


async def test_retry_after_as_an_http_date_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    pin_backoff(monkeypatch, 0.0)
    # The date is on the wall clock, with whole seconds: 20 s ahead is 19 to 20 s.
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    later = httpx.Response(429, headers={"retry-after": when})
    agent = ScriptedReads([later], then=last_page)
    with anyio.fail_after(1000):
        assert (await follow(agent.client())).complete
    [gap] = agent.gaps()
    assert 18.5 <= gap <= 20.0


async def test_a_retry_after_past_the_cap_waits_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    pin_backoff(monkeypatch, 0.0)
    later = httpx.Response(429, headers={"retry-after": "86400"})
    agent = ScriptedReads([later, later], then=last_page)
    with anyio.fail_after(1000):
        assert (await follow(agent.client())).complete
    assert agent.gaps() == pytest.approx([BACKOFF_CAP_SECONDS, BACKOFF_CAP_SECONDS])


async def test_the_error_carries_the_status_and_the_retry_after() -> None:
    later = httpx.Response(429, headers={"retry-after": "12"}, text="too many")
    agent = ScriptedReads([later, httpx.Response(503, text="down")], then=last_page)
    async with agent.client() as client:
        with pytest.raises(AgentUnavailableError) as caught:
            await read_page(client, ENDPOINT, "t1", 0)
        assert (caught.value.status_code, caught.value.retry_after_seconds) == (429, 12.0)
        with pytest.raises(AgentUnavailableError) as caught:
            await read_page(client, ENDPOINT, "t1", 0)
        assert (caught.value.status_code, caught.value.retry_after_seconds) == (503, None)


@pytest.mark.parametrize("status", [400, 401, 403, 405, 409, 410, 413, 422])
async def test_other_4xx_still_refuse_the_read(status: int) -> None:
    agent = ScriptedReads([httpx.Response(status, headers={"retry-after": "1"})], then=last_page)
    with anyio.fail_after(100), pytest.raises(AgentRefusedError) as caught:
        await follow(agent.client())
    assert caught.value.status_code == status
    assert len(agent.reads) == 1


# --- many followers after one outage ---------------------------------------------------


async def test_followers_that_failed_together_do_not_retry_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_retries, "_jitter", random.Random(11))
    followers = 50
    agents = [
        ScriptedReads([httpx.Response(503, text="down")], then=last_page) for _ in range(followers)
    ]
    with anyio.fail_after(1000):
        async with anyio.create_task_group() as tg:
            for agent in agents:
                tg.start_soon(follow, agent.client())
    assert len({agent.reads[0] for agent in agents}) == 1  # the outage hit all at once
    retries = sorted(agent.reads[1] - agent.reads[0] for agent in agents)
    assert retries[0] >= POLL
    assert retries[-1] <= POLL + BACKOFF_STEP_SECONDS
    assert len(set(retries)) == followers
    # Spread over the window, not bunched: no second holds more than a third of them.
    per_second = [sum(1 for r in retries if s <= r - POLL < s + 1) for s in range(5)]
    assert max(per_second) <= followers // 3, per_second


# --- after stop, a failed read ends following, whatever the failure --------------------

FAILURES: dict[str, Callable[[], Answer]] = {
    "429": lambda: httpx.Response(429, headers={"retry-after": "5"}),
    "408": lambda: httpx.Response(408),
    "500": lambda: httpx.Response(500),
    "503-retry-after": lambda: httpx.Response(503, headers={"retry-after": "60"}),
    "ConnectError": lambda: httpx.ConnectError("refused"),
    "ReadError": lambda: httpx.ReadError("reset"),
    "ReadTimeout": lambda: httpx.ReadTimeout("timed out"),
}


@pytest.mark.parametrize("failure", FAILURES)
async def test_after_stop_one_failed_read_ends_following(failure: str) -> None:
    agent = ScriptedReads([], then=FAILURES[failure])
    stop = anyio.Event()
    stop.set()
    with anyio.fail_after(100):
        start = anyio.current_time()
        outcome = await follow(agent.client(), stop=stop)
        took = anyio.current_time() - start
    assert len(agent.reads) == 1
    assert took == pytest.approx(0.0, abs=1e-6)
    assert (outcome.reads, outcome.failed_reads, outcome.complete) == (1, 1, False)


@pytest.mark.parametrize("failure", FAILURES)
async def test_a_stop_during_a_backoff_ends_following_at_the_next_failure(failure: str) -> None:
    agent = ScriptedReads([], then=FAILURES[failure])
    stop = anyio.Event()
    with anyio.fail_after(100):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: follow(agent.client(), stop=stop))
            await agent.first_read.wait()
            await anyio.sleep(1.0)  # virtual: places the stop inside the first backoff
            stop.set()
    assert len(agent.reads) == 2


async def test_after_stop_a_pool_that_stays_full_is_bounded_by_the_drain() -> None:
    # Our own pool full is never the agent's failure (no sentinel): the drain bounds it.
    attempts: list[float] = []

    def full(request: httpx.Request) -> httpx.Response:
        attempts.append(anyio.current_time())
        raise httpx.PoolTimeout("no free connection")

    store = MemoryStore()
    drain = 3.0
    with anyio.fail_after(100):
        async with httpx.AsyncClient(transport=httpx.MockTransport(full)) as client:
            async with following_live_trajectory(
                ENDPOINT,
                store,
                "p/",
                "turn-1",
                poll_interval_seconds=POLL,
                drain_seconds=drain,
                client=client,
            ) as turn:
                turn.follow("t1")
                await anyio.sleep(1.0)
                body_end = anyio.current_time()
            exited = anyio.current_time()
    assert exited - body_end == pytest.approx(drain, abs=1e-6)
    after_stop = [at for at in attempts if at >= body_end]
    assert len(after_stop) <= math.ceil(drain / AFTER_STOP_PAUSE_SECONDS) + 1
    stats = turn.statistics()
    assert (stats.reads, stats.failed_reads) == (0, 0)
    assert stats.pool_waits == len(attempts)


# --- a caller's client closed mid-step -------------------------------------------------


async def test_a_client_closed_mid_follow_raises_a_typed_error() -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a")
    client = agent.client()
    with anyio.fail_after(100):
        async with anyio.create_task_group() as tg:
            failures: list[BaseException] = []

            async def run() -> None:
                try:
                    await follow_trajectory(
                        ENDPOINT,
                        "t1",
                        RecordingSink(),
                        poll_interval_seconds=POLL,
                        stop=anyio.Event(),
                        client=client,
                    )
                except Exception as exc:
                    failures.append(exc)

            tg.start_soon(run)
            await agent.wait_reads(1)
            await client.aclose()
    [error] = failures
    assert isinstance(error, ClientClosedError)
    assert isinstance(error, UsageError)
    assert isinstance(error, RuntimeError)
    assert (error.url, error.task_id) == (ENDPOINT, "t1")
    assert "t1" in str(error)
    assert ENDPOINT in str(error)
    assert len(agent.reads) == 1  # nothing was sent on the closed client


async def test_a_client_closed_mid_step_ends_following_and_not_the_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a")
    store = MemoryStore()
    client = agent.client()
    with anyio.fail_after(100):
        async with following_live_trajectory(
            ENDPOINT, store, "p/", "turn-1", poll_interval_seconds=POLL, client=client
        ) as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            await client.aclose()
            await anyio.sleep(10 * POLL)  # the body goes on; following has ended
            assert turn.statistics().followers_alive == 0
            turn.ended("completed")
    assert len(agent.reads) == 1
    logged = [r for r in caplog.records if r.name == "follower.turns"]
    assert len(logged) == 1
    assert "ClientClosedError" in logged[0].getMessage()
    end = await store.get(TurnKeys("p/", "turn-1").end)
    assert b'"complete":false' in end.replace(b" ", b"")


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])  # a real socket: real time
@pytest.mark.waiting
async def test_a_client_closed_under_a_read_in_flight_is_the_callers_not_the_agents() -> None:
    # A real socket whose server never answers: the read is in flight when the client closes.
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    accepted = anyio.Event()

    async def silent(stream: anyio.abc.SocketStream) -> None:
        accepted.set()
        async with stream:
            await anyio.sleep_forever()

    failures: list[BaseException] = []
    failed = anyio.Event()
    client = httpx.AsyncClient()

    async def run() -> None:
        try:
            await follow_trajectory(
                f"http://127.0.0.1:{port}/ext/trajectory",
                "t1",
                RecordingSink(),
                poll_interval_seconds=POLL,
                stop=anyio.Event(),
                client=client,
                # The read outlives the close until it times out: a short bound, not 30 s,
                # still far longer than the close takes to come.
                read_timeout_seconds=3.0,
            )
        except Exception as exc:
            failures.append(exc)
        finally:
            failed.set()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, silent)
        tg.start_soon(run)
        with anyio.fail_after(100):
            await accepted.wait()
            await client.aclose()
            await failed.wait()
        tg.cancel_scope.cancel()
    [error] = failures
    assert isinstance(error, ClientClosedError)


# --- an optional bound on a follower's run ---------------------------------------------


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "5"])
async def test_max_follow_seconds_is_checked_where_it_is_named(bad: Any) -> None:
    store = MemoryStore()
    with pytest.raises(InvalidArgumentError, match="max_follow_seconds"):
        await follow_trajectory(
            ENDPOINT,
            "t1",
            RecordingSink(),
            poll_interval_seconds=POLL,
            stop=anyio.Event(),
            max_follow_seconds=bad,
        )
    with pytest.raises(InvalidArgumentError, match="max_follow_seconds"):
        following_live_trajectory(
            ENDPOINT, store, "p/", "t", poll_interval_seconds=POLL, max_follow_seconds=bad
        )
    with pytest.raises(InvalidArgumentError, match="max_follow_seconds"):
        LiveTurns(ENDPOINT, store, "p/", poll_interval_seconds=POLL, max_follow_seconds=bad)


async def test_max_follow_seconds_ends_a_follower_that_would_read_forever(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = ScriptedReads([], then=lambda: httpx.Response(200, json=page()))
    with anyio.fail_after(1000):
        start = anyio.current_time()
        outcome = await follow(agent.client(), max_follow_seconds=9.0)
        took = anyio.current_time() - start
    assert took == pytest.approx(9.0, abs=1e-6)
    assert agent.reads
    assert agent.reads[-1] - start <= 9.0
    assert len(agent.reads) == 5  # at 0, 2, 4, 6, 8
    assert not outcome.complete
    warnings = [r for r in caplog.records if r.name == "follower.follow"]
    assert len(warnings) == 1
    assert "max_follow_seconds" in warnings[0].getMessage()


async def test_a_turn_past_max_follow_seconds_goes_on_and_is_marked_incomplete() -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a")
    store = MemoryStore()
    with anyio.fail_after(1000):
        async with (
            agent.client() as client,
            LiveTurns(
                ENDPOINT,
                store,
                "p/",
                poll_interval_seconds=POLL,
                client=client,
                max_follow_seconds=5.0,
            ) as turns,
            turns.following("turn-1") as turn,
        ):
            turn.follow("t1")
            await anyio.sleep(30.0)
            stats = turn.statistics()
            turn.ended(TrajectoryState.COMPLETED)
    assert stats.followers_alive == 0
    assert stats.events_stored == 1
    assert len(agent.reads) == 3  # at 0, 2, 4
    end = (await store.get(TurnKeys("p/", "turn-1").end)).replace(b" ", b"")
    assert b'"state":"completed"' in end
    assert b'"complete":false' in end
