"""Following a task over its stream, against the official a2a-sdk agent, on both backends.

The follower's stream goes through a cutting proxy (``sdk_proxy``); the step's own calls go to
the agent directly, so a cut reaches only the stream. What is checked is what the protocol
promises: every event stored once and in order, a lost stream marked as a gap and the turn
complete only once the task as it ended is stored, no stream after the step stopped, and the
step's outcome unchanged. Order comes from what is observed (a task's gate opens once its
snapshot is stored), never from sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

from follower import (
    A2AAgent,
    LiveTurn,
    LiveTurns,
    MemoryStore,
    TaskSource,
    Via,
    connect_agent,
    read_live_trajectory,
)
from follower._format._a2a import a2a_state
from follower._format._layout import EndMark, TurnKeys

from .conftest import SdkAgent
from .proxy import CuttingProxy

pytestmark = pytest.mark.anyio

TEST_SECONDS = 40.0
PREFIX = "steps/s1/"
# Short waits between polls and re-subscriptions: the backoff's floor is the poll interval.
POLL_SECONDS = 0.05


def stream_source(proxy: CuttingProxy, version: str | None = "1.0") -> TaskSource:
    return TaskSource(Via.STREAM, proxy.url + "/a2a", version)


async def start(agent: A2AAgent, **script: Any) -> str:
    return (await agent.send_message(json.dumps(script))).id


async def open_gate(sdk_agent: SdkAgent, task_id: str) -> None:
    async with httpx.AsyncClient() as client:
        (await client.post(f"{sdk_agent.url}/test/gates/{task_id}")).raise_for_status()


async def until(check: Callable[[], bool], what: str) -> None:
    """Look again until ``check()`` holds (bounded by the test's own deadline).

    What is looked at (a turn's statistics, the proxy's counts) has no change notice.
    """
    while True:
        if check():
            return
        await anyio.sleep(0.01)


def events_stored(turn: LiveTurn) -> Callable[[], int]:
    return lambda: turn.statistics().events_stored


async def stored_events(store: MemoryStore, turn_id: str = "t1") -> list[Any]:
    events = []
    with anyio.fail_after(10):
        async for stored in read_live_trajectory(store, PREFIX, turn_id):
            events.append(stored.event)
    return events


async def end_mark(store: MemoryStore, turn_id: str = "t1") -> EndMark:
    keys = TurnKeys(PREFIX, turn_id)
    return EndMark.decode(await store.get(keys.end), keys.end)


def texts(events: list[Any]) -> Iterator[str]:
    """The texts the scripted updates, chunks and end message carry, in stored order."""
    for event in events:
        if "statusUpdate" in event:
            message = event["statusUpdate"]["status"].get("message")
            parts = message["parts"] if message else []
        elif "artifactUpdate" in event:
            parts = event["artifactUpdate"]["artifact"]["parts"]
        else:
            continue
        for part in parts:
            yield part["text"]


def agent_texts(task: dict[str, Any]) -> list[str]:
    """The agent's messages in a task's history, then its status message."""
    messages = [m for m in task.get("history", []) if m["role"] == "ROLE_AGENT"]
    status_message = task["status"].get("message")
    if status_message is not None and status_message not in messages:
        messages.append(status_message)
    return [part["text"] for message in messages for part in message["parts"]]


def scripted(updates: int, chunks: int, end: str) -> list[str]:
    expected = []
    for index in range(max(updates, chunks)):
        if index < updates:
            expected.append(f"update {index}")
        if index < chunks:
            expected.append(f"chunk {index}")
    return [*expected, f"end {end}"]


async def follow_gated(
    sdk_agent: SdkAgent,
    source: TaskSource,
    store: MemoryStore,
    body: Callable[[A2AAgent, LiveTurn, str], Awaitable[None]],
    **script: Any,
) -> None:
    """A step of one turn: start a gated task, follow it, open the gate once its snapshot is
    stored, then run ``body``."""
    async with (
        connect_agent(sdk_agent.url) as agent,
        LiveTurns(source, store, PREFIX, poll_interval_seconds=POLL_SECONDS) as turns,
        turns.following("t1") as turn,
    ):
        task_id = await start(agent, gate=True, **script)
        turn.follow(task_id)
        await until(lambda: events_stored(turn)() >= 1, "the snapshot is stored")
        await open_gate(sdk_agent, task_id)
        await body(agent, turn, task_id)


async def wait_and_end(agent: A2AAgent, turn: LiveTurn, task_id: str) -> None:
    ended = await agent.wait_for_task(task_id, poll_interval_seconds=POLL_SECONDS)
    turn.ended(ended.state)


@pytest.mark.parametrize("version", ["1.0", None], ids=["a2a-1.0", "a2a-0.3"])
async def test_every_event_is_stored_once_in_order(
    sdk_agent: SdkAgent, sdk_proxy: CuttingProxy, version: str | None
) -> None:
    store = MemoryStore()
    with anyio.fail_after(TEST_SECONDS):
        await follow_gated(
            sdk_agent,
            stream_source(sdk_proxy, version),
            store,
            wait_and_end,
            updates=5,
            chunks=3,
            interval=0.01,
        )
    events = await stored_events(store)
    # Stored in 1.0's shape whatever the agent spoke: one key, the event's kind.
    assert all(len(event) == 1 for event in events), events
    assert next(iter(events[0])) == "task"
    assert list(texts(events)) == scripted(5, 3, "completed")
    assert events[-1]["statusUpdate"]["status"]["state"] in ("TASK_STATE_COMPLETED", "completed")
    assert not any("gap" in event for event in events)
    mark = await end_mark(store)
    assert (mark.state, mark.next, mark.complete) == ("completed", len(events), True)
    assert sdk_proxy.connections == 1  # one subscription, never a second


async def test_a_cut_stream_is_subscribed_again_and_the_turn_is_reconciled(
    sdk_agent: SdkAgent, sdk_proxy: CuttingProxy
) -> None:
    store = MemoryStore()

    async def cut_midway(agent: A2AAgent, turn: LiveTurn, task_id: str) -> None:
        await until(lambda: events_stored(turn)() >= 3, "some updates are stored")
        assert sdk_proxy.cut() == 1
        await wait_and_end(agent, turn, task_id)

    with anyio.fail_after(TEST_SECONDS):
        await follow_gated(
            sdk_agent,
            stream_source(sdk_proxy),
            store,
            cut_midway,
            updates=12,
            chunks=4,
            interval=0.02,
        )
    events = await stored_events(store)
    gaps = [index for index, event in enumerate(events) if "gap" in event]
    assert gaps, events  # where the stream was lost, the turn says events may be missing
    assert events[gaps[0]]["gap"]["after"] == gaps[0]
    # Nothing stored twice, nothing out of order, though some may be missing ...
    seen = list(texts(events))
    assert len(seen) == len(set(seen))
    expected = scripted(12, 4, "completed")
    assert seen == sorted(seen, key=expected.index)
    # ... and then the task as it ended holds every message and chunk: complete.
    final = events[-1]["task"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert agent_texts(final) == [t for t in expected if t.startswith(("update", "end"))]
    assert [p["text"] for p in final["artifacts"][0]["parts"]] == [f"chunk {i}" for i in range(4)]
    mark = await end_mark(store)
    assert (mark.next, mark.complete) == (len(events), True)
    assert sdk_proxy.connections >= 2  # subscribed again after the cut


async def test_a_stream_lost_after_stop_ends_following_at_once(
    sdk_agent: SdkAgent, sdk_proxy: CuttingProxy
) -> None:
    """The step returned and its turn drains; the stream drops: following ends, no re-subscribe."""
    store = MemoryStore()
    drain_seconds = 30.0
    body_returned = anyio.Event()
    drained_at: list[float] = []

    async def step(agent: A2AAgent) -> None:
        async with (
            LiveTurns(
                stream_source(sdk_proxy),
                store,
                PREFIX,
                poll_interval_seconds=POLL_SECONDS,
                drain_seconds=drain_seconds,
            ) as turns,
            turns.following("t1") as turn,
        ):
            turn.follow(task_id)
            await until(lambda: events_stored(turn)() >= 1, "the snapshot is stored")
            body_returned.set()  # the block now drains, the stream open, the task holding
        drained_at.append(anyio.current_time())
        assert not turn.statistics().followers_alive

    with anyio.fail_after(TEST_SECONDS):
        async with connect_agent(sdk_agent.url) as agent:
            task_id = await start(agent, updates=1, interval=0.01, hold=60)
            async with anyio.create_task_group() as tg:
                tg.start_soon(step, agent)
                await body_returned.wait()
                sdk_proxy.refuse()  # a re-subscription would be seen, and refused
                cut_at = anyio.current_time()
                assert sdk_proxy.cut() == 1
            await agent.cancel_task(task_id)
    # Ended by the sentinel, not by the drain's deadline: long before it.
    assert drained_at[0] - cut_at < drain_seconds / 2
    assert sdk_proxy.connections == 1
    mark = await end_mark(store)
    assert mark.complete is False


async def test_a_cancelled_step_closes_its_stream_and_subscribes_no_more(
    sdk_agent: SdkAgent, sdk_proxy: CuttingProxy
) -> None:
    store = MemoryStore()
    with anyio.fail_after(TEST_SECONDS):
        async with connect_agent(sdk_agent.url) as agent:
            task_id = await start(agent, updates=1, interval=0.01, hold=60)
            with anyio.CancelScope() as step:
                async with (
                    LiveTurns(
                        stream_source(sdk_proxy), store, PREFIX, poll_interval_seconds=POLL_SECONDS
                    ) as turns,
                    turns.following("t1") as turn,
                ):
                    turn.follow(task_id)
                    await until(lambda: events_stored(turn)() >= 1, "the snapshot is stored")
                    step.cancel()
                    await anyio.sleep_forever()
            assert step.cancelled_caught
            assert not turn.statistics().followers_alive
            subscriptions = sdk_proxy.connections
            await until(lambda: sdk_proxy.open_connections == 0, "the stream is closed")
            assert sdk_proxy.connections == subscriptions == 1
            await agent.cancel_task(task_id)
    mark = await end_mark(store)
    assert (mark.state, mark.complete) == ("canceled", False)


async def test_a_step_that_raises_comes_out_as_itself_with_its_stream_stored(
    sdk_agent: SdkAgent, sdk_proxy: CuttingProxy
) -> None:
    store = MemoryStore()

    class StepFailed(Exception):
        pass

    async def fail(agent: A2AAgent, turn: LiveTurn, task_id: str) -> None:
        await until(lambda: events_stored(turn)() >= 3, "some updates are stored")
        await agent.cancel_task(task_id)
        raise StepFailed

    with anyio.fail_after(TEST_SECONDS), pytest.raises(StepFailed):
        await follow_gated(
            sdk_agent, stream_source(sdk_proxy), store, fail, updates=50, interval=0.01
        )
    events = await stored_events(store)
    assert len(events) >= 3
    mark = await end_mark(store)
    # The step raises just after the task is cancelled, and the stream's last frame (the
    # task canceled) may be stored before the raise ends following, or not: the turn
    # is complete exactly when it was.
    last = events[-1].get("statusUpdate")
    ended = last is not None and a2a_state(last["status"]["state"]) == "canceled"
    assert (mark.state, mark.next, mark.complete) == ("failed", len(events), ended)
    await until(lambda: sdk_proxy.open_connections == 0, "the stream is closed")


async def test_a_turn_that_waits_on_the_user_ends_its_stream_there(
    sdk_agent: SdkAgent, sdk_proxy: CuttingProxy
) -> None:
    """The SDK keeps a subscription open after ``input-required``: the follower stops there."""
    store = MemoryStore()
    with anyio.fail_after(TEST_SECONDS):
        await follow_gated(
            sdk_agent,
            stream_source(sdk_proxy),
            store,
            wait_and_end,
            updates=2,
            interval=0.01,
            end="input-required",
        )
    events = await stored_events(store)
    assert list(texts(events)) == scripted(2, 0, "input-required")
    assert (await end_mark(store)).complete is True


async def test_polls_store_each_change_and_the_task_as_it_ended(sdk_agent: SdkAgent) -> None:
    store = MemoryStore()
    source = TaskSource(Via.POLL, sdk_agent.url + "/a2a", "1.0")
    with anyio.fail_after(TEST_SECONDS):
        await follow_gated(
            sdk_agent, source, store, wait_and_end, updates=4, chunks=2, interval=0.05
        )
    events = await stored_events(store)
    assert next(iter(events[0])) == "task"
    # Each change once: a status once, an artifact again only as it grew (stored whole).
    statuses = list(texts([e for e in events[:-1] if "statusUpdate" in e]))
    assert len(statuses) == len(set(statuses))
    grown = [len(e["artifactUpdate"]["artifact"]["parts"]) for e in events if "artifactUpdate" in e]
    assert grown == sorted(set(grown))
    final = events[-1]["task"]
    assert agent_texts(final) == ["update 0", "update 1", "update 2", "update 3", "end completed"]
    mark = await end_mark(store)
    assert (mark.state, mark.next, mark.complete) == ("completed", len(events), True)


async def test_a_retried_step_resumes_its_streamed_turn_after_a_gap(
    sdk_agent: SdkAgent, sdk_proxy: CuttingProxy
) -> None:
    """The first attempt hands off; the next resumes the turn: a gap, then the rest, complete."""
    store = MemoryStore()
    source = stream_source(sdk_proxy)
    with anyio.fail_after(TEST_SECONDS):
        async with connect_agent(sdk_agent.url) as agent:
            task_id = await start(agent, gate=True, updates=4, interval=0.01)
            first = LiveTurns(
                source,
                store,
                PREFIX,
                poll_interval_seconds=POLL_SECONDS,
                resume=True,
                drain_seconds=0,
            )
            async with first as turns, turns.following("t1") as turn:
                turn.follow(task_id)
                await until(lambda: events_stored(turn)() >= 1, "the snapshot is stored")
                turns.hand_off()  # a worker shutting down: the turn is the next attempt's
            await open_gate(sdk_agent, task_id)
            async with (
                LiveTurns(
                    source, store, PREFIX, poll_interval_seconds=POLL_SECONDS, resume=True
                ) as turns,
                turns.following("t1") as turn,
            ):
                turn.follow(task_id)
                await wait_and_end(agent, turn, task_id)
    events = await stored_events(store)
    assert next(iter(events[0])) == "task"  # the first attempt's
    assert events[1]["gap"]["reason"] == "resumed"
    assert events[1]["gap"]["after"] == 1
    assert "task" in events[-1], events
    final = events[-1]["task"]
    assert agent_texts(final) == scripted(4, 0, "completed")
    mark = await end_mark(store)
    assert (mark.state, mark.next, mark.complete) == ("completed", len(events), True)
