"""The production incident, replayed against real loopback sockets.

An agent that closes every connection (or never answers) while a follower
polls it; the step's body is cancelled, raises, or returns. The old follower
never ended in the first two cases and waited out the drain in the third.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from follower import MemoryStore, following_live_trajectory

from ..support.agents import bad_server

pytestmark = pytest.mark.anyio

POLL = 0.05
PREFIX = "steps/s1/"


class ReadCounter:
    """Counts reads the follower starts, on the client side."""

    def __init__(self) -> None:
        self.started = 0

    async def __call__(self, request: httpx.Request) -> None:
        self.started += 1

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(event_hooks={"request": [self]}, **kwargs)


async def end_mark(store: MemoryStore, turn: str = "turn-1") -> dict[str, Any]:
    mark: dict[str, Any] = json.loads(await store.get(f"{PREFIX}{turn}/live/end.json"))
    return mark


async def run_step(
    url: str,
    store: MemoryStore,
    counter: ReadCounter,
    wait_for_reads: Callable[[], Any],
    ending: str,
    *,
    drain_seconds: float = 30.0,
    read_timeout_seconds: float = 30.0,
) -> tuple[int, float]:
    """Run a one-turn step that ends as ``ending``; return reads after the body and exit delay."""
    reads_at_end = -1
    body_ended_at = 0.0
    async with counter.client() as client:
        with anyio.CancelScope() as outer:
            async with following_live_trajectory(
                url,
                store,
                PREFIX,
                "turn-1",
                poll_interval_seconds=POLL,
                drain_seconds=drain_seconds,
                read_timeout_seconds=read_timeout_seconds,
                client=client,
            ) as turn:
                turn.follow("task-1")
                try:
                    await wait_for_reads()
                    if ending == "cancelled":
                        outer.cancel()
                        await anyio.sleep_forever()
                    if ending == "raises":
                        raise RuntimeError("the step failed")
                    turn.ended("completed")
                finally:
                    reads_at_end = counter.started
                    body_ended_at = anyio.current_time()
        assert outer.cancelled_caught == (ending == "cancelled")
    return counter.started - reads_at_end, anyio.current_time() - body_ended_at


@pytest.mark.parametrize("ending", ["cancelled", "raises", "returns"])
async def test_agent_that_closes_every_connection(ending: str) -> None:
    store = MemoryStore()
    counter = ReadCounter()
    with anyio.fail_after(20):
        async with bad_server("closing") as server:
            if ending == "raises":
                with pytest.raises(RuntimeError, match="the step failed"):
                    await run_step(
                        server.url, store, counter, lambda: server.wait_accepted(1), ending
                    )
                reads_after = counter.started - server.accepted  # every read reached the server
                assert reads_after <= 0
            else:
                reads_after, exit_delay = await run_step(
                    server.url, store, counter, lambda: server.wait_accepted(1), ending
                )
                if ending == "cancelled":
                    assert reads_after == 0
                else:
                    # At most one read after stop, then out at once, not at the drain deadline.
                    assert reads_after <= 1
                    assert exit_delay < 5.0
    expected = {"cancelled": "canceled", "raises": "failed", "returns": "completed"}[ending]
    assert await end_mark(store) == {"state": expected, "next": 0, "complete": False}


async def test_raise_comes_out_as_itself_not_a_group() -> None:
    store = MemoryStore()
    counter = ReadCounter()
    error = RuntimeError("mine")
    with anyio.fail_after(20):
        async with bad_server("closing") as server:
            with pytest.raises(RuntimeError) as caught:
                async with (
                    counter.client() as client,
                    following_live_trajectory(
                        server.url,
                        store,
                        PREFIX,
                        "turn-1",
                        poll_interval_seconds=POLL,
                        client=client,
                    ) as turn,
                ):
                    turn.follow("task-1")
                    await server.wait_accepted(1)
                    reads_at_raise = counter.started
                    raise error
    assert caught.value is error
    assert not isinstance(caught.value, BaseExceptionGroup)
    assert counter.started == reads_at_raise
    assert await end_mark(store) == {"state": "failed", "next": 0, "complete": False}


@pytest.mark.parametrize("ending", ["cancelled", "raises", "returns"])
async def test_agent_that_never_answers(ending: str) -> None:
    store = MemoryStore()
    counter = ReadCounter()
    drain = 1.0
    with anyio.fail_after(20):
        async with bad_server("silent") as server:
            start = anyio.current_time()
            step = functools.partial(
                run_step,
                server.url,
                store,
                counter,
                lambda: server.wait_accepted(1),
                ending,
                drain_seconds=drain,
            )
            if ending == "raises":
                with pytest.raises(RuntimeError):
                    await step()
            else:
                _, exit_delay = await step()
                if ending == "cancelled":
                    assert exit_delay < drain
                else:
                    assert exit_delay < drain + 2.0
            assert anyio.current_time() - start < 10.0
    expected = {"cancelled": "canceled", "raises": "failed", "returns": "completed"}[ending]
    assert await end_mark(store) == {"state": expected, "next": 0, "complete": False}
