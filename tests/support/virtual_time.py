"""Backends on virtual time, for timing tests with in-memory fakes only.

Both clocks jump ahead whenever every task is blocked, so a 60 s backoff takes
no real time. Never use them with real sockets or worker threads: the clock
jumps while those are busy and times out what is merely slow.
"""

from __future__ import annotations

import asyncio
from typing import Any

import looptime
import pytest
import sniffio
import trio.lowlevel
import trio.testing


def virtual_clock(backend: str) -> dict[str, Any]:
    """``backend_options`` for ``anyio.run`` on ``backend`` with a fresh virtual clock."""
    if backend == "trio":
        return {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return {"loop_factory": looptime.new_event_loop}


def virtual_time_backends() -> list[Any]:
    """Params for an ``anyio_backend`` fixture: asyncio (looptime) and trio (MockClock)."""
    return [
        pytest.param(("asyncio", virtual_clock("asyncio")), id="asyncio-virtual"),
        pytest.param(("trio", virtual_clock("trio")), id="trio-virtual"),
    ]


_spent_seconds = 0.0


def spent_loop_seconds() -> float:
    """The loop time :func:`spend_loop_time` has spent in this process: a virtual CPU clock.

    The process's real CPU clock would say a loop on virtual time is idle however
    much of it the fakes spend, and a rule that asks whether the CPU is busy
    (``follower._reading._admission``) would then see an overloaded loop as idle.
    """
    return _spent_seconds


def spend_loop_time(seconds: float) -> None:
    """Move the virtual clock on by ``seconds`` at once, as a loop busy that long would see.

    For tests of a process over capacity: called in the middle of a task's step
    (an agent's handler), it stands for CPU that the step spends, during which no
    other task runs, and :func:`spent_loop_seconds` counts it. trio's
    ``MockClock.jump``; looptime has no public way to do it, so its integer time
    (in units of its resolution) is moved directly.
    """
    global _spent_seconds  # one clock for the process, as the CPU's is
    _spent_seconds += seconds
    if sniffio.current_async_library() == "trio":
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, trio.testing.MockClock)
        clock.jump(seconds)
        return
    loop = asyncio.get_running_loop()
    assert isinstance(loop, looptime.LoopTimeEventLoop)
    per_second = loop._LoopTimeEventLoop__resolution_reciprocal  # type: ignore[attr-defined]
    loop._LoopTimeEventLoop__now += round(seconds * per_second)  # type: ignore[attr-defined]
