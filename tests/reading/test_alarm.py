"""The loop's alarm: a turn's follower waits on one timer a loop, and its stop ends the wait.

A parked wait ends at its deadline, when its turn's stop is set, or by a cancel,
whichever comes first, and a cancel that arrives with the stop (in the same turn of
the loop, before the waiting task runs again) goes first: a follower told to stop
and cancelled at once must not read again. All on virtual time, so that "when" is
exact and no test depends on how busy the machine is.
"""

from __future__ import annotations

import gc
import math
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from follower._reading import _alarm
from follower._reading._alarm import TurnStop
from follower._reading._shell import wait_or_stop

from ..support.hypothesis_profiles import property_settings, share_seed
from ..support.virtual_time import virtual_clock, virtual_time_backends

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


@attrs.frozen
class Wait:
    deadline: float  # seconds after the start
    stop_at: float | None  # when its turn's stop is set
    cancel_at: float | None  # when its task is cancelled
    cancel_first: bool  # at a tie, the cancel is made before the stop is set
    second_waiter: bool  # another task waits on the same stop beside it

    def expected(self) -> set[tuple[str, float]]:
        """How the wait may end, and when: the first of its deadline, its stop, its cancel."""
        stop = math.inf if self.stop_at is None else self.stop_at
        cancel = math.inf if self.cancel_at is None else self.cancel_at
        first = min(self.deadline, stop, cancel)
        if cancel == first and stop == first:
            return {("cancelled", first)}  # a cancel with the stop goes first
        if cancel == first and self.deadline == first:
            return {("cancelled", first), ("woke", first)}  # the loop's order of two timers
        if cancel == first:
            return {("cancelled", first)}
        return {("woke", first)}


def quarters() -> st.SearchStrategy[float]:
    return st.integers(min_value=1, max_value=12).map(lambda n: n * 2 * EIGHTH)


waits = st.builds(
    Wait,
    deadline=st.integers(min_value=1, max_value=25).map(lambda n: n * EIGHTH),
    stop_at=st.none() | quarters(),
    cancel_at=st.none() | quarters(),
    cancel_first=st.booleans(),
    second_waiter=st.booleans(),
)


async def run_plan(plan: list[Wait]) -> list[tuple[str, float]]:
    """Each wait's end, ``(how, seconds after the start)``, the second waiters' after."""
    began = anyio.current_time()
    ends: dict[int, tuple[str, float]] = {}
    stops = [TurnStop() for _ in plan]
    scopes: dict[int, anyio.CancelScope] = {}

    async def waiter(key: int, stop: TurnStop, seconds: float) -> None:
        with anyio.CancelScope() as scope:
            scopes[key] = scope
            await wait_or_stop(stop, seconds)
            ends[key] = ("woke", anyio.current_time() - began)
        if scope.cancelled_caught:
            ends[key] = ("cancelled", anyio.current_time() - began)

    with anyio.fail_after(600):  # virtual: a wait the alarm lost fails, not hangs
        await run_waits(plan, stops, waiter, scopes, began)
    return [ends[n] for n in range(len(plan))] + [
        ends[len(plan) + n] for n, wait in enumerate(plan) if wait.second_waiter
    ]


async def run_waits(
    plan: list[Wait],
    stops: list[TurnStop],
    waiter: Callable[[int, TurnStop, float], Awaitable[None]],
    scopes: dict[int, anyio.CancelScope],
    began: float,
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
            tg.start_soon(waiter, n, stops[n], wait.deadline)
            if wait.second_waiter:
                tg.start_soon(waiter, len(plan) + n, stops[n], wait.deadline)
        for at in sorted(moments):
            await anyio.sleep_until(began + at)
            for order, n in sorted(moments[at]):
                if order == 1:
                    stops[n].set()
                else:
                    scopes[n].cancel()
                    if plan[n].second_waiter:
                        scopes[len(plan) + n].cancel()


def check_plan(backend: str, plan: list[Wait]) -> None:
    ends = anyio.run(run_plan, plan, backend=backend, backend_options=virtual_clock(backend))
    expected = [wait.expected() for wait in plan]
    expected += [wait.expected() for wait in plan if wait.second_waiter]
    assert len(ends) == len(expected)
    for (how, at), allowed in zip(ends, expected, strict=True):
        assert any(how == how_ and abs(at - at_) < 1e-6 for how_, at_ in allowed), (
            backend,
            plan,
            ends,
        )


@pytest.mark.parametrize("backend", BACKENDS)
@property_settings(400, shared=True)
@share_seed
@given(plan=st.lists(waits, min_size=1, max_size=8))
def test_each_wait_ends_at_its_deadline_its_stop_or_its_cancel_whichever_is_first(
    backend: str, plan: list[Wait]
) -> None:
    check_plan(backend, plan)


# A stop and a cancel in one step of the loop, the stop first: the waiting task is
# woken, and the cancel comes before it runs again.
STOPPED_AND_CANCELLED = [
    Wait(deadline=9 * EIGHTH, stop_at=0.5, cancel_at=0.5, cancel_first=False, second_waiter=False)
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_plans_catch_a_wait_that_lets_a_stop_beat_the_cancel_with_it(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_plan(backend, STOPPED_AND_CANCELLED)
    # The wait without its last checkpoint: a woken wait returns though cancelled.
    monkeypatch.setattr(_alarm.anyio.lowlevel, "checkpoint_if_cancelled", _no_checkpoint)
    with pytest.raises(AssertionError):
        check_plan(backend, STOPPED_AND_CANCELLED)


async def _no_checkpoint() -> None:
    return None


# --- the alarm's own cases ------------------------------------------------------------


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
        await anyio.lowlevel.checkpoint()  # parked, the loop's timer set for 10 s
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
        await wait_or_stop(stop, 60.0)  # the first parks on the alarm
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
async def test_waits_cancelled_before_their_deadlines_leave_the_alarm_serving() -> None:
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_run_has_an_alarm_of_its_own(backend: str) -> None:
    async def one_run() -> object:
        await wait_or_stop(TurnStop(), 1.0)
        return _alarm.loop_alarm()

    first = anyio.run(one_run, backend=backend, backend_options=virtual_clock(backend))
    second = anyio.run(one_run, backend=backend, backend_options=virtual_clock(backend))
    assert first is not second


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stop_that_waited_in_an_earlier_run_waits_on_this_runs_alarm(backend: str) -> None:
    stop = TurnStop()

    async def one_run() -> float:
        began = anyio.current_time()
        with anyio.fail_after(600):  # virtual: an earlier run's alarm would never wake it
            await wait_or_stop(stop, 1.0)
        return anyio.current_time() - began

    for _ in range(2):
        took = anyio.run(one_run, backend=backend, backend_options=virtual_clock(backend))
        assert took == pytest.approx(1.0, abs=1e-6)


def test_an_asyncio_task_beside_a_trio_guest_run_waits_on_asyncio_s_alarm() -> None:
    # trio's guest mode runs trio inside an asyncio loop: anyio calls the host's own
    # tasks asyncio's, and so must the alarm (trio says it is in a run there too).
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
    # anyio keys a loop's run variables weakly by the loop: an alarm that still held
    # its waits' futures (or tasks) and timer would keep every ended run's loop alive.
    async def one_run() -> weakref.ref[object]:
        native = _native_token(backend)  # what anyio keys the run's variables by
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(wait_or_stop, TurnStop(), 60.0)
            await wait_or_stop(TurnStop(), 1.0)  # the others are parked meanwhile
            tg.cancel_scope.cancel()
        return weakref.ref(native)

    ended = anyio.run(one_run, backend=backend, backend_options=virtual_clock(backend))
    gc.collect()
    assert ended() is None


def _native_token(backend: str) -> object:
    if backend == "trio":
        import trio.lowlevel

        return trio.lowlevel.current_trio_token()
    import asyncio

    return asyncio.get_running_loop()
