"""While a loop is behind, its reads queue for a few slots; while it keeps up, none waits.

docs/design.md, "Many followers on one loop": a loop that is behind would
otherwise have every follower's read in flight at once, each holding its
objects while the loop catches up (the collector's spiral at 5,000 followers,
docs/benchmarks.md). The rule first, with no event loop; then followers on a
virtual clock against an in-memory agent whose answers take half a second of
network (not loop) time, so that reads in flight can be counted.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import sniffio

from follower._reading import _admission
from follower._reading._admission import ADMITTED_READS, ReadAdmission, loop_admission

from ..support.loop_agent import POLL, Agent, Followers
from ..support.virtual_time import spend_loop_time, virtual_time_backends

ANSWER = 0.5  # an agent's answer takes this long on the network


def test_the_loop_is_behind_while_a_windows_mean_delay_is_over_the_bound() -> None:
    admission = ReadAdmission(2)
    bound, window = _admission.BEHIND_SECONDS, _admission.WINDOW_SECONDS
    clock = iter(range(10**6))

    def wakes(*delays: float) -> None:
        for delay in delays:  # 26 wakes a window: a window closes at the 26th
            admission.woke(delay, next(clock) * window / 25)

    at_once = admission.slot()
    wakes(*[0.002] * 100)  # on time, with a timer's jitter
    assert not admission.behind
    assert admission.slot() is at_once
    wakes(0.5, *[0.002] * 25)  # one late wake among on-time ones: under the bound on average
    assert not admission.behind
    wakes(*[0.1] * 26)  # a window of late wakes
    assert admission.behind
    assert admission.lateness_seconds == pytest.approx(0.1)
    slots = admission.slot()
    assert slots is not at_once
    wakes(*[0.75 * bound] * 52)  # under the bound, over half of it: still behind
    assert admission.behind
    assert admission.slot() is slots  # one loop, one set of slots
    wakes(*[0.4 * bound] * 26)  # a window under half the bound: caught up
    assert not admission.behind
    assert admission.slot() is at_once
    wakes(*[0.1] * 26)
    assert admission.behind
    admission.forget()  # the loop's last follower left
    assert not admission.behind
    assert admission.lateness_seconds == 0.0


def test_one_wake_later_than_the_herd_bound_puts_the_loop_behind_at_once() -> None:
    # A herd of followers due together wakes in one turn of the loop, each later by the
    # reads begun before it: the first wake past the bound puts the loop behind, and the
    # rest of the herd takes the slots, well before the window's mean would say so.
    admission = ReadAdmission(2)
    window, herd = _admission.WINDOW_SECONDS, _admission.HERD_SECONDS
    admission.woke(0.0, 0.0)  # the window opens
    for n in range(1, 10):
        admission.woke(herd * n / 10, window * n / 100)  # late, each by a little more
    assert not admission.behind
    admission.woke(herd * 1.01, window / 10)  # within the window still
    assert admission.behind
    assert admission.slot() is not _admission.AT_ONCE
    # A late wake that closes a window of wakes on time keeps it behind too.
    admission = ReadAdmission(2)
    for n in range(20):
        admission.woke(0.0, window * n / 20)
    admission.woke(herd * 1.01, window * 1.01)
    assert admission.behind


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


async def follow_for(
    agent: Agent, count: int, seconds: float, *, count_in_flight_after: float = 0.0
) -> Followers:
    """``count`` followers for ``seconds``; the agent's most reads in flight counted from
    ``count_in_flight_after`` seconds on."""
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            followers = Followers(tg, agent)
            for n in range(count):
                followers.start(f"task-{n}")
            await anyio.sleep(count_in_flight_after)
            agent.most_in_flight = agent.in_flight
            await anyio.sleep(seconds - count_in_flight_after)
            tg.cancel_scope.cancel()
    return followers


@pytest.mark.anyio
async def test_a_loop_whose_reads_queue_on_a_busy_core_stays_behind() -> None:
    # Behind, its reads queued for the slots: small delays say the slots hold the reads
    # back while the process's CPU is busy, and that its agents are slow while it idles.
    cpu = 0.0
    admission = ReadAdmission(1, cpu_clock=lambda: cpu)
    window = _admission.WINDOW_SECONDS
    now = 0.0

    def a_window(delay: float, cpu_share: float) -> None:
        nonlocal now, cpu
        for _ in range(26):
            admission.woke(delay, now)
            now += window / 25
            cpu += cpu_share * window / 25

    a_window(0.1, 1.0)
    assert admission.behind
    async with anyio.create_task_group() as tg, admission.slot():
        tg.start_soon(queue_for_a_slot, admission)
        while not admission.reads_queued:
            await anyio.lowlevel.checkpoint()
        a_window(0.0, 0.95)  # a busy core
        assert admission.behind
        a_window(0.0, 0.1)  # an idle one: the queue waits on agents
        assert not admission.behind
    a_window(0.1, 1.0)
    a_window(0.0, 1.0)  # nothing queues: caught up, however busy the core
    assert not admission.behind


async def queue_for_a_slot(admission: ReadAdmission) -> None:
    async with admission.slot():
        pass


@pytest.mark.anyio
async def test_reads_on_time_never_wait_for_a_slot() -> None:
    # 100 followers of an agent slow to answer, on a loop that keeps up: about 50 reads
    # are in flight at any time, and none of them waits for the loop's slots.
    agent = Agent(answer_after_seconds=ANSWER)
    followers = await follow_for(agent, 100, 10 * POLL)
    assert agent.most_in_flight >= 2 * ADMITTED_READS
    lags = [p.poll_lag_seconds for p in followers.progress.values()]
    assert all(lag is not None and lag <= _admission.BEHIND_SECONDS for lag in lags)
    for times in agent.reads.values():
        assert len(times) >= 9  # one an interval
        assert max(b - a for a, b in itertools.pairwise(times)) == pytest.approx(POLL, abs=1e-6)


@pytest.mark.anyio
async def test_agents_slower_than_the_poll_interval_never_put_the_loop_behind() -> None:
    # Each answer takes two intervals: every read is due again before it returns, and
    # begins at once. That is the agents' time, not the loop's: nothing queues.
    agent = Agent(answer_after_seconds=2 * POLL)
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            followers = Followers(tg, agent)
            for n in range(100):
                followers.start(f"task-{n}")
            await anyio.sleep(30 * POLL)
            behind = loop_admission().behind
            tg.cancel_scope.cancel()
    assert not behind
    assert agent.most_in_flight == 100
    for times in agent.reads.values():
        assert max(b - a for a, b in itertools.pairwise(times)) == pytest.approx(2 * POLL, abs=1e-6)


@pytest.mark.anyio
async def test_a_loop_that_stalled_once_catches_up_and_reads_every_follower_on_time() -> None:
    # A 2 s stall (a long pause of the loop) puts it behind; once it runs freely again,
    # the slots' queue drains and every follower reads once an interval, as before.
    agent = Agent(answer_after_seconds=ANSWER)
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            followers = Followers(tg, agent)
            for n in range(100):
                followers.start(f"task-{n}")
            await anyio.sleep(5 * POLL)
            spend_loop_time(2 * POLL)
            await anyio.lowlevel.checkpoint()
            await anyio.sleep(15 * POLL)
            since = anyio.current_time()
            await anyio.sleep(10 * POLL)
            behind = loop_admission().behind
            tg.cancel_scope.cancel()
    assert not behind
    for times in agent.reads.values():
        recent = [at for at in times if at >= since]
        assert len(recent) >= 9  # one an interval; 3 in 10 s through the slots
    lags = [p.poll_lag_seconds for p in followers.progress.values()]
    assert all(lag is not None and lag <= _admission.BEHIND_SECONDS for lag in lags)


@pytest.mark.anyio
async def test_late_reads_queue_for_the_slots_and_each_follower_is_read_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The loop counts as behind from its first wait on: 60 followers share its 16
    # slots, each turned over every half second, so a round of 60 reads takes 2 s.
    monkeypatch.setattr(_admission, "BEHIND_SECONDS", -1.0)
    count = 60
    agent = Agent(answer_after_seconds=ANSWER)
    # The first read, before any wait, goes at once: counted after it has ended.
    await follow_for(agent, count, 20 * POLL, count_in_flight_after=2 * POLL)
    assert agent.most_in_flight == ADMITTED_READS
    # First come, first served: at most every other follower's read is ahead of one
    # that queues, so it waits at most a round of slots (ceil(60 / 16) answers) and
    # then its own answer. trio runs each batch of woken tasks in its order or
    # reversed, at random, so a follower may queue behind a whole round once more.
    rounds = 2 if sniffio.current_async_library() == "trio" else 1
    worst_gap = (rounds * -(-count // ADMITTED_READS) + 1) * ANSWER
    for task_id, times in agent.reads.items():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert len(times) >= 20 * POLL / worst_gap - 1, task_id
        assert max(gaps) <= worst_gap + 1e-6, (task_id, gaps)
    assert len(agent.reads) == count


@pytest.mark.anyio
async def test_a_loop_that_falls_behind_keeps_at_most_its_slots_of_late_reads() -> None:
    # 40 followers whose reads each spend 0.1 s of the loop (4 s of reads asked a
    # second): after the first round the loop is behind, so the reads in flight are
    # the slots' few, not the 40 that would all be waiting for the loop.
    # The loop never catches up: its CPU is busy (spent_loop_seconds), so the small
    # delays of reads that wait for the slots do not let the late ones all go at once.
    agent = Agent(cost_seconds=0.1)
    followers = await follow_for(agent, 40, 30 * POLL, count_in_flight_after=10 * POLL)
    lags = [p.poll_lag_seconds for p in followers.progress.values()]
    # Behind, every follower's waits: each ended later than the loop's bound.
    assert all(lag is not None and lag > _admission.BEHIND_SECONDS for lag in lags), lags
    assert agent.most_in_flight <= ADMITTED_READS
    assert all(len(times) >= 5 for times in agent.reads.values())
