"""A store that cannot silently mix runs: whose turn it is, refusal, resume and hand-off.

On virtual time with in-memory stores, and on real time with a folder (worker
threads and virtual clocks do not mix).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio
import pytest

from follower import (
    FilesystemStore,
    LiveTurn,
    LiveTurns,
    MemoryStore,
    ObjectStore,
    StoredEvent,
    StoreError,
    TrajectoryState,
    TurnConflictError,
    TurnEnd,
    TurnExistsError,
    following_live_trajectory,
    read_live_trajectory,
)

from ..support.agents import ENDPOINT, ScriptedAgent
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"
POLL = 0.05


@pytest.fixture(params=[*virtual_time_backends(), "asyncio", "trio"], scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture
def store(anyio_backend: Any, tmp_path: Path) -> ObjectStore:
    # A folder only on real time: its worker threads would let a virtual clock jump.
    if isinstance(anyio_backend, tuple):
        return MemoryStore()
    return FilesystemStore(tmp_path / "store")


def live(turn: str) -> str:
    return f"{PREFIX}{turn}/live/"


async def snapshot(store: ObjectStore) -> dict[str, bytes]:
    """Every stored object's bytes."""
    return {key: await store.get(key) for key in await store.list("")}


async def load(store: ObjectStore, key: str) -> Any:
    return json.loads(await store.get(key))


async def read_step(store: ObjectStore, first: str = "turn-1") -> list[StoredEvent | TurnEnd]:
    with anyio.fail_after(30):
        return [
            item
            async for item in read_live_trajectory(
                store, PREFIX, first, poll_interval_seconds=POLL, turn_ends=True
            )
        ]


def events_of(items: list[StoredEvent | TurnEnd], turn: str) -> list[Any]:
    events = [i for i in items if isinstance(i, StoredEvent) and i.turn_id == turn]
    assert [e.index for e in events] == list(range(len(events))), "each index once, in order"
    return [e.event for e in events]


async def chunk_ranges(store: ObjectStore, turn: str) -> list[tuple[int, int]]:
    names = [key.rsplit("/", 1)[1] for key in await store.list(live(turn))]
    return [(int(name[:8]), int(name[9:17])) for name in names if name.endswith(".jsonl")]


def turns_of(agent: ScriptedAgent, store: ObjectStore, **options: Any) -> LiveTurns:
    options.setdefault("poll_interval_seconds", POLL)
    return LiveTurns(ENDPOINT, store, PREFIX, client=agent.client(), **options)


@asynccontextmanager
async def resumed(agent: ScriptedAgent, store: ObjectStore) -> AsyncIterator[LiveTurn]:
    """The first turn of a retried step: the same turns, resumed from the store."""
    async with turns_of(agent, store, resume=True) as turns, turns.following("turn-1") as turn:
        yield turn


async def first_attempt(agent: ScriptedAgent, store: ObjectStore, events: range) -> None:
    """A step whose first turn stores ``events`` of task t1, then is cancelled and hands off.

    It is cancelled once its one heartbeat has landed (the next is an hour away): a
    put that a cancel abandons in a folder's worker thread may land later, and
    would be taken for a write of the attempt that follows.
    """
    agent.add_task("t1")
    with anyio.CancelScope() as scope:
        async with (
            turns_of(agent, store, writer_heartbeat_seconds=3600) as turns,
            turns.following("turn-1") as turn,
        ):
            turn.follow("t1")
            agent.publish("t1", *events)
            while await stored_count(store, "turn-1") < len(events) or not await store.list(
                f"{PREFIX}turn-1/alive/"
            ):
                await agent.wait_reads(len(agent.reads) + 1)
            turns.hand_off()  # a worker shutting down: the step will be retried
            scope.cancel()


async def stored_count(store: ObjectStore, turn: str) -> int:
    return max((n for _, n in await chunk_ranges(store, turn)), default=0)


# --- refusing a stored turn ----------------------------------------------------------


@pytest.mark.parametrize("how", ["turn", "LiveTurns"])
async def test_a_second_run_on_a_stored_turn_is_refused_and_changes_nothing(
    store: ObjectStore, how: str
) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")
    agent.finish("t1")
    with anyio.fail_after(30):
        async with turns_of(agent, store) as turns, turns.following("turn-1") as turn:
            turn.follow("t1")
            turn.ended("completed")
        before = await snapshot(store)
        assert live("turn-1") + "task.json" in before
        ran = False
        with pytest.raises(TurnExistsError) as caught:
            if how == "turn":
                block = following_live_trajectory(
                    ENDPOINT, store, PREFIX, "turn-1", poll_interval_seconds=POLL
                )
                async with block:
                    ran = True
            else:
                async with turns_of(agent, store) as again, again.following("turn-1"):
                    ran = True
    assert not ran, "the body of a refused turn never runs"
    assert not isinstance(caught.value, TurnConflictError)
    message = str(caught.value)
    assert "turn-1" in message
    assert "task 't1'" in message
    assert "resume=True" in message
    assert await snapshot(store) == before


async def test_a_turn_that_never_followed_leaves_nothing_and_can_be_entered_again(
    store: ObjectStore,
) -> None:
    agent = ScriptedAgent()
    with anyio.fail_after(30):
        async with turns_of(agent, store) as turns, turns.following("turn-1"):
            pass
        async with turns_of(agent, store) as turns, turns.following("turn-1"):
            pass
    assert await snapshot(store) == {}


# --- resume ---------------------------------------------------------------------------


async def test_resume_after_a_hand_off_stores_every_event_exactly_once(
    store: ObjectStore,
) -> None:
    agent = ScriptedAgent(page_limit=3)
    with anyio.fail_after(60):
        await first_attempt(agent, store, range(5))
        assert live("turn-1") + "end.json" not in await snapshot(store)
        assert not await store.list(live("turn-1") + "next.json")
        reads_before = len(agent.reads)
        agent.publish("t1", *range(5, 12))
        agent.finish("t1")
        async with (
            turns_of(agent, store, resume=True) as turns,
            turns.following("turn-1") as turn,
        ):
            turn.follow("t1")
            turn.ended("completed")
    assert agent.reads[reads_before].after == 5, "the retry reads on after the stored chunks"
    ranges = await chunk_ranges(store, "turn-1")
    assert ranges[0][0] == 0
    assert all(a == n for (_, n), (a, _) in pairwise(ranges))
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "completed",
        "next": 12,
        "complete": True,
    }
    items = await read_step(store)
    assert events_of(items, "turn-1") == list(range(12))
    assert items[-1] == TurnEnd("turn-1", TrajectoryState.COMPLETED, 12, True, None)


async def test_resume_after_a_crash_continues_the_stored_chunks(store: ObjectStore) -> None:
    # A dead worker leaves task.json and chunks, and no end mark: the same as a hand-off.
    agent = ScriptedAgent()
    with anyio.fail_after(60):
        await first_attempt(agent, store, range(3))
        crashed = await snapshot(store)
        agent.publish("t1", "x", "y")
        agent.finish("t1", TrajectoryState.FAILED)
        async with resumed(agent, store) as turn:
            turn.follow("t1")
    after = await snapshot(store)
    assert all(after[key] == body for key, body in crashed.items()), "nothing stored is touched"
    assert events_of(await read_step(store), "turn-1") == [0, 1, 2, "x", "y"]
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "failed",
        "next": 5,
        "complete": True,
    }


async def test_resume_against_an_agent_that_restarted_ends_incomplete(
    store: ObjectStore,
) -> None:
    agent = ScriptedAgent()
    with anyio.fail_after(60):
        await first_attempt(agent, store, range(4))
        agent.forget()  # the agent restarted: the task is unknown (404)
        async with resumed(agent, store) as turn:
            turn.follow("t1")
            await agent.wait_reads(len(agent.reads) + 1)
            turn.ended("completed")
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "completed",
        "next": 4,
        "complete": False,
    }
    items = await read_step(store)
    assert items[-1] == TurnEnd("turn-1", TrajectoryState.COMPLETED, 4, False, None)


async def test_a_resumed_step_skips_ended_turns_and_links_each_turn_once(
    store: ObjectStore,
) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a")
    agent.finish("t1")
    agent.add_task("t2")
    agent.publish("t2", "b")
    with anyio.fail_after(60):
        with anyio.CancelScope() as scope:
            async with turns_of(agent, store) as turns:
                async with turns.following("turn-1") as turn:
                    turn.follow("t1")
                    turn.ended("completed")
                async with turns.following("turn-2") as turn:
                    turn.follow("t2")
                    while await stored_count(store, "turn-2") < 1:
                        await agent.wait_reads(len(agent.reads) + 1)
                    turns.hand_off()
                    scope.cancel()
        first_turn = {k: v for k, v in (await snapshot(store)).items() if "turn-1/" in k}
        reads_before = len(agent.reads)
        agent.publish("t2", "c")
        agent.finish("t2")
        async with turns_of(agent, store, resume=True) as turns:
            async with turns.following("turn-1") as turn:
                turn.follow("t1")
            async with turns.following("turn-2") as turn:
                turn.follow("t2")
                turn.ended("completed")
    assert {r.task_id for r in agent.reads[reads_before:]} == {"t2"}, "an ended turn is not read"
    now = await snapshot(store)
    assert {k: v for k, v in now.items() if "turn-1/" in k} == first_turn
    assert await load(store, live("turn-1") + "next.json") == {"turn": "turn-2"}
    assert await load(store, live("turn-2") + "next.json") == {"turn": None}
    items = await read_step(store)
    assert events_of(items, "turn-1") == ["a"]
    assert events_of(items, "turn-2") == ["b", "c"]


async def test_resuming_another_tasks_turn_conflicts_and_writes_nothing(
    store: ObjectStore,
) -> None:
    agent = ScriptedAgent()
    with anyio.fail_after(60):
        await first_attempt(agent, store, range(2))
        before = await snapshot(store)
        agent.add_task("t-other")
        async with resumed(agent, store) as turn:
            with pytest.raises(TurnConflictError, match="t1"):
                turn.follow("t-other")
    assert await snapshot(store) == before


async def test_a_stored_turn_without_task_json_is_not_resumed(store: ObjectStore) -> None:
    await store.put(live("turn-1") + "00000000-00000001.jsonl", b'"a"\n', content_type="x")
    agent = ScriptedAgent()
    agent.add_task("t1")
    with anyio.fail_after(30):
        async with resumed(agent, store) as turn:
            with pytest.raises(TurnConflictError, match=r"no task\.json"):
                turn.follow("t1")
    assert list(await snapshot(store)) == [live("turn-1") + "00000000-00000001.jsonl"]


# --- hand-off -------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["turn", "turns"])
@pytest.mark.parametrize("ending", ["returns", "raises", "cancelled"])
async def test_a_hand_off_writes_no_end_mark_and_no_null_link(
    store: ObjectStore, who: str, ending: str
) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")
    with anyio.fail_after(30), anyio.CancelScope() as scope:
        try:
            async with (
                turns_of(agent, store, drain_seconds=0.5) as turns,
                turns.following("turn-1") as turn,
            ):
                turn.follow("t1")
                while await stored_count(store, "turn-1") < 2:
                    await agent.wait_reads(len(agent.reads) + 1)
                (turn if who == "turn" else turns).hand_off()
                if ending == "raises":
                    raise RuntimeError("will be retried")
                if ending == "cancelled":
                    scope.cancel()
                    await anyio.sleep_forever()
        except RuntimeError:
            assert ending == "raises"
    names = [key.rsplit("/", 1)[1] for key in await store.list(live("turn-1"))]
    assert "end.json" not in names
    assert "next.json" not in names
    assert names == ["00000000-00000002.jsonl", "meta.json", "task.json"]


# --- whose turn it is -----------------------------------------------------------------


async def test_task_json_says_whose_turn_it_is_before_the_first_chunk(store: ObjectStore) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    seen_first_chunk_with: list[list[str]] = []

    class Watching:
        def __init__(self, inner: ObjectStore) -> None:
            self.inner = inner

        async def put(self, key: str, body: bytes, *, content_type: str) -> None:
            # Heartbeats are stored beside the turn's folder, not in it.
            in_turn = key.startswith(live("turn-1"))
            if in_turn and not key.endswith("task.json") and not seen_first_chunk_with:
                seen_first_chunk_with.append(await self.inner.list(live("turn-1")))
            await self.inner.put(key, body, content_type=content_type)

        async def get(self, key: str) -> bytes:
            return await self.inner.get(key)

        async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
            return await self.inner.list(prefix, start_after=start_after)

    agent.publish("t1", "a")
    agent.finish("t1")
    with anyio.fail_after(30):
        async with turns_of(agent, Watching(store)) as turns, turns.following("turn-1") as turn:
            turn.follow("t1")
    assert seen_first_chunk_with == [[live("turn-1") + "task.json"]]
    task = await load(store, live("turn-1") + "task.json")
    assert task["task_id"] == "t1"
    assert task["endpoint"] == ENDPOINT
    assert task["started_at"].endswith("Z")
    assert "T" in task["started_at"]


async def test_a_run_that_lost_the_turn_to_another_never_marks_its_end(store: ObjectStore) -> None:
    # Two runs enter the same empty turn (each sees nothing stored); the first to
    # write task.json owns it. The other's exit must not end the owner's turn (its
    # end mark, no events and not complete, would land first and be believed), nor
    # mark it its step's last or link it on to its own next turn (the owner links it
    # on to turn-2).
    agent = ScriptedAgent()
    for task in ("t1", "t2", "t3", "t4"):
        agent.add_task(task)
    with anyio.fail_after(30):
        async with turns_of(agent, store) as one:
            async with one.following("turn-1") as owner:
                async with turns_of(agent, store) as two:
                    async with two.following("turn-1") as other:
                        owner.follow("t1")
                        agent.publish("t1", "a", "b")
                        while await stored_count(store, "turn-1") < 2:
                            await agent.wait_reads(len(agent.reads) + 1)
                        other.follow("t2")
                        agent.finish("t2")  # its follower reads it to the end, stores nothing
                    # Its step goes on: its next turn must not link from the lost one.
                    async with two.following("turn-x") as after_the_lost_one:
                        after_the_lost_one.follow("t4")
                        agent.finish("t4")
                names = await store.list(live("turn-1"))
                assert live("turn-1") + "end.json" not in names
                assert live("turn-1") + "next.json" not in names
                assert (await load(store, live("turn-1") + "task.json"))["task_id"] == "t1"
                agent.finish("t1")
            async with one.following("turn-2") as turn:
                turn.follow("t3")
                agent.publish("t3", "c")
                agent.finish("t3")
    items = await read_step(store)
    assert events_of(items, "turn-1") == ["a", "b"]
    assert events_of(items, "turn-2") == ["c"]
    end = await load(store, live("turn-1") + "end.json")
    assert end == {"state": "completed", "next": 2, "complete": True}


# --- Ctrl-C ---------------------------------------------------------------------------


async def test_ctrl_c_in_the_body_marks_the_turn_canceled_and_comes_out_as_itself(
    store: ObjectStore,
) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    interrupt = KeyboardInterrupt()
    with anyio.fail_after(30), pytest.raises(KeyboardInterrupt) as caught:
        async with turns_of(agent, store) as turns, turns.following("turn-1") as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            raise interrupt
    assert caught.value is interrupt
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "canceled",
        "next": 0,
        "complete": False,
    }


# trio delivers Ctrl-C in whichever task runs at the signal: here, the follower's.
# asyncio lets a task's KeyboardInterrupt out of the event loop itself: trio only.
@pytest.mark.parametrize(
    "anyio_backend",
    [p for p in [*virtual_time_backends(), "trio"] if "trio" in str(getattr(p, "id", p))],
)
async def test_ctrl_c_inside_a_followers_task_comes_out_as_itself(store: ObjectStore) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a")
    interrupt = KeyboardInterrupt()

    class InterruptedAtTheChunk:
        def __init__(self, inner: ObjectStore) -> None:
            self.inner = inner

        async def put(self, key: str, body: bytes, *, content_type: str) -> None:
            if key.endswith(".jsonl"):
                raise interrupt
            await self.inner.put(key, body, content_type=content_type)

        async def get(self, key: str) -> bytes:
            return await self.inner.get(key)

        async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
            return await self.inner.list(prefix, start_after=start_after)

    with anyio.fail_after(30), pytest.raises(KeyboardInterrupt) as caught:
        async with (
            turns_of(agent, InterruptedAtTheChunk(store)) as turns,
            turns.following("turn-1") as turn,
        ):
            turn.follow("t1")
            await anyio.sleep_forever()
    assert caught.value is interrupt
    assert (await load(store, live("turn-1") + "end.json"))["state"] == "canceled"


async def test_a_store_that_fails_at_the_steps_exit_never_replaces_the_steps_exception(
    store: ObjectStore,
) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a")
    error = ValueError("the step's own")

    class FailingListings:
        """Lists fine until the body has run; then every listing fails."""

        def __init__(self, inner: ObjectStore) -> None:
            self.inner = inner
            self.broken = False

        async def put(self, key: str, body: bytes, *, content_type: str) -> None:
            await self.inner.put(key, body, content_type=content_type)

        async def get(self, key: str) -> bytes:
            return await self.inner.get(key)

        async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
            if self.broken:
                raise StoreError("the store is down")
            return await self.inner.list(prefix, start_after=start_after)

    failing = FailingListings(store)
    with anyio.fail_after(30), pytest.raises(ValueError, match="the step's own") as caught:
        async with (
            turns_of(agent, failing) as turns,  # type: ignore[arg-type]
            turns.following("turn-1") as turn,
        ):
            turn.follow("t1")
            while await stored_count(store, "turn-1") < 1:
                await agent.wait_reads(len(agent.reads) + 1)
            failing.broken = True
            raise error
    assert caught.value is error
    assert await load(store, live("turn-1") + "next.json") == {"turn": None}


async def test_one_turn_handed_off_keeps_the_step_from_ending_for_good(
    store: ObjectStore,
) -> None:
    # turn-1 is left for a later attempt and turn-2 ends: the step has not ended for
    # good, so no null link closes the chain before turn-1's end mark exists.
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.add_task("t2")
    agent.publish("t2", "b")
    agent.finish("t2")
    with anyio.fail_after(30):
        async with turns_of(agent, store, drain_seconds=0.1) as turns:
            async with turns.following("turn-1") as turn:
                turn.follow("t1")
                turn.hand_off()
            async with turns.following("turn-2") as turn:
                turn.follow("t2")
                turn.ended("completed")
    names = {key.removeprefix(PREFIX) for key in await store.list(PREFIX)}
    assert "turn-1/live/end.json" not in names
    assert "turn-2/live/end.json" in names
    assert "turn-2/live/next.json" not in names, "no null link: the step did not end for good"
