"""Every fault mode of the reference agent, against a follower and against a whole turn.

Each fault starts once the step is under way (after the agent's first read). For
each, the step must end within its bounds, what was stored must be a contiguous
prefix of the agent's events, and the turn must be marked ended. In-process, on
virtual time: a fault that hangs costs no real time.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from follower import (
    FollowerError,
    MemoryStore,
    TrajectoryState,
    connect_agent,
    following_live_trajectory,
    run_a2a_turn,
)
from follower._a2a._client import CANCEL_TASK_SECONDS
from follower._http._exchange import POOL_WAIT_SECONDS
from follower._turns._endings import CLEANUP_SECONDS
from follower._turns._step import LiveTurns
from follower.testing import Fault, ReferenceAgent, TaskScript

from ..support.stored import stored_turn
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

BASE = "http://agent.test/"
PREFIX = "steps/s1/"
SCRIPT = TaskScript(events=30, interval_seconds=0.5)
POLL = 0.5
DRAIN = 5.0
READ_TIMEOUT = 10.0
TASK_DEADLINE = 60.0

FAULTS = {
    "close": Fault.close(),
    "silent": Fault.silent(),
    # Two 503s, then healthy: the follower's backoff outlasts them before stop.
    "unavailable": Fault.unavailable(reads=2),
    "unavailable-for-good": Fault.unavailable(),
    "not-json": Fault.not_json(),
    "not-an-object": Fault.not_an_object(),
    "missing-field": Fault.missing_field(),
    "unknown-state": Fault.unknown_state(),
    "cursor-mismatch": Fault.cursor_mismatch(),
    "other-task": Fault.other_task(),
    "no-progress": Fault.no_progress(),
    "oversized": Fault.oversized(size_bytes=200_000),
    "gone": Fault.gone(after_events=12),
    "restart": Fault.restart(),
    "slow": Fault.slow(seconds=3.0),
}
# oversized is a valid page padded past the cap the follower is given.
MAX_PAGE_BYTES = 100_000
# How every follower here reads and drains, the turn's own or the whole turn's.
FOLLOWING: dict[str, Any] = {
    "poll_interval_seconds": POLL,
    "drain_seconds": DRAIN,
    "read_timeout_seconds": READ_TIMEOUT,
    "max_page_bytes": MAX_PAGE_BYTES,
}


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


async def inject(agent: ReferenceAgent, fault: Fault) -> None:
    await agent.wait_reads(1)
    agent.fault = fault


async def assert_stored_prefix_and_marked(store: MemoryStore, turn: str = "turn-1") -> int:
    """The turn's chunks hold events 0..N-1 of the script, contiguous; end.json says N."""
    stored = await stored_turn(store, PREFIX, turn)
    events = stored.events
    assert events == [SCRIPT.event(i) for i in range(len(events))]
    assert stored.end is not None
    assert stored.end["next"] == len(events)
    assert stored.end["state"] in {s.value for s in TrajectoryState if s.is_terminal}
    return len(events)


@pytest.mark.parametrize("name", FAULTS)
async def test_follower_under_fault(name: str) -> None:
    agent, store = ReferenceAgent(script=SCRIPT), MemoryStore()
    # The step itself does not talk to the agent: it waits the task's time, then returns.
    bound = SCRIPT.duration_seconds + DRAIN + CLEANUP_SECONDS
    with anyio.fail_after(bound + 1):
        async with agent.client() as client, anyio.create_task_group() as tg:
            tg.start_soon(inject, agent, FAULTS[name])
            start = anyio.current_time()
            task_id = await _send(client)
            async with following_live_trajectory(
                BASE + "ext/trajectory",
                store,
                PREFIX,
                "turn-1",
                client=client,
                **FOLLOWING,
            ) as turn:
                turn.follow(task_id)
                await anyio.sleep(SCRIPT.duration_seconds)
                turn.ended("completed")
            assert anyio.current_time() - start <= bound
            tg.cancel_scope.cancel()
    await assert_stored_prefix_and_marked(store)


@pytest.mark.parametrize("name", FAULTS)
async def test_whole_turn_under_fault(name: str) -> None:
    agent, store = ReferenceAgent(script=SCRIPT), MemoryStore()
    # Waiting for the task is bounded by its deadline (each tasks/get by its own
    # timeout); then the agent is asked to cancel, the follower drains, cleanup runs.
    bound = (
        TASK_DEADLINE
        + READ_TIMEOUT
        + POOL_WAIT_SECONDS
        + CANCEL_TASK_SECONDS
        + DRAIN
        + 2 * CLEANUP_SECONDS
    )
    outcome: Any = None
    with anyio.fail_after(bound + 1):
        async with agent.client() as client, anyio.create_task_group() as tg:
            tg.start_soon(inject, agent, FAULTS[name])
            start = anyio.current_time()
            try:
                async with connect_agent(BASE, client=client, timeout_seconds=READ_TIMEOUT) as a2a:
                    assert a2a.trajectory_endpoint is not None
                    async with LiveTurns(
                        a2a.trajectory_endpoint,
                        store,
                        PREFIX,
                        client=client,
                        **FOLLOWING,
                    ) as turns:
                        outcome = await run_a2a_turn(
                            a2a,
                            turns,
                            "turn-1",
                            "go",
                            task_deadline_seconds=TASK_DEADLINE,
                            task_poll_seconds=POLL,
                        )
            except FollowerError as exc:  # the turn may fail: the agent misbehaves
                outcome = exc
            assert anyio.current_time() - start <= bound
            tg.cancel_scope.cancel()
    assert outcome is not None
    stored = await assert_stored_prefix_and_marked(store)
    assert json.loads(await store.get(f"{PREFIX}turn-1/live/next.json")) == {"turn": None}
    if name in ("unavailable", "slow"):
        # Faults the agent recovers from, or only slow: the turn completes in full.
        assert outcome.state == "completed"
        assert stored == SCRIPT.events


async def _send(client: Any) -> str:
    answer = await client.post(
        BASE,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": {
                    "role": "user",
                    "parts": [{"kind": "text", "text": "go"}],
                    "messageId": "m1",
                    "kind": "message",
                }
            },
        },
    )
    task_id: str = answer.json()["result"]["id"]
    return task_id
