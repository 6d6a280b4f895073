"""The read path asks anyio which library runs the loop once, not at every call.

Each of anyio's functions (``anyio.current_time()``, ``anyio.CancelScope()``,
``anyio.Event()``...) looks the running loop's backend up first: a turn's steady read made
fourteen such lookups. The loop's timekeeper, a follower and a connection hold the
backend instead (``follower._backend``), so a steady read of a turn over a real
loopback connection makes at most two lookups: the exchange's bound, and the wait's
last checkpoint (anyio's own, which ``test_timekeeper`` takes away to show it is needed).
Counted with a profile hook on anyio's lookup, attributed to the library when the
first caller outside anyio is the library's code (not its testing agent's). Reads are
counted by the agent, so that nothing of the library is asked while counting.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from anyio._core import _eventloop

import follower
from follower import following_live_trajectory
from follower._backend import running_backend

from ..http.test_transport import Request, answer, serving
from ..support.null_store import NullStore

pytestmark = pytest.mark.anyio

LIBRARY = str(Path(follower.__file__).parent)
TESTING = str(Path(follower.__file__).parent / "testing")
ANYIO = str(Path(anyio.__file__).parent)
# Per read: the exchange's bound (``_http._exchange.exchange``) and the wait's last
# checkpoint (``TurnStop.wait_or_set``). Before the backend was held: 14.
LOOKUPS_PER_READ = 2
# Once a turn: its stop's first wait finds the loop's timekeeper (a loop variable, made
# by the loop's first wait: two lookups, and one to take the backend).
FIRST_WAIT = 3
READS = 30


class OneEventARead:
    """The agent: one event a read, for ever; counts the reads it answers."""

    def __init__(self) -> None:
        self.reads = 0
        self._wanted = 0
        self._reached = anyio.Event()

    async def __call__(self, stream: anyio.abc.ByteStream, request: Request) -> bool:
        after = json.loads(request.body)["after"]
        body = {
            "context_id": "ctx",
            "task_id": "t1",
            "state": "running",
            "format": None,
            "events": [{"n": after}],
            "next": after + 1,
            "has_more": False,
        }
        self.reads += 1
        if self.reads >= self._wanted:
            self._reached.set()
        await stream.send(answer(json.dumps(body).encode()))
        return True

    async def reads_after(self, reads: int) -> int:
        """Wait until ``reads`` reads were asked; the reads asked by then."""
        self._wanted, self._reached = reads, anyio.Event()
        if self.reads < reads:
            await self._reached.wait()
        return self.reads


class Lookups:
    """Lookups of anyio's backend made by the library's code, while counting."""

    def __init__(self) -> None:
        self.count = 0
        self._lookup = _eventloop.get_async_backend.__code__

    def _hook(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code is not self._lookup:
            return
        caller = frame.f_back
        while caller is not None and caller.f_code.co_filename.startswith(ANYIO):
            caller = caller.f_back  # anyio's function, maybe its backend's
        if caller is not None:
            where = caller.f_code.co_filename
            if where.startswith(LIBRARY) and not where.startswith(TESTING):
                self.count += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        was = sys.getprofile()
        sys.setprofile(self._hook)
        try:
            yield
        finally:
            sys.setprofile(was)


async def test_a_turns_steady_reads_look_the_backend_up_at_most_twice_each() -> None:
    lookups, agent = Lookups(), OneEventARead()
    with anyio.fail_after(30):
        async with (
            serving(agent) as (url, _),
            following_live_trajectory(
                url,
                NullStore(),
                "steps/s1/",
                "turn-1",
                poll_interval_seconds=0.002,
                drain_seconds=0.01,  # the task never ends: the drain does
                # No beat falls due while counting, however slow the machine: a beat's
                # put is a store's call, not a read's.
                writer_heartbeat_seconds=3600,
            ) as live,
        ):
            live.follow("t1")
            before = await agent.reads_after(3)  # its connection open, its turn begun
            with lookups.counting():
                after = await agent.reads_after(before + READS)
    reads = after - before
    assert reads >= READS
    # The last read may have looked up for its bound and its wait before the agent
    # counted it; and on a loaded machine the first reads may overrun the poll and never
    # wait, so the turn's first wait (the loop's timekeeper made and found) is counted.
    most = LOOKUPS_PER_READ * (reads + 1) + FIRST_WAIT
    assert lookups.count <= most, (lookups.count, reads)
    assert lookups.count >= reads - 1, (lookups.count, reads)  # each bound's is counted


async def test_the_held_backend_is_anyios_own() -> None:
    backend = running_backend()
    assert backend is anyio.lowlevel.current_token().backend_class
    # The same clock anyio reads.
    first = anyio.current_time()
    held = backend.current_time()
    assert first <= held <= anyio.current_time()
    # The same objects anyio's functions make.
    assert isinstance(backend.create_event(), anyio.Event)
    scope = backend.create_cancel_scope(deadline=held + 5)
    assert isinstance(scope, anyio.CancelScope)
    assert scope.deadline == held + 5
    with backend.create_cancel_scope(deadline=-1) as past:  # a deadline passed cancels
        await backend.checkpoint_if_cancelled()
    assert past.cancelled_caught


def test_outside_a_loop_there_is_no_backend() -> None:
    with pytest.raises(RuntimeError):
        running_backend()
