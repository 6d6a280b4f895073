"""What a follower keeps between reads: few objects for the cyclic collector, and no cycle.

With thousands of followers in a process, every object a follower keeps is one
more that each full pass of CPython's cyclic collector walks (docs/benchmarks.md:
at 5,000 followers those passes were the worst loop blocks, at start-up and
after). So a follower waiting for its next read keeps a budget of tracked
objects, counted with ``gc.get_objects()`` per follower: the slope between 50
and 200 followers in one run, so that what the first follower sets up once (the
client, the caches) cancels out. And a read in steady state leaves nothing that
only the cyclic collector frees.

Followers poll an in-memory agent on a virtual clock; each page carries a few
events, dicts that hold a list, so that the collector tracks each (it does not track
a dict of strings and numbers) and a follower that kept its last page while it
waits shows it: nine objects more.
A whole open turn (``following_live_trajectory``: its block, task group,
heartbeat and sink around the follower) holds a budget of its own.
"""

from __future__ import annotations

import functools
import gc
import json
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from follower import MemoryStore, following_live_trajectory
from follower._http import _clients
from follower._http._agent_client import AgentClient
from follower.lowlevel import TrajectoryBatch, follow_trajectory

from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

ENDPOINT = "http://agent.test/ext/trajectory"
POLL = 1.0
# Tracked objects a waiting follower keeps: its task and coroutines, its lease,
# the wait's scope, timer and event wait, its record, policy and options. Measured
# by this test: 42 on asyncio, 40 to 41 on trio, on either client; before the
# follower was trimmed, 59 to 64 (the last page kept while waiting, a closure, the
# run of failures, generator-based leases, a scope for an absent bound). The rest
# is the backends' own (anyio's task handle, the timer's context). The budget
# leaves room for the backends' own changes, none for a page kept again.
OBJECTS_PER_FOLLOWER = 44
# Tracked objects an open turn keeps while its follower waits, the step's own task
# included: the follower's, and the block's (its task group, the heartbeats' schedule,
# the sink, the turn's record). Measured by this test on 3.11 to 3.13: 96 on asyncio, 96 to 98
# on trio, since the follower parks on its loop's timekeeper between reads
# (``_reading._keeper``); 99 to 100 on asyncio and 101 to 107 on trio (the loop's pool
# costs trio a few) while it waited in a cancel scope of its own; 129 to 136 while the
# heartbeats had a task of their own, waiting beside the follower; 133 to 140 while
# each way's entry kept a coroutine of its own around the shell's and a lone turn's
# step two sets for the turns it hands off or loses; 144 to 151 while the block kept
# two events of its own to be told its tasks had ended and a generator-based block to
# log its follower's failure, and every untraced follower a generator-based block for
# its span. The budget leaves room for the backends' own changes (three objects above
# the most measured), none for a task or a coroutine kept again.
OBJECTS_PER_TURN = 101
FEW, MANY = 50, 200
SAMPLES = 7


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


def agent(request: httpx.Request) -> httpx.Response:
    """Every task: three events a read, for ever; the task stays running.

    Each event holds a list: the collector tracks it, so a page kept shows in the counts.
    """
    asked = json.loads(request.content)
    after = asked["after"]
    events = [{"n": n, "text": "event", "parts": ["event"]} for n in range(after, after + 3)]
    return httpx.Response(
        200,
        json={
            "context_id": "c",
            "task_id": asked["task_id"],
            "state": "running",
            "format": "test/v1",
            "events": events,
            "next": after + len(events),
            "has_more": False,
        },
    )


async def sink(batch: TrajectoryBatch) -> None:
    await anyio.lowlevel.checkpoint()


@pytest.fixture(params=["given client", "default clients"])
def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> httpx.AsyncClient | None:
    """A caller's client, or None: the loop's pool, its clients on the in-memory agent."""
    if request.param == "given client":
        return httpx.AsyncClient(transport=httpx.MockTransport(agent))

    def in_memory_client(self: _clients.ClientPool, context: ssl.SSLContext) -> httpx.AsyncClient:
        return AgentClient(httpx.MockTransport(agent), follow_redirects=False)  # type: ignore[arg-type]

    monkeypatch.setattr(_clients.ClientPool, "_new_client", in_memory_client)
    # No SSL context loaded in a worker thread: the virtual clock would jump meanwhile.
    monkeypatch.setattr(_clients, "_ssl_context", ssl.create_default_context())
    return None


@pytest.fixture(autouse=True)
def only_the_tests_objects_walked() -> Iterator[None]:
    """What the session made before the test is frozen out of the collector's sight.

    Each count below collects first, and a collection walks every tracked object of the
    process: after a few thousand tests, most of them not this test's. Frozen
    (``gc.freeze()``), those are neither walked nor counted by ``gc.get_objects()``;
    the counts compared are differences between objects the test made, as before.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


async def fewest_tracked() -> int:
    """The fewest tracked objects seen at a few moments between reads.

    trio keeps a cancelled deadline in its heap (and, through it, its scope)
    until the heap is next compacted, so the count varies a little from one
    moment to the next; the fewest is what the followers themselves keep.
    """
    counts = []
    for _ in range(SAMPLES):
        await anyio.sleep(POLL * 1.01)  # virtual: the waits' timers are due
        counts.append(tracked())
    return min(counts)


@pytest.fixture
async def followers(client: httpx.AsyncClient | None) -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group to start followers in, cancelled at the end."""
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.sleep_forever)  # keeps the group's own objects steady
        yield tg
        stop.set()
        tg.cancel_scope.cancel()
    if client is not None:
        await client.aclose()


def start(tg: anyio.abc.TaskGroup, client: httpx.AsyncClient | None, first: int, last: int) -> None:
    stop = anyio.Event()
    for n in range(first, last):
        follow = functools.partial(
            follow_trajectory,
            ENDPOINT,
            f"task-{n}",
            sink,
            poll_interval_seconds=POLL,
            stop=stop,
            client=client,
        )
        tg.start_soon(follow, name=f"follower {n}")


async def test_a_waiting_follower_keeps_few_tracked_objects(
    followers: anyio.abc.TaskGroup, client: httpx.AsyncClient | None
) -> None:
    with anyio.fail_after(600):
        start(followers, client, 0, FEW)
        await anyio.sleep(2 * POLL)  # virtual: each has read and waits (it reads every POLL)
        few = await fewest_tracked()
        start(followers, client, FEW, MANY)
        await anyio.sleep(2 * POLL)
        many = await fewest_tracked()
    per_follower = (many - few) / (MANY - FEW)
    assert per_follower <= OBJECTS_PER_FOLLOWER, (
        f"a waiting follower keeps {per_follower:.1f} tracked objects "
        f"(budget {OBJECTS_PER_FOLLOWER})"
    )


@contextmanager
def saving_garbage() -> Iterator[list[object]]:
    """What the cyclic collector would free, kept instead (it does not run meanwhile)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def test_reads_in_steady_state_leave_no_cycle(
    followers: anyio.abc.TaskGroup, client: httpx.AsyncClient | None
) -> None:
    with anyio.fail_after(600):
        start(followers, client, 0, 20)
        await anyio.sleep(2.5 * POLL)  # past the first reads and the start-up
        with saving_garbage() as garbage:
            await anyio.sleep(10 * POLL)  # 200 reads, each handing a page to the sink
            gc.collect()
            left = Counter(type(o).__name__ for o in garbage)
    assert not left, f"steady-state reads left objects only the cyclic collector frees: {left}"


def start_turns(
    tg: anyio.abc.TaskGroup,
    store: MemoryStore,
    client: httpx.AsyncClient | None,
    first: int,
    last: int,
) -> None:
    """Steps ``first`` to ``last``, each a turn following its task until cancelled."""

    async def step(n: int) -> None:
        async with following_live_trajectory(
            ENDPOINT, store, "steps/", f"turn-{n}", poll_interval_seconds=POLL, client=client
        ) as turn:
            turn.follow(f"task-{n}")
            await anyio.sleep_forever()

    for n in range(first, last):
        tg.start_soon(step, n, name=f"step {n}")


async def test_an_open_turn_keeps_few_tracked_objects(
    followers: anyio.abc.TaskGroup, client: httpx.AsyncClient | None
) -> None:
    store = MemoryStore()  # keys and bytes: nothing the collector tracks grows with pages
    with anyio.fail_after(600):
        start_turns(followers, store, client, 0, FEW)
        await anyio.sleep(2 * POLL)  # virtual: each has stored its marks and pages, and waits
        few = await fewest_tracked()
        start_turns(followers, store, client, FEW, MANY)
        await anyio.sleep(2 * POLL)
        many = await fewest_tracked()
    per_turn = (many - few) / (MANY - FEW)
    assert per_turn <= OBJECTS_PER_TURN, (
        f"an open turn keeps {per_turn:.1f} tracked objects (budget {OBJECTS_PER_TURN})"
    )
