"""The loop's timekeeper: a turn's follower waits on one timer a loop, and its stop ends the wait.

A parked wait ends at its deadline, when its turn's stop is set, or by a cancel,
whichever comes first, and a cancel that arrives with the stop (in the same turn of
the loop, before the waiting task runs again) goes first: a follower told to stop
and cancelled at once must not read again. One of the parked waits keeps the time for
all, and hands its turn on when its own wait ends, however it ends: so the plans
wait again and again, as followers do, and the waits that keep the time are stopped
and cancelled too. All on virtual time, so that "when" is exact and no test depends
on how busy the machine is.
"""

from __future__ import annotations

import contextlib
import gc
import math
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from follower._reading import _keeper
from follower._reading._keeper import TurnStop
from follower._reading._shell import wait_or_stop

from ..support.hypothesis_profiles import property_settings, share_seed
from ..support.virtual_time import spend_loop_time, virtual_clock, virtual_time_backends

BACKENDS = ("asyncio", "trio")


@pytest.fixture(params=virtual_time_backends())
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


# --- a plan of waits, stops and cancels, and what each wait must come to ---------------

# Stops and cancels fall on quarters of a second, deadlines on eighths: a stop and a
# cancel may come together, and a deadline may fall with either. Which of two timers
# due at one instant fires first is the loop's, so a deadline that falls with a cancel
# may end the wait either way, but only one of the two, and at that instant.
EIGHTH = 0.125

End = tuple[str, float]  # how a wait ended ("woke", "cancelled"), and when


@attrs.frozen
class Wait:
    seconds: tuple[float, ...]  # one waiter's waits, one after another
    stop_at: float | None  # when its turn's stop is set
    cancel_at: float | None  # when its task is cancelled
    cancel_first: bool  # at a tie, the cancel is made before the stop is set
    second_waiter: bool  # another task waits on the same stop beside it

    def expected(self) -> set[tuple[End, ...]]:
        """How its waits may end, and when: each at the first of its deadline, the stop, the cancel.

        A wait that begins once the stop is set ends at once. A cancel with the stop
        goes first; a cancel with anything else (a deadline, or a wait that began with
        it) may come before or after it.
        """
        stop = math.inf if self.stop_at is None else self.stop_at
        cancel = math.inf if self.cancel_at is None else self.cancel_at
        ways: set[tuple[End, ...]] = set()

        def go(began: float, left: tuple[float, ...], ends: tuple[End, ...]) -> None:
            if not left:
                ways.add(ends)
                return
            deadline = began + left[0]
            ends_at = began if stop < began else min(deadline, stop)
            if cancel < ends_at or cancel == stop == ends_at < deadline:
                ways.add((*ends, ("cancelled", cancel)))
                return
            if cancel == ends_at:
                ways.add((*ends, ("cancelled", cancel)))
            go(ends_at, left[1:], (*ends, ("woke", ends_at)))

        go(0.0, self.seconds, ())
        return ways


def quarters() -> st.SearchStrategy[float]:
    return st.integers(min_value=1, max_value=12).map(lambda n: n * 2 * EIGHTH)


waits = st.builds(
    Wait,
    seconds=st.lists(
        st.integers(min_value=1, max_value=16).map(lambda n: n * EIGHTH), min_size=1, max_size=3
    ).map(tuple),
    stop_at=st.none() | quarters(),
    cancel_at=st.none() | quarters(),
    cancel_first=st.booleans(),
    second_waiter=st.booleans(),
)


async def run_plan(plan: list[Wait], in_order: bool = False) -> list[tuple[End, ...]]:
    """Each waiter's ends, ``(how, seconds after the start)``, the second waiters' after.

    ``in_order``: each waiter parks before the next starts (else the loop picks).
    """
    began = anyio.current_time()
    ends: dict[int, list[End]] = {}
    stops = [TurnStop() for _ in plan]
    scopes: dict[int, anyio.CancelScope] = {}

    async def waiter(key: int, stop: TurnStop, seconds: tuple[float, ...]) -> None:
        record = ends[key] = []
        with anyio.CancelScope() as scope:
            scopes[key] = scope
            for wait in seconds:
                await wait_or_stop(stop, wait)
                record.append(("woke", anyio.current_time() - began))
        if scope.cancelled_caught:
            record.append(("cancelled", anyio.current_time() - began))

    # A wait the timekeeper lost fails at the virtual bound; a keeper spinning at one
    # instant of the virtual clock, which never reaches it, at the real one.
    with fails_after_real_seconds(60), anyio.fail_after(600):
        await run_waits(plan, stops, waiter, scopes, began, in_order)
    return [tuple(ends[n]) for n in range(len(plan))] + [
        tuple(ends[len(plan) + n]) for n, wait in enumerate(plan) if wait.second_waiter
    ]


async def run_waits(
    plan: list[Wait],
    stops: list[TurnStop],
    waiter: Callable[[int, TurnStop, tuple[float, ...]], Awaitable[None]],
    scopes: dict[int, anyio.CancelScope],
    began: float,
    in_order: bool,
) -> None:
    # The control's moments, in order; at each, its stops and cancels in one step of the loop.
    moments: dict[float, list[tuple[int, int]]] = {}
    for n, wait in enumerate(plan):
        if wait.cancel_at is not None:
            moments.setdefault(wait.cancel_at, []).append((0 if wait.cancel_first else 2, n))
        if wait.stop_at is not None:
            moments.setdefault(wait.stop_at, []).append((1, n))
    async with anyio.create_task_group() as tg:
        for n, wait in enumerate(plan):
            tg.start_soon(waiter, n, stops[n], wait.seconds)
            if wait.second_waiter:
                tg.start_soon(waiter, len(plan) + n, stops[n], wait.seconds)
            if in_order:
                await anyio.lowlevel.checkpoint()
        for at in sorted(moments):
            await anyio.sleep_until(began + at)
            for order, n in sorted(moments[at]):
                if order == 1:
                    stops[n].set()
                else:
                    scopes[n].cancel()
                    if plan[n].second_waiter:
                        scopes[len(plan) + n].cancel()


def check_plan(
    backend: str, plan: list[Wait], in_order: bool = False, sweep_eagerly: bool = False
) -> None:
    """``sweep_eagerly``: the ended waits are swept from the heap as soon as they outnumber
    the parked ones, as at thousands of followers, rather than past a slack few plans reach."""
    with sweeping_beyond(0 if sweep_eagerly else _keeper._SWEEP_SLACK):
        ends = anyio.run(
            run_plan, plan, in_order, backend=backend, backend_options=virtual_clock(backend)
        )
    expected = [wait.expected() for wait in plan]
    expected += [wait.expected() for wait in plan if wait.second_waiter]
    assert len(ends) == len(expected)
    for got, allowed in zip(ends, expected, strict=True):
        assert _exact(got) in {_exact(way) for way in allowed}, (backend, plan, ends)


@contextlib.contextmanager
def sweeping_beyond(slack: int) -> Iterator[None]:
    """The timekeeper sweeps its ended waits once they pass the parked ones by ``slack``."""
    was = _keeper._SWEEP_SLACK
    _keeper._SWEEP_SLACK = slack
    try:
        yield
    finally:
        _keeper._SWEEP_SLACK = was


def _exact(ends: tuple[End, ...]) -> tuple[End, ...]:
    """Times on virtual time, rounded past a float's error: every moment is an eighth."""
    return tuple((how, _on_eighths(at)) for how, at in ends)


def _on_eighths(at: float) -> float:
    eighths = round(at * 8)
    return eighths / 8 if abs(at * 8 - eighths) < 1e-6 else at  # off the eighths: fails


@pytest.mark.parametrize("backend", BACKENDS)
@property_settings(400, shared=True)
@share_seed
@given(plan=st.lists(waits, min_size=1, max_size=8), sweep_eagerly=st.booleans())
def test_each_wait_ends_at_its_deadline_its_stop_or_its_cancel_whichever_is_first(
    backend: str, plan: list[Wait], sweep_eagerly: bool
) -> None:
    check_plan(backend, plan, sweep_eagerly=sweep_eagerly)


# A stop and a cancel in one step of the loop, the stop first: the waiting task is
# woken, and the cancel comes before it runs again. Its wait is parked beside another,
# which keeps the time (a wait that keeps the time is told by a cancel of its sleep).
STOPPED_AND_CANCELLED = [
    Wait(seconds=(4.0,), stop_at=None, cancel_at=None, cancel_first=False, second_waiter=False),
    Wait(
        seconds=(9 * EIGHTH,), stop_at=0.5, cancel_at=0.5, cancel_first=False, second_waiter=False
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_plans_catch_a_wait_that_lets_a_stop_beat_the_cancel_with_it(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_plan(backend, STOPPED_AND_CANCELLED, in_order=True)
    # The wait without its last checkpoint: a woken wait returns though cancelled.
    monkeypatch.setattr(_keeper.anyio.lowlevel, "checkpoint_if_cancelled", _no_checkpoint)
    with pytest.raises(AssertionError):
        check_plan(backend, STOPPED_AND_CANCELLED, in_order=True)


async def _no_checkpoint() -> None:
    return None


# --- the timekeeper's own cases -------------------------------------------------------


@pytest.mark.anyio
async def test_a_nearer_deadline_parked_after_a_later_one_is_served_first() -> None:
    late, soon = TurnStop(), TurnStop()
    woke: list[tuple[str, float]] = []
    began = anyio.current_time()

    async def wait(name: str, stop: TurnStop, seconds: float) -> None:
        await wait_or_stop(stop, seconds)
        woke.append((name, anyio.current_time() - began))

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, "late", late, 10.0)
        await anyio.lowlevel.checkpoint()  # parked: it keeps the time, asleep until 10 s
        tg.start_soon(wait, "soon", soon, 1.0)
    assert [name for name, _ in woke] == ["soon", "late"]
    assert [at for _, at in woke] == pytest.approx([1.0, 10.0], abs=1e-6)


@pytest.mark.anyio
async def test_a_stop_set_before_the_wait_ends_it_at_once_and_a_cancel_then_goes_first() -> None:
    stop = TurnStop()
    stop.set()
    began = anyio.current_time()
    await wait_or_stop(stop, 5.0)
    assert anyio.current_time() == began
    with anyio.CancelScope() as scope:
        scope.cancel()
        await wait_or_stop(stop, 5.0)
        pytest.fail("a cancelled wait returned")  # pragma: no cover
    assert scope.cancelled_caught


@pytest.mark.anyio
async def test_the_stop_wakes_every_task_that_waits_on_it() -> None:
    stop = TurnStop()
    woke: list[str] = []

    async def park() -> None:
        await wait_or_stop(stop, 60.0)  # the first parks on the timekeeper
        woke.append("parked")

    async def beside() -> None:
        await wait_or_stop(stop, 60.0)  # a second waits in a cancel scope
        woke.append("beside")

    async def event() -> None:
        await stop.wait()  # as a drain does
        woke.append("event")

    began = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for waiter in (park, beside, event):
            tg.start_soon(waiter)
        await anyio.sleep(1.0)
        assert stop.statistics().tasks_waiting == 3  # the parked one, and two on its event
        stop.set()
    assert sorted(woke) == ["beside", "event", "parked"]
    assert anyio.current_time() - began == pytest.approx(1.0, abs=1e-6)
    assert stop.is_set()
    await stop.wait()  # set: returns at once


@pytest.mark.anyio
async def test_waits_cancelled_before_their_deadlines_leave_the_timekeeper_serving() -> None:
    began = anyio.current_time()
    stops = [TurnStop() for _ in range(5)]
    woke: list[float] = []

    async def long_wait() -> None:  # parked throughout: the cancelled waits stay in the heap
        await wait_or_stop(TurnStop(), 100.0)
        woke.append(anyio.current_time() - began)

    async with anyio.create_task_group() as outer:
        outer.start_soon(long_wait)
        async with anyio.create_task_group() as tg:
            for stop in stops:
                tg.start_soon(wait_or_stop, stop, 30.0)
            await anyio.sleep(1.0)
            tg.cancel_scope.cancel()
        assert all(stop._parked is None for stop in stops)  # none points at a wait that ended
        # Served past the cancelled waits, both before their deadline and after it.
        await wait_or_stop(TurnStop(), 2.0)
        assert anyio.current_time() - began == pytest.approx(3.0, abs=1e-6)
        await wait_or_stop(TurnStop(), 40.0)
        assert anyio.current_time() - began == pytest.approx(43.0, abs=1e-6)
    assert woke == pytest.approx([100.0], abs=1e-6)


@pytest.mark.anyio
async def test_waits_ended_early_are_swept_once_they_outnumber_the_parked_ones() -> None:
    # Turns that end while their followers wait (stopped, or cancelled) leave their
    # entries in the heap until each would have come due. Rounds of turns ending among
    # long waits must not grow it without bound, and the sweep must lose no live wait,
    # the one keeping the time included.
    timekeeper = _keeper.loop_timekeeper()
    began = anyio.current_time()
    woke: list[float] = []
    live, rounds, turns = 10, 20, 50

    async def long_wait(seconds: float) -> None:
        await wait_or_stop(TurnStop(), seconds)
        woke.append(anyio.current_time() - began)

    largest = 0
    with anyio.fail_after(600):  # virtual
        async with anyio.create_task_group() as outer:
            for n in range(live):
                outer.start_soon(long_wait, 100.0 + n)
            await anyio.lowlevel.checkpoint()
            for _ in range(rounds):
                stops = [TurnStop() for _ in range(turns)]
                async with anyio.create_task_group() as tg:
                    for stop in stops:
                        tg.start_soon(wait_or_stop, stop, 60.0)
                    await anyio.sleep(0.5)
                    for stop in stops[: turns // 2]:
                        stop.set()
                    tg.cancel_scope.cancel()
                largest = max(largest, len(timekeeper._heap))
            # A wait parked after the sweeps is served on time, by the same keeper.
            waited_from = anyio.current_time()
            await wait_or_stop(TurnStop(), 5.0)
            assert anyio.current_time() - waited_from == pytest.approx(5.0, abs=1e-6)
    assert woke == pytest.approx([100.0 + n for n in range(live)], abs=1e-6)
    # Unswept, the heap would hold every ended wait: live + rounds * turns = 1,010.
    assert largest <= 2 * live + _keeper._SWEEP_SLACK, largest


@pytest.mark.anyio
async def test_a_sweep_before_a_re_aimed_keeper_runs_keeps_the_sooner_wait() -> None:
    # A wait sooner than the keeper's aim cancels the keeper's sleep, and before the
    # keeper runs again, turns ending in the same step of the loop sweep the heap. The
    # sooner wait is live: it must stay, and wake at its deadline.
    began = anyio.current_time()
    woke: list[float] = []
    ending = 2 * _keeper._SWEEP_SLACK  # enough ended waits for a sweep

    async def wait(seconds: float) -> None:
        await wait_or_stop(TurnStop(), seconds)
        woke.append(anyio.current_time() - began)

    with anyio.fail_after(600):  # virtual: a wait lost fails, not hangs
        async with anyio.create_task_group() as outer:
            outer.start_soon(wait, 100.0)  # keeps the time, aimed at 100
            await anyio.lowlevel.checkpoint()
            stops = [TurnStop() for _ in range(ending)]
            async with anyio.create_task_group() as tg:
                for stop in stops:
                    tg.start_soon(wait_or_stop, stop, 200.0)
                await anyio.sleep(1.0)
                outer.start_soon(wait, 5.0)  # parks in the next step, re-aiming the keeper
                for stop in stops:  # their waits end, and sweep, in that step too
                    stop.set()
    assert woke == pytest.approx([6.0, 100.0], abs=1e-6)


@pytest.mark.anyio
@pytest.mark.parametrize("ends_it", ["cancel", "stop"])
@pytest.mark.parametrize("whose", ["keeper", "heir"])
async def test_the_time_is_kept_whichever_wait_keeping_it_ends_and_however(
    whose: str, ends_it: str
) -> None:
    # The first wait parked keeps the time. Ended early (its stop, or a cancel), it hands
    # its turn to another parked wait; that heir, ended in the same step of the loop,
    # before it runs, must hand it on again. Either way the others wake at their deadlines.
    began = anyio.current_time()
    woke: dict[str, float] = {}
    stops = {name: TurnStop() for name in ("first", "a", "b", "c")}
    scopes: dict[str, anyio.CancelScope] = {}
    timekeeper = _keeper.loop_timekeeper()

    heirs: list[str] = []

    async def wait(name: str, seconds: float) -> None:
        with anyio.CancelScope() as scopes[name]:
            await wait_or_stop(stops[name], seconds)
            woke[name] = anyio.current_time() - began
        if name == "first" and whose == "heir":
            # The first has handed its turn on as its wait ended: its heir has been
            # woken to keep the time, and has not run yet.
            heir = timekeeper._keeper
            heirs.extend(other for other, stop in stops.items() if stop._parked is heir)
            end(heirs[0])

    def end(name: str) -> None:
        if ends_it == "stop":
            stops[name].set()
        else:
            scopes[name].cancel()

    with anyio.fail_after(600):  # virtual: a time nobody keeps fails, not hangs
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, "first", 50.0)
            await anyio.lowlevel.checkpoint()
            for name, seconds in (("a", 2.0), ("b", 3.0), ("c", 4.0)):
                tg.start_soon(wait, name, seconds)
            await anyio.sleep(1.0)
            assert timekeeper._keeper is stops["first"]._parked
            end("first")
    expected = {name: seconds for name, seconds in (("a", 2.0), ("b", 3.0), ("c", 4.0))}
    ended = ["first", *heirs]
    assert len(ended) == (2 if whose == "heir" else 1)
    if ends_it == "stop":
        expected.update({name: 1.0 for name in ended})
    else:
        for name in ended:
            expected.pop(name, None)
    assert woke == pytest.approx(expected, abs=1e-6)
    # Nothing kept once none waits.
    assert timekeeper._keeper is None
    assert not timekeeper._heap


@pytest.mark.anyio
async def test_the_turn_to_keep_the_time_lasts_about_an_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Followers wait an interval apart. Handed to a wait with a late deadline, the turn
    # lasts about an interval, whatever the number of waits; handed to the soonest, it
    # would pass at nearly every wait, each time waking a task more.
    handed = 0
    hand_over = _keeper.Timekeeper._hand_over

    def counted(self: _keeper.Timekeeper) -> None:
        nonlocal handed
        handed += 1
        hand_over(self)

    monkeypatch.setattr(_keeper.Timekeeper, "_hand_over", counted)
    followers, intervals = 50, 10

    async def follower(first: float) -> None:
        stop = TurnStop()
        due = anyio.current_time() + first
        for _ in range(intervals):
            await wait_or_stop(stop, due - anyio.current_time())
            due += 1.0

    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for n in range(followers):
                tg.start_soon(follower, n / followers)
    assert handed <= 3 * intervals, f"{handed} hand-overs in {followers * intervals} waits"


@pytest.mark.anyio
async def test_a_wait_that_keeps_the_time_late_serves_what_is_due_at_once() -> None:
    # The first wait keeps the time; ended at 1 s, it hands its turn to the other, and
    # the loop is busy half a second before that one runs: it keeps the time past its
    # own deadline, and must end at once, not sleep a negative delay (anyio refuses it).
    began = anyio.current_time()
    woke: dict[str, float] = {}

    async def wait(name: str, seconds: float, busy_after: float) -> None:
        await wait_or_stop(TurnStop(), seconds)
        woke[name] = anyio.current_time() - began
        spend_loop_time(busy_after)  # a step that holds the loop, as a busy one does

    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, "first", 1.0, 0.5)
            await anyio.lowlevel.checkpoint()
            tg.start_soon(wait, "heir", 1.25, 0.0)
    assert woke == pytest.approx({"first": 1.0, "heir": 1.5}, abs=1e-6)


@contextlib.contextmanager
def fails_after_real_seconds(seconds: float) -> Iterator[None]:
    """Fail the block after ``seconds`` of real time: a loop spinning at one virtual instant.

    A virtual clock moves only when the loop would block, so its own deadlines never
    come to a loop that spins; a thread's timer cancels the block instead.
    """
    token = anyio.lowlevel.current_token()  # as the library's own threads call back (``_threads``)
    with anyio.CancelScope() as scope:
        timer = threading.Timer(
            seconds, anyio.from_thread.run_sync, (scope.cancel,), {"token": token}
        )
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
    if scope.cancelled_caught:
        pytest.fail(f"spun for {seconds} s of real time at one instant of the loop's clock")


@pytest.mark.anyio
async def test_deadlines_a_hair_past_a_step_of_the_clock_are_reached() -> None:
    # A follower's deadlines add up its interval: 0.1 + 0.1 + 0.1 is 0.30000000000000004,
    # and a loop's timer for it may ring while its clock reads 0.3 (looptime's clock moves
    # in steps of a microsecond). A keeper that then slept for the difference rang at
    # once, for ever, and the clock never moved on.
    stop = TurnStop()
    due = began = anyio.current_time()
    with fails_after_real_seconds(20):  # the virtual clock would never reach a bound
        for _ in range(10):
            due += 0.1
            await wait_or_stop(stop, due - anyio.current_time())
            assert anyio.current_time() >= due
    assert anyio.current_time() - began == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_run_has_a_timekeeper_of_its_own(backend: str) -> None:
    async def one_run() -> object:
        await wait_or_stop(TurnStop(), 1.0)
        return _keeper.loop_timekeeper()

    first = anyio.run(one_run, backend=backend, backend_options=virtual_clock(backend))
    second = anyio.run(one_run, backend=backend, backend_options=virtual_clock(backend))
    assert first is not second


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stop_that_waited_in_an_earlier_run_waits_on_this_runs_timekeeper(backend: str) -> None:
    stop = TurnStop()

    async def one_run() -> float:
        began = anyio.current_time()
        with anyio.fail_after(600):  # virtual: an earlier run's timekeeper would never wake it
            await wait_or_stop(stop, 1.0)
        return anyio.current_time() - began

    for _ in range(2):
        took = anyio.run(one_run, backend=backend, backend_options=virtual_clock(backend))
        assert took == pytest.approx(1.0, abs=1e-6)


def test_an_asyncio_task_beside_a_trio_guest_run_waits_on_asyncio_s_timekeeper() -> None:
    # trio's guest mode runs trio inside an asyncio loop: anyio calls the host's own
    # tasks asyncio's, and so must the timekeeper (trio says it is in a run there too).
    import asyncio

    import trio
    import trio.lowlevel

    started: asyncio.Queue[tuple[trio.lowlevel.TrioToken, trio.CancelScope]]

    async def guest() -> None:
        with trio.CancelScope() as scope:
            started.put_nowait((trio.lowlevel.current_trio_token(), scope))
            await trio.sleep_forever()

    async def host() -> float:
        nonlocal started
        started = asyncio.Queue()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[object] = loop.create_future()
        trio.lowlevel.start_guest_run(
            guest, run_sync_soon_threadsafe=loop.call_soon_threadsafe, done_callback=done.set_result
        )
        token, scope = await started.get()
        assert trio.lowlevel.in_trio_run()  # the case: trio says so in the host's task too
        began = loop.time()
        await wait_or_stop(TurnStop(), 0.05)
        took = loop.time() - began
        token.run_sync_soon(scope.cancel)
        await done
        return took

    took = asyncio.run(host())
    assert took >= 0.05


def test_a_turn_stop_is_an_anyio_event() -> None:
    # The followers and the block take it wherever an ``anyio.Event`` goes.
    stop = TurnStop()
    assert isinstance(stop, anyio.Event)
    assert not stop.is_set()
    assert stop.statistics().tasks_waiting == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_that_has_ended_leaves_no_loop_behind(backend: str) -> None:
    # anyio keys a loop's run variables weakly by the loop: a timekeeper that still held
    # its waits' events (bound to the loop) or its keeper's scope would keep every ended
    # run's loop alive.
    async def one_run() -> weakref.ref[object]:
        native = (
            anyio.lowlevel.current_token().native_token
        )  # what anyio keys the run's variables by
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(wait_or_stop, TurnStop(), 60.0)
            await wait_or_stop(TurnStop(), 1.0)  # the others are parked meanwhile
            tg.cancel_scope.cancel()
        return weakref.ref(native)

    ended = anyio.run(one_run, backend=backend, backend_options=virtual_clock(backend))
    gc.collect()
    assert ended() is None
