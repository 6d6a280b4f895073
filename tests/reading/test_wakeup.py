"""The wake-up a parked follower waits on (``follower._reading._wakeup``), on each backend.

A future on asyncio, the task itself on trio: set once, by another task or before its
wait began; a wait cancelled by its scope is the backend's cancel, and a set after it
does nothing (on trio, it must not reschedule a task that no longer waits).
"""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from follower._reading._wakeup import wakeup_factory

pytestmark = pytest.mark.anyio


async def test_a_wakeup_set_by_another_task_ends_the_wait() -> None:
    wakeup = wakeup_factory()()
    woken = anyio.Event()

    async def waiter() -> None:
        await wakeup
        woken.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert not woken.is_set()  # it waits until set
            wakeup.set()
            await woken.wait()


async def test_a_wakeup_set_before_its_wait_ends_it_at_once() -> None:
    wakeup = wakeup_factory()()
    wakeup.set()
    wakeup.set()  # a second set changes nothing
    with anyio.fail_after(10):
        await wakeup


async def test_a_cancelled_wait_leaves_a_later_set_with_nothing_to_wake() -> None:
    make = wakeup_factory()
    wakeup = make()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            scopes: list[anyio.CancelScope] = []

            async def waiter() -> None:
                with anyio.CancelScope() as scope:
                    scopes.append(scope)
                    await wakeup
                assert scope.cancelled_caught

            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            scopes[0].cancel()
        # The waiter has left its wait: a set now must neither fail nor wake anything,
        # and the task goes on with other waits.
        wakeup.set()
        await anyio.lowlevel.checkpoint()
        again = make()
        again.set()
        await again
