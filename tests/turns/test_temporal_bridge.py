"""The cancel bridge without Temporal: native asyncio cancels against a step's cleanup.

asyncio only: the bridge exists because a native ``task.cancel()`` (Temporal's
activity cancel, an ``asyncio.timeout``) passes anyio's shields; trio has no
such cancel. Also the progress view the heartbeats carry (both backends).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import anyio
import pytest

from follower import LiveTurns, MemoryStore, TurnProgress
from follower.temporal import run_cancel_safe

from ..support.agents import ENDPOINT, ScriptedAgent

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"
END_KEY = f"{PREFIX}turn-1/live/end.json"
POLL = 0.01


class HeldStore(MemoryStore):
    """A store that signals its first chunk, and holds the end mark's put until released."""

    def __init__(self) -> None:
        super().__init__()
        self.chunk_stored = anyio.Event()
        self.end_started = anyio.Event()
        self.release = anyio.Event()
        self.hold_end = True

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        if key.endswith("/end.json") and self.hold_end:
            self.end_started.set()
            await self.release.wait()
        await super().put(key, body, content_type=content_type)
        if key.endswith(".jsonl"):
            self.chunk_stored.set()


def following_step(agent: ScriptedAgent, store: MemoryStore) -> Any:
    async def step() -> None:
        turns = LiveTurns(
            ENDPOINT, store, PREFIX, client=agent.client(), poll_interval_seconds=POLL
        )
        async with turns, turns.following("turn-1") as turn:
            turn.follow("t1")
            await anyio.sleep_forever()

    return step


def running_agent() -> ScriptedAgent:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")
    return agent


async def end_mark(store: MemoryStore) -> Any:
    return json.loads(await store.get(END_KEY)) if await store.list(END_KEY) else None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_asyncio_timeout_around_the_step_ends_it_through_its_cleanup() -> None:
    agent, store = running_agent(), HeldStore()
    store.hold_end = False
    loop = asyncio.get_running_loop()
    with anyio.fail_after(10):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(None) as timeout:
                async with anyio.create_task_group() as tg:

                    async def expire_after_first_chunk() -> None:
                        await store.chunk_stored.wait()
                        timeout.reschedule(loop.time())

                    tg.start_soon(expire_after_first_chunk)
                    await run_cancel_safe(following_step(agent, store))
    assert await end_mark(store) == {"state": "canceled", "next": 2, "complete": False}


async def cancel_twice(store: HeldStore, bridged: bool) -> asyncio.Task[None]:
    """The step is cancelled natively, then again while it writes its end mark."""
    agent = running_agent()
    step = following_step(agent, store)
    task = asyncio.get_running_loop().create_task(
        run_cancel_safe(step) if bridged else step(), name="activity"
    )
    await store.chunk_stored.wait()
    task.cancel()
    await store.end_started.wait()
    task.cancel()  # a second native cancel, in the middle of the end mark's put
    store.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    return task


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_second_native_cancel_during_the_end_mark_does_not_abort_it() -> None:
    store = HeldStore()
    with anyio.fail_after(10):
        task = await cancel_twice(store, bridged=True)
    assert task.cancelled(), "the cancel comes out"
    assert await end_mark(store) == {"state": "canceled", "next": 2, "complete": False}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_without_the_bridge_a_second_cancel_during_the_end_mark_does_not_abort_it() -> None:
    # anyio's shield does not hold off a native cancel; the block's cleanup runs in a
    # task of its own, which none reaches (tests/turns/test_native_cancels.py has the matrix).
    store = HeldStore()
    with anyio.fail_after(10):
        task = await cancel_twice(store, bridged=False)
    assert task.cancelled(), "the cancel comes out"
    assert await end_mark(store) == {"state": "canceled", "next": 2, "complete": False}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_cleanup_that_overruns_its_bound_is_logged_and_the_cancel_comes_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entered = anyio.Event()

    async def stuck_cleanup() -> None:
        try:
            entered.set()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep_forever()

    with anyio.fail_after(10):
        task = asyncio.get_running_loop().create_task(
            run_cancel_safe(stuck_cleanup, cleanup_seconds=0.2)
        )
        await entered.wait()
        task.cancel()
        with (
            caplog.at_level(logging.ERROR, "follower.temporal"),
            pytest.raises(asyncio.CancelledError),
        ):
            await task
    assert "did not finish its cleanup within 0.2 s" in caplog.text


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_step_that_is_not_cancelled_returns_or_raises_as_itself() -> None:
    async def returns() -> int:
        await anyio.lowlevel.checkpoint()
        return 7

    async def raises() -> None:
        await anyio.lowlevel.checkpoint()
        raise LookupError("the step's own")

    with anyio.fail_after(10):
        assert await run_cancel_safe(returns) == 7
        with pytest.raises(LookupError, match="the step's own"):
            await run_cancel_safe(raises)


async def test_progress_shows_each_turn_its_task_and_events_stored() -> None:
    agent, store = running_agent(), HeldStore()
    store.hold_end = False
    with anyio.fail_after(10):
        turns = LiveTurns(
            ENDPOINT, store, PREFIX, client=agent.client(), poll_interval_seconds=POLL
        )
        async with turns:
            assert turns.progress() == ()
            async with turns.following("turn-1") as turn:
                assert turns.progress() == (TurnProgress("turn-1", None, 0, False),)
                turn.follow("t1")
                await store.chunk_stored.wait()
                assert turns.progress() == (TurnProgress("turn-1", "t1", 2, False),)
                agent.finish("t1")
                turn.ended("completed")
        assert turns.progress() == (TurnProgress("turn-1", "t1", 2, True),)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_cancel_hook_that_raises_still_cancels_the_step_and_its_cleanup_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entered, cleaned_up = anyio.Event(), anyio.Event()

    async def step() -> None:
        try:
            entered.set()
            await anyio.sleep_forever()
        finally:
            cleaned_up.set()

    def broken_hook() -> None:
        raise OverflowError("the rule could not decide")

    with anyio.fail_after(10):
        task = asyncio.get_running_loop().create_task(run_cancel_safe(step, on_cancel=broken_hook))
        await entered.wait()
        task.cancel()
        with (
            caplog.at_level(logging.ERROR, "follower.temporal"),
            pytest.raises(asyncio.CancelledError),
        ):
            await task
    assert cleaned_up.is_set(), "the step was cancelled and its cleanup ran"
    assert "OverflowError" in caplog.text


def test_the_last_attempt_rule_does_not_overflow_on_a_long_flaky_activity() -> None:
    from datetime import UTC, datetime, timedelta
    from types import SimpleNamespace

    from temporalio.common import RetryPolicy

    from follower.temporal._rule import is_last_attempt

    policy = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0)
    now = datetime.now(UTC)
    for attempt, closes_in, last in [(3, timedelta(hours=1), False), (3, timedelta(0), True)]:
        info = SimpleNamespace(
            retry_policy=policy,
            attempt=attempt,
            schedule_to_close_timeout=closes_in or timedelta(microseconds=1),
            scheduled_time=now,
        )
        assert is_last_attempt(info) is last  # type: ignore[arg-type]
    # Attempt 60 of a 1 s, x2 policy once overflowed the backoff arithmetic.
    long_flaky = SimpleNamespace(
        retry_policy=policy,
        attempt=60,
        schedule_to_close_timeout=timedelta(days=365),
        scheduled_time=now,
    )
    assert is_last_attempt(long_flaky) is False  # type: ignore[arg-type]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_cancelled_step_that_raises_its_own_exception_raises_it_as_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entered = anyio.Event()

    async def step() -> None:
        try:
            entered.set()
            await anyio.sleep_forever()
        finally:
            raise LookupError("the step's own")

    with anyio.fail_after(10):
        task = asyncio.get_running_loop().create_task(run_cancel_safe(step))
        await entered.wait()
        task.cancel()
        with caplog.at_level(logging.DEBUG, "follower.temporal"), pytest.raises(LookupError):
            await task
    assert "raised during its cleanup" not in caplog.text
