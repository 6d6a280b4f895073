"""The cancel that Python 3.11's ``asyncio.wait_for`` loses, and why ``follower`` cannot.

The old follower waited between reads in ``asyncio.wait_for(stop.wait(), ...)``.
When the step set ``stop`` and cancelled the follower in the same tick (or one or
two ticks apart), ``wait_for`` on 3.11 saw its inner wait done and returned
normally, dropping the cancel: the follower went on reading forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

import anyio
import pytest

from follower import TrajectoryState
from follower.lowlevel import follow_trajectory

from ..support.agents import ENDPOINT, RecordingSink, ScriptedAgent
from ..support.virtual_time import virtual_time_backends

LOSES_CANCELS = sys.version_info < (3, 12)
GAPS = [0, 1, 2]  # loop ticks between setting stop and cancelling


async def old_follower(stop: asyncio.Event, reads: list[int], halt: list[bool]) -> None:
    """The pattern that leaked: a poll wait in wait_for, then read again.

    ``halt`` is the test's own way out: a lost cancel may be lost again.
    """
    while not halt:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=2.0)
        reads.append(len(reads))  # stands for a read of the agent
        await asyncio.sleep(0)


async def race_old_follower(gap: int) -> tuple[bool, int]:
    """Set stop and cancel ``gap`` ticks apart; return (cancel lost, reads after cancel)."""
    stop = asyncio.Event()
    reads: list[int] = []
    halt: list[bool] = []
    task = asyncio.get_running_loop().create_task(old_follower(stop, reads, halt))
    await asyncio.sleep(0)  # the follower is now in its poll wait
    stop.set()
    for _ in range(gap):
        await asyncio.sleep(0)
    task.cancel()
    reads_at_cancel = len(reads)
    for _ in range(20):  # ample ticks for a delivered cancel to end the task
        await asyncio.sleep(0)
    lost = not task.done()
    reads_after = len(reads) - reads_at_cancel
    halt.append(True)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return lost, reads_after


@pytest.mark.parametrize("gap", GAPS)
def test_old_pattern_loses_the_cancel_on_python_311_only(gap: int) -> None:
    # asyncio only: the bug lives in asyncio.wait_for, which trio does not have.
    lost, reads_after = asyncio.run(race_old_follower(gap))
    assert lost == LOSES_CANCELS
    if lost:
        assert reads_after > 0  # and the follower kept reading a gone agent


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.anyio
@pytest.mark.parametrize("gap", GAPS)
async def test_follower_never_loses_the_same_race(gap: int) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "e")
    agent.finish("t1", TrajectoryState.RUNNING)  # still running: the follower polls
    stop = anyio.Event()
    with anyio.fail_after(100):
        async with agent.client() as client, anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def follower() -> None:
                with scope:
                    await follow_trajectory(
                        ENDPOINT,
                        "t1",
                        RecordingSink(),
                        poll_interval_seconds=2.0,
                        stop=stop,
                        client=client,
                    )

            tg.start_soon(follower)
            await agent.wait_reads(1)
            await anyio.wait_all_tasks_blocked()  # the follower is in its poll wait
            stop.set()
            for _ in range(gap):
                await anyio.lowlevel.checkpoint()
            scope.cancel()
            reads_at_cancel = len(agent.reads)
        # The task group has exited: the follower is gone, and it was cancelled,
        # not ended by a read after stop.
        assert scope.cancelled_caught
        assert len(agent.reads) == reads_at_cancel
