"""Followers sharing one event loop: first reads spread, fair turns under overload, said once.

docs/design.md, "Many followers on one loop". The sync rules (``_pacing``)
first, with no event loop; then followers on a virtual clock against an
in-memory agent: a thousand that start together spread their first reads over
one interval, a lone one reads at once, a stop ends a slot's wait; and a loop
given more reads than it can serve (each read spends loop time, as CPU would)
still reads every follower in turn, reports its lag, and says so once.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from typing import Any

import anyio
import anyio.abc
import pytest
import sniffio

from follower._reading import _pacing
from follower._reading._pacing import LoopPacing, spread_fraction

from ..support.loop_agent import POLL, Agent, Followers
from ..support.virtual_time import virtual_time_backends

# --- the rules, with no event loop --------------------------------------------------


def test_the_spread_is_the_van_der_corput_sequence() -> None:
    assert [spread_fraction(k) for k in range(8)] == [
        0,
        0.5,
        0.25,
        0.75,
        0.125,
        0.625,
        0.375,
        0.875,
    ]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1000, 5000])
def test_any_number_starting_together_fill_one_interval_evenly(n: int) -> None:
    pacing = LoopPacing()
    delays = sorted(pacing.first_read_delay(100.0, POLL) for _ in range(n))
    assert delays[0] == 0.0  # the first reads at once
    assert delays[-1] < POLL  # none waits a whole interval
    # Round the interval: the gap after the last wraps to the first of the next interval.
    gaps = [b - a for a, b in itertools.pairwise([*delays, POLL + delays[0]])]
    assert max(gaps) <= 2 * POLL / n + 1e-9


def test_a_lone_follower_reads_at_once_and_a_burst_ends_with_its_first_reads() -> None:
    pacing = LoopPacing()
    assert pacing.first_read_delay(10.0, POLL) == 0.0
    assert pacing.first_read_delay(10.0, POLL) == 0.5 * POLL  # started while the first reads
    pacing.first_read_done()
    pacing.first_read_done()
    assert pacing.first_read_delay(10.2, POLL) == 0.0  # nobody else is starting: at once


def test_a_burst_lasts_at_most_one_interval() -> None:
    pacing = LoopPacing()
    assert pacing.first_read_delay(10.0, POLL) == 0.0
    assert pacing.first_read_delay(10.5, POLL) == 0.0  # slot 10.5: now
    assert pacing.first_read_delay(11.0, POLL) == 0.0  # a new burst
    assert pacing.first_read_delay(11.0, POLL) == 0.5 * POLL


def test_the_slot_of_a_late_joiner_is_never_more_than_its_own_interval_away() -> None:
    pacing = LoopPacing()
    pacing.first_read_delay(0.0, 10.0)
    for k in range(1, 100):
        assert 0.0 <= pacing.first_read_delay(0.001 * k, POLL) < POLL


def test_a_loop_over_capacity_is_said_once_with_how_much() -> None:
    pacing = LoopPacing()
    for _ in range(10):
        pacing.joined(POLL)
    now = 0.0
    # A window of reads on time: nothing said, no lag.
    while now < _pacing.WINDOW_SECONDS:
        pacing.read()
        assert pacing.woke(now, 0.01, POLL) is None
        now += 0.1
    assert pacing.woke(now, 0.01, POLL) is None
    assert pacing.lag_seconds == pytest.approx(0.01)
    # Then reads half an interval late, 5 a second for 10 asked: said once.
    said = []
    for _ in range(40):
        now += 0.2
        pacing.read()
        said.append(pacing.woke(now, 0.5 * POLL, POLL))
    over = [s for s in said if s is not None]
    assert len(over) == 1
    assert over[0].followers == 10
    assert over[0].asked_per_second == pytest.approx(10.0)
    assert over[0].served_per_second == pytest.approx(5.0, rel=0.1)
    assert over[0].mean_lateness_seconds == pytest.approx(0.5 * POLL, rel=0.1)
    assert over[0].factor == pytest.approx(2.0, rel=0.1)
    assert pacing.lag_seconds == pytest.approx(0.5 * POLL, rel=0.1)
    for _ in range(10):
        pacing.left(POLL)
    assert pacing.followers == 0
    assert pacing.asked_per_second == 0.0


# --- followers on a virtual clock -----------------------------------------------------


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.anyio
async def test_a_thousand_followers_starting_together_spread_their_first_reads() -> None:
    agent = Agent()
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            followers = Followers(tg, agent)
            started_at = anyio.current_time()
            for n in range(1000):
                followers.start(f"task-{n}")
            await anyio.sleep(1.5 * POLL)
            tg.cancel_scope.cancel()
    firsts = [at - started_at for at in agent.first_reads()]
    assert len(firsts) == 1000
    assert firsts[0] == 0.0  # the first reads at once
    assert firsts[-1] < POLL  # none waits longer than one interval
    # Evenly: each tenth of the interval has about a tenth of the first reads.
    per_tenth = Counter(int(at / POLL * 10) for at in firsts)
    assert sorted(per_tenth) == list(range(10))
    assert max(per_tenth.values()) <= 110
    assert min(per_tenth.values()) >= 90


@pytest.mark.anyio
async def test_a_lone_follower_reads_at_once_and_so_does_each_after_the_last_read() -> None:
    agent = Agent()
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            followers = Followers(tg, agent)
            starts = []
            for n in range(3):  # one after another: each starts once the last has read
                starts.append(anyio.current_time())
                followers.start(f"task-{n}")
                await anyio.sleep(0.1 * POLL)
            tg.cancel_scope.cancel()
    assert agent.first_reads() == pytest.approx(starts, abs=1e-6)


@pytest.mark.anyio
async def test_a_stop_ends_the_wait_for_a_first_reads_slot() -> None:
    # A turn whose body returns while its follower waits for its slot drains at once.
    agent = Agent(hold=anyio.Event())  # the first read is still in flight when the second starts
    stop = anyio.Event()
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            followers = Followers(tg, agent)
            started_at = anyio.current_time()
            followers.start("first")
            await agent.reading.wait()  # the first is reading: the second starts with it
            followers.start("second", stop)  # its slot: half an interval on
            await anyio.sleep(0.1 * POLL)
            stop.set()
            await anyio.sleep(0.1 * POLL)
            tg.cancel_scope.cancel()
    assert agent.reads["second"][0] - started_at == pytest.approx(0.1 * POLL, abs=1e-6)


@pytest.mark.anyio
async def test_under_overload_every_follower_is_read_in_turn_and_the_lag_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 20 followers at a 1 s poll, each read spending 0.1 s of the loop: 2 s of reads
    # asked a second, twice what the loop can serve.
    count, cost = 20, 0.1
    agent = Agent(cost_seconds=cost)
    caplog.set_level(logging.WARNING, logger="follower")
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            followers = Followers(tg, agent)
            for n in range(count):
                followers.start(f"task-{n}")
            await anyio.sleep(40 * POLL)
            tg.cancel_scope.cancel()
    round_seconds = count * cost  # every follower read once: the fair period
    # asyncio wakes them in the order they were read (a round's length varies by a
    # read or two as the first reads settle). trio runs each batch of woken tasks in
    # its order or reversed, at random (on purpose), so a follower read first in one
    # round may be read last in the next: never later than that.
    worst_gap = (2.0 if sniffio.current_async_library() == "trio" else 1.25) * round_seconds
    for task_id, times in agent.reads.items():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert max(gaps) <= worst_gap, (task_id, gaps)
        assert len(times) >= 40 * POLL / round_seconds - 2, task_id
    lags = [p.poll_lag_seconds for p in followers.progress.values()]
    assert all(lag is not None for lag in lags)
    # About a round late (2 s of reads a 1 s interval), each by its place in the round.
    assert sum(lag or 0.0 for lag in lags) / count >= 0.5 * POLL, lags
    said = [r for r in caplog.records if "over capacity" in r.getMessage()]
    assert len(said) == 1
    assert said[0].levelno == logging.WARNING
    assert said[0].over_capacity_factor == pytest.approx(2.0, rel=0.25)  # type: ignore[attr-defined]
    assert said[0].followers == count  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_loop_that_keeps_up_reads_on_time_and_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = Agent(cost_seconds=0.01)  # 5 followers: 5% of the loop
    caplog.set_level(logging.WARNING, logger="follower")
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            followers = Followers(tg, agent)
            for n in range(5):
                followers.start(f"task-{n}")
            await anyio.sleep(20 * POLL)
            tg.cancel_scope.cancel()
    lags = [p.poll_lag_seconds for p in followers.progress.values()]
    assert all(lag is not None and lag <= 0.05 * POLL for lag in lags), lags
    assert not [r for r in caplog.records if "over capacity" in r.getMessage()]


@pytest.mark.anyio
async def test_a_backlog_read_at_once_behind_a_slow_sink_is_not_the_loops_lag() -> None:
    # A page that has more is read again at once, once the sink has stored it. The
    # sink's time is the follower's own work, not the loop falling behind: the poll
    # lag counts only reads that waited for their time.
    backlog, storing = 5, 0.3 * POLL
    agent = Agent(pages_with_more=backlog)
    lags_at_reads: list[float | None] = []

    async def slow_sink(batch: Any) -> None:
        await anyio.sleep(storing)  # a store's put, on the network
        lags_at_reads.append(followers.progress["task-0"].poll_lag_seconds)

    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            followers = Followers(tg, agent, sink=slow_sink)
            followers.start("task-0")
            await anyio.sleep(backlog * storing + 3.5 * POLL)
            tg.cancel_scope.cancel()
    times = agent.reads["task-0"]
    # The backlog back to back, each read once its page was stored; then one an interval.
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[:backlog] == pytest.approx([storing] * backlog, abs=1e-6)
    assert gaps[backlog:] == pytest.approx([POLL] * (len(gaps) - backlog), abs=1e-6)
    assert len(gaps) > backlog + 1
    # No scheduled wait before the backlog's last page: no lag yet; on time after it.
    assert lags_at_reads[: backlog + 1] == [None] * (backlog + 1)
    assert lags_at_reads[backlog + 1 :] == pytest.approx(
        [0.0] * (len(lags_at_reads) - backlog - 1), abs=1e-6
    )
