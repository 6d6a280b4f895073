"""A step's turns against the scripted agent, on virtual time.

As docs/protocol.md, "A step's turns", describes them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest

import follower._reading._follow as _follow
from follower import (
    LiveTurn,
    LiveTurns,
    MemoryStore,
    ObjectExistsError,
    StoreError,
    TrajectoryState,
    TurnStateError,
    following_live_trajectory,
    read_live_trajectory,
)
from follower._http._clients import _shared_ssl_context, client_pool
from follower._turns._endings import CLEANUP_SECONDS

from ..support.agents import ENDPOINT, ScriptedAgent
from ..support.stored import stored_turn
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

POLL = 1.0
PREFIX = "steps/s1/"


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(autouse=True)
def backoff_at_its_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every backoff at the top of its jitter, so the times are exact (test_retries.py)."""
    monkeypatch.setattr(_follow, "backoff_fraction", lambda: 1.0)


def live(turn: str) -> str:
    return f"{PREFIX}{turn}/live/"


async def load(store: MemoryStore, key: str) -> Any:
    return json.loads(await store.get(key))


async def stored_events(store: MemoryStore, turn: str) -> list[Any]:
    """Every stored event of a turn, checking the chunks are contiguous from 0."""
    return (await stored_turn(store, PREFIX, turn)).events


def turn_block(agent: ScriptedAgent, store: MemoryStore, turn: str = "turn-1", **kw: Any) -> Any:
    kw.setdefault("poll_interval_seconds", POLL)
    return following_live_trajectory(ENDPOINT, store, PREFIX, turn, client=agent.client(), **kw)


async def test_healthy_agent_every_event_stored_once_in_order() -> None:
    agent, store = ScriptedAgent(page_limit=3), MemoryStore()
    agent.add_task("t1", format="agentenv/v1")
    with anyio.fail_after(100):
        async with turn_block(agent, store) as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            agent.publish("t1", *range(5))
            await agent.wait_reads(3)
            agent.publish("t1", *range(5, 11))
            agent.finish("t1", TrajectoryState.COMPLETED)
            turn.ended("completed")
    assert await stored_events(store, "turn-1") == list(range(11))
    assert await load(store, live("turn-1") + "meta.json") == {"format": "agentenv/v1"}
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "completed",
        "next": 11,
        "complete": True,
    }
    # Chunks are one page each: at most page_limit events.
    chunks = (await stored_turn(store, PREFIX, "turn-1")).chunks
    assert all(next_ - after <= 3 for after, next_ in chunks)


async def test_has_more_pages_are_read_back_to_back() -> None:
    agent, store = ScriptedAgent(page_limit=2), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", *range(7))
    agent.finish("t1")
    with anyio.fail_after(100):
        async with turn_block(agent, store) as turn:
            turn.follow("t1")
    assert [r.after for r in agent.reads] == [0, 2, 4, 6]
    assert len({r.at for r in agent.reads}) == 1
    assert await stored_events(store, "turn-1") == list(range(7))


async def test_agent_state_wins_over_the_reported_one() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "a")
    agent.finish("t1", TrajectoryState.FAILED)
    with anyio.fail_after(100):
        async with turn_block(agent, store) as turn:
            turn.follow("t1")
            turn.ended("completed")
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "failed",
        "next": 1,
        "complete": True,
    }


async def test_body_returns_then_followers_drain_to_the_last_page() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", 1, 2)
    with anyio.fail_after(100):
        async with anyio.create_task_group() as tg:

            async def finish_later() -> None:
                await agent.wait_reads(3)
                agent.publish("t1", 3)
                agent.finish("t1", TrajectoryState.CANCELED)

            tg.start_soon(finish_later)
            async with turn_block(agent, store) as turn:
                turn.follow("t1")
                await agent.wait_reads(1)
                turn.ended("completed")
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "canceled",
        "next": 3,
        "complete": True,
    }
    # After stop the pause between reads is 0.2 s, not the poll interval.
    assert agent.reads[2].at - agent.reads[1].at == pytest.approx(0.2)


async def test_drain_is_bounded_by_drain_seconds() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "x")
    with anyio.fail_after(100):
        async with turn_block(agent, store, drain_seconds=7.0) as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            turn.ended("completed")
            body_end = anyio.current_time()
        assert anyio.current_time() - body_end == pytest.approx(7.0, abs=0.3)
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "completed",
        "next": 1,
        "complete": False,
    }


@pytest.mark.parametrize(
    ("ending", "reported", "expected"),
    [
        ("returns", None, "failed"),
        ("returns", "Cancelled", "canceled"),
        ("returns", "rejected", "failed"),
        ("raises", None, "failed"),
        ("raises", "COMPLETED", "completed"),
        ("cancelled", None, "canceled"),
        ("cancelled", "completed", "completed"),
    ],
)
async def test_end_mark_priority(ending: str, reported: str | None, expected: str) -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "e")
    with anyio.fail_after(100), anyio.CancelScope() as outer:
        try:
            async with turn_block(agent, store, drain_seconds=1.0) as turn:
                turn.follow("t1")
                await agent.wait_reads(2)  # the first page is stored by the second read
                if reported is not None:
                    turn.ended(reported)
                if ending == "raises":
                    raise KeyError("body")
                if ending == "cancelled":
                    outer.cancel()
                    await anyio.sleep_forever()
        except KeyError:
            assert ending == "raises"
    assert await load(store, live("turn-1") + "end.json") == {
        "state": expected,
        "next": 1,
        "complete": False,
    }


async def test_404_ends_quietly_and_the_turn_is_marked(caplog: pytest.LogCaptureFixture) -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    with anyio.fail_after(100):
        async with turn_block(agent, store) as turn:
            turn.follow("unknown")
            await agent.wait_reads(1)
            turn.ended("failed")
    # The first 404 may be a task registered late (its grace); the body's return sets
    # stop, and a 404 after stop ends following: one read more, at once.
    assert len(agent.reads) == 2
    assert agent.reads[1].at == pytest.approx(agent.reads[0].at, abs=1e-6)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "unknown" in warnings[0].getMessage()
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "failed",
        "next": 0,
        "complete": False,
    }


async def test_400_is_logged_never_raised_and_the_turn_is_marked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.faults.append((400, "after is past the end"))
    with anyio.fail_after(100):
        async with turn_block(agent, store) as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            turn.ended("completed")
            result = "body went on"
    assert result == "body went on"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().endswith("AgentRefusedError (HTTP 400)") for r in errors] == [True]
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "completed",
        "next": 0,
        "complete": False,
    }


async def test_5xx_is_retried_with_backoff_before_stop() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", 1)
    agent.finish("t1")
    agent.faults.extend([(503, "busy"), (502, "proxy")])
    with anyio.fail_after(100):
        async with turn_block(agent, store, poll_interval_seconds=2.0) as turn:
            turn.follow("t1")
            await agent.wait_reads(3)
    gaps = [b.at - a.at for a, b in zip(agent.reads, agent.reads[1:], strict=False)]
    assert gaps == [pytest.approx(7.0), pytest.approx(12.0)]
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "completed",
        "next": 1,
        "complete": True,
    }


async def test_malformed_page_leaves_chunks_contiguous() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")
    with anyio.fail_after(100):
        async with turn_block(agent, store) as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            agent.publish("t1", "c")
            agent.faults.append(
                (
                    200,
                    {
                        "task_id": "t1",
                        "state": "running",
                        "events": ["c"],
                        "next": 9,
                        "has_more": False,
                        "format": None,
                        "context_id": None,
                    },
                )
            )
            await agent.wait_reads(2)
            turn.ended("completed")
    assert await stored_events(store, "turn-1") == ["a", "b"]
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "completed",
        "next": 2,
        "complete": False,
    }


async def test_format_change_keeps_the_first(caplog: pytest.LogCaptureFixture) -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    task = agent.add_task("t1", format="v1")
    agent.publish("t1", 1)
    with anyio.fail_after(100):
        async with turn_block(agent, store) as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            task.format = "v2"
            agent.publish("t1", 2)
            agent.finish("t1")
    assert await load(store, live("turn-1") + "meta.json") == {"format": "v1"}
    assert any("v2" in r.getMessage() for r in caplog.records)
    assert await stored_events(store, "turn-1") == [1, 2]


async def test_one_task_per_turn() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    with anyio.fail_after(100):
        async with turn_block(agent, store, drain_seconds=0) as turn:
            turn.follow("t1")
            with pytest.raises(TurnStateError):
                turn.follow("t2")
    with pytest.raises(TurnStateError):
        turn.follow("t3")
    assert {r.task_id for r in agent.reads} <= {"t1"}


async def test_a_turn_that_never_follows_writes_nothing() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    with anyio.fail_after(100):
        async with turn_block(agent, store) as turn:
            turn.ended("completed")
    assert await store.list("") == []


async def test_turns_are_linked_in_order_and_the_last_marked_null() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    for task in ("a", "c"):
        agent.add_task(task)
        agent.publish(task, f"{task}-event")
        agent.finish(task)
    with anyio.fail_after(100):
        async with LiveTurns(
            ENDPOINT, store, PREFIX, poll_interval_seconds=POLL, client=agent.client()
        ) as turns:
            async with turns.following("turn-1") as turn:
                turn.follow("a")
            async with turns.following("turn-2") as turn:
                turn.ended("failed")  # never followed a task: not stored, not linked
            async with turns.following("turn-3") as turn:
                turn.follow("c")
    assert await load(store, live("turn-1") + "next.json") == {"turn": "turn-3"}
    assert await load(store, live("turn-3") + "next.json") == {"turn": None}
    assert await store.list(live("turn-2")) == []
    read = [
        (e.turn_id, e.index, e.event) async for e in read_live_trajectory(store, PREFIX, "turn-1")
    ]
    assert read == [("turn-1", 0, "a-event"), ("turn-3", 0, "c-event")]


async def test_cancelled_step_marks_its_last_turn_and_releases_its_lanes() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("a")
    agent.publish("a", 1)
    agent.finish("a")
    agent.add_task("b")
    _shared_ssl_context()  # loaded here: on virtual time, a worker thread would jump the clock
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            "follower._http._clients.ClientPool._new_client", lambda self, ctx: agent.client()
        )
        with anyio.fail_after(100), anyio.CancelScope() as outer:
            # No client given: each turn's follower leases a lane from the loop's
            # pool for as long as it runs, and gives it back as it ends.
            async with LiveTurns(ENDPOINT, store, PREFIX, poll_interval_seconds=POLL) as turns:
                async with turns.following("turn-1") as turn:
                    turn.follow("a")
                assert client_pool().client_count == 0
                async with turns.following("turn-2") as turn:
                    turn.follow("b")
                    await agent.wait_reads(2)
                    assert client_pool().client_count == 1
                    outer.cancel()
                    await anyio.sleep_forever()
    assert outer.cancelled_caught
    assert await load(store, live("turn-1") + "next.json") == {"turn": "turn-2"}
    assert await load(store, live("turn-2") + "end.json") == {
        "state": "canceled",
        "next": 0,
        "complete": False,
    }
    assert await load(store, live("turn-2") + "next.json") == {"turn": None}
    assert client_pool().client_count == 0


class FlakyStore(MemoryStore):
    """A store whose chunk writes fail or hang from the n-th one on."""

    def __init__(self, *, fail_from: int, hang: bool = False, hang_all: bool = False) -> None:
        super().__init__()
        self.chunk_puts = 0
        self.fail_from = fail_from
        self.hang = hang
        self.hang_all = hang_all
        self.hanging = anyio.Event()  # a put hangs now

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        if self.hang_all:
            self.hanging.set()
            await anyio.sleep_forever()
        if key.endswith(".jsonl"):
            self.chunk_puts += 1
            if self.chunk_puts >= self.fail_from:
                if self.hang:
                    await anyio.sleep_forever()
                raise StoreError("disk full")
        await super().put(key, body, content_type=content_type)


@pytest.mark.parametrize("hang", [False, True])
async def test_failing_store_never_claims_unstored_events(hang: bool) -> None:
    agent, store = ScriptedAgent(), FlakyStore(fail_from=2, hang=hang)
    agent.add_task("t1")
    agent.publish("t1", 1, 2)
    with anyio.fail_after(100):
        async with turn_block(agent, store, drain_seconds=5.0) as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            agent.publish("t1", 3)
            await agent.wait_reads(2)
            turn.ended("completed")
            body_end = anyio.current_time()
        assert anyio.current_time() - body_end <= 5.0 + 0.01
    assert await stored_events(store, "turn-1") == [1, 2]
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "completed",
        "next": 2,
        "complete": False,
    }


@pytest.mark.parametrize("ending", ["returns", "raises", "cancelled"])
async def test_hanging_store_cannot_hang_the_step(ending: str) -> None:
    agent, store = ScriptedAgent(), FlakyStore(fail_from=0, hang_all=True)
    agent.add_task("t1")
    agent.publish("t1", 1)
    with anyio.fail_after(100), anyio.CancelScope() as outer:
        start = anyio.current_time()
        try:
            async with turn_block(agent, store, drain_seconds=3.0) as turn:
                turn.follow("t1")
                await store.hanging.wait()  # task.json, the turn's first write, hangs
                if ending == "raises":
                    raise ValueError("body")
                if ending == "cancelled":
                    outer.cancel()
        except ValueError:
            pass
    assert anyio.current_time() - start <= 3.0 + CLEANUP_SECONDS + 0.01
    assert await store.list("") == []


async def test_cancel_during_the_drain_propagates_and_marks_the_turn() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", 1)
    with anyio.fail_after(100):
        with anyio.move_on_after(5.0) as outer:
            async with turn_block(agent, store, drain_seconds=60.0) as turn:
                turn.follow("t1")
                await agent.wait_reads(1)
        assert outer.cancelled_caught
    assert await load(store, live("turn-1") + "end.json") == {
        "state": "canceled",
        "next": 1,
        "complete": False,
    }


async def test_the_body_exception_comes_out_as_itself_even_a_group() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    error = ExceptionGroup("the body's own group", [ValueError("a"), KeyError("b")])
    with anyio.fail_after(100), pytest.raises(ExceptionGroup) as caught:
        async with turn_block(agent, store) as turn:
            turn.follow("t1")
            await agent.wait_reads(1)
            raise error
    assert caught.value is error


async def test_link_lands_when_written_before_and_cleanup_finds_it_there() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("b")
    await store.put(live("turn-1") + "next.json", b'{"turn":"turn-2"}', content_type="x")
    with anyio.fail_after(100):
        async with turn_block(agent, store, "turn-2", previous_turn_id="turn-1") as turn:
            turn.follow("b")
            await agent.wait_reads(1)
            turn.ended("completed")
    with pytest.raises(ObjectExistsError):
        await store.put(live("turn-1") + "next.json", b"{}", content_type="x")
    assert await load(store, live("turn-1") + "next.json") == {"turn": "turn-2"}


async def test_a_live_turn_is_made_by_the_library_only() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", 0)
    agent.finish("t1")
    with anyio.fail_after(30):
        async with turn_block(agent, store) as turn:
            assert type(turn) is LiveTurn  # made with LiveTurn._create
            with pytest.raises(TypeError, match="no public constructor"):
                LiveTurn(turn._block)
            turn.follow("t1")
            turn.ended("completed")
    assert (await load(store, live("turn-1") + "end.json"))["state"] == "completed"
