"""Backends on virtual time, for timing tests with in-memory fakes only.

Both clocks jump ahead whenever every task is blocked, so a 60 s backoff takes
no real time. Never use them with real sockets or worker threads: the clock
jumps while those are busy and times out what is merely slow.
"""

from __future__ import annotations

from typing import Any

import looptime
import pytest
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
