"""A step's marks under one native asyncio cancel that lands after its body returned or raised.

asyncio only, the matrix: a native cancel (``asyncio.timeout``, ``asyncio.wait_for``,
``task.cancel()``, an ``asyncio.TaskGroup`` whose sibling fails) has no trio
counterpart, and anyio's shields do not hold one off (TESTING.md). It lands
while the turn writes its end mark, or while ``LiveTurns`` writes the step's
null link, after the body returned or raised: the mark is written, the cancel
comes out as the runner expects it (the body's own exception, if it raised,
comes out as itself). On virtual time (looptime), so ``wait_for``'s timer fires
only once the step is idle in the held write. The trio equivalent, an anyio
cancel landing at the same places, runs on both backends at the end.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from follower import LiveTurns, MemoryStore, TrajectoryState

from ..support.agents import ENDPOINT, ScriptedAgent
from ..support.virtual_time import virtual_clock, virtual_time_backends

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"
END_KEY = f"{PREFIX}turn-1/live/end.json"
NEXT_KEY = f"{PREFIX}turn-1/live/next.json"
HELD = {"end mark": END_KEY, "null link": NEXT_KEY}
# Past the step's own work and before the held write's 5 s bound, on virtual time.
WAIT_FOR_SECONDS = 3.0


class BodyError(Exception):
    """The body's own exception."""


class SiblingError(Exception):
    """What makes an asyncio.TaskGroup cancel the step."""


class HeldStore(MemoryStore):
    """Holds one key's put until the step's task has been cancelled, then stores it."""

    def __init__(self, held_key: str) -> None:
        super().__init__()
        self.held_key = held_key
        self.held = anyio.Event()
        self.step_cancelled: Callable[[], bool] = lambda: True

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        if key == self.held_key:
            self.held.set()
            # Polled on virtual time: a cancel has no event to wait on. A write the
            # cancel aborts ends here.
            while not self.step_cancelled():  # noqa: ASYNC110
                await anyio.sleep(0.1)
        await super().put(key, body, content_type=content_type)


def step_of(store: HeldStore, outcome: str) -> Callable[[], Awaitable[None]]:
    """A step of one turn whose task ends at once; its body returns or raises."""
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")
    agent.finish("t1", TrajectoryState.COMPLETED)

    async def step() -> None:
        task = asyncio.current_task()
        assert task is not None
        store.step_cancelled = lambda: task.cancelling() > 0
        turns = LiveTurns(ENDPOINT, store, PREFIX, client=agent.client(), poll_interval_seconds=1)
        async with turns, turns.following("turn-1") as turn:
            turn.follow("t1")
            turn.ended("completed")
            if outcome == "raises":
                raise BodyError("the body's own")

    return step


async def run_cancelled(kind: str, step: Callable[[], Awaitable[None]], store: HeldStore) -> Any:
    """Run ``step`` under ``kind`` of native cancel, fired once the held write began.

    What came out: the exception, or the task for ``task.cancel()``.
    """
    loop = asyncio.get_running_loop()
    if kind == "asyncio.timeout":
        try:
            async with asyncio.timeout(None) as timeout:

                async def expire() -> None:
                    await store.held.wait()
                    timeout.reschedule(loop.time())

                expiring = loop.create_task(expire())
                await step()
        except BaseException as exc:
            return exc
        finally:
            expiring.cancel()
        return None
    if kind == "asyncio.wait_for":
        try:
            await asyncio.wait_for(step(), WAIT_FOR_SECONDS)
        except BaseException as exc:
            return exc
        return None
    if kind == "task.cancel()":
        task = loop.create_task(step())
        await store.held.wait()
        task.cancel()
        await asyncio.wait([task])
        return task
    assert kind == "asyncio.TaskGroup"

    async def failing_sibling() -> None:
        await store.held.wait()
        raise SiblingError

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(step())
            group.create_task(failing_sibling())
    except BaseException as exc:
        return exc
    return None


KINDS = ["asyncio.timeout", "asyncio.wait_for", "task.cancel()", "asyncio.TaskGroup"]


@pytest.mark.parametrize("anyio_backend", [("asyncio", virtual_clock("asyncio"))])
@pytest.mark.parametrize("outcome", ["returns", "raises"])
@pytest.mark.parametrize("where", list(HELD))
@pytest.mark.parametrize("kind", KINDS)
async def test_one_native_cancel_after_the_body_leaves_the_marks_written(
    kind: str, where: str, outcome: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = HeldStore(HELD[where])
    with anyio.fail_after(60):
        came_out = await run_cancelled(kind, step_of(store, outcome), store)
    assert store.held.is_set(), "the cancel landed in the held write"
    assert json.loads(await store.get(END_KEY))["state"] == "completed"
    assert json.loads(await store.get(NEXT_KEY)) == {"turn": None}
    # The cancel comes out as the runner expects it; the body's exception as itself.
    if kind == "task.cancel()":
        if outcome == "returns":
            assert came_out.cancelled()
        else:
            assert isinstance(came_out.exception(), BodyError)
    elif kind == "asyncio.TaskGroup":
        assert isinstance(came_out, BaseExceptionGroup)
        want = [SiblingError] if outcome == "returns" else [SiblingError, BodyError]
        assert sorted(type(e).__name__ for e in came_out.exceptions) == sorted(
            w.__name__ for w in want
        )
    elif outcome == "returns":
        assert isinstance(came_out, TimeoutError)
    else:
        assert isinstance(came_out, BodyError)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# --- the trio equivalent: an anyio cancel landing at the same places -----------------------


@pytest.fixture(params=virtual_time_backends())
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.parametrize("outcome", ["returns", "raises"])
@pytest.mark.parametrize("where", list(HELD))
async def test_an_anyio_cancel_after_the_body_leaves_the_marks_written(
    where: str, outcome: str
) -> None:
    store = HeldStore(HELD[where])
    scope = anyio.CancelScope()
    store.step_cancelled = lambda: scope.cancel_called
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")
    agent.finish("t1", TrajectoryState.COMPLETED)
    came_out: BaseException | None = None
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:

            async def cancel_when_held() -> None:
                await store.held.wait()
                scope.cancel()

            tg.start_soon(cancel_when_held)
            try:
                with scope:
                    turns = LiveTurns(
                        ENDPOINT, store, PREFIX, client=agent.client(), poll_interval_seconds=1
                    )
                    async with turns, turns.following("turn-1") as turn:
                        turn.follow("t1")
                        turn.ended("completed")
                        if outcome == "raises":
                            raise BodyError("the body's own")
            except BodyError as exc:
                came_out = exc
    assert scope.cancel_called
    assert json.loads(await store.get(END_KEY))["state"] == "completed"
    assert json.loads(await store.get(NEXT_KEY)) == {"turn": None}
    assert (came_out is None) == (outcome == "returns")
