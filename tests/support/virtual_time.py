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


def spend_loop_time(seconds: float) -> None:
    """Move the virtual clock on by ``seconds`` at once, as a loop busy that long would see.

    For tests of a process over capacity: called in the middle of a task's step
    (an agent's handler), it stands for CPU that the step spends, during which no
    other task runs. trio's ``MockClock.jump``; looptime has no public way to do
    it, so its integer time (in units of its resolution) is moved directly.
    """
    if sniffio.current_async_library() == "trio":
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, trio.testing.MockClock)
        clock.jump(seconds)
        return
    loop = asyncio.get_running_loop()
    assert isinstance(loop, looptime.LoopTimeEventLoop)
    per_second = loop._LoopTimeEventLoop__resolution_reciprocal  # type: ignore[attr-defined]
    loop._LoopTimeEventLoop__now += round(seconds * per_second)  # type: ignore[attr-defined]
