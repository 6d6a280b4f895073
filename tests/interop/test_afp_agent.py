"""The follower against an agent built with the existing framework (agentenv-framework-protocol).

The agent (``afp_agent.py``, see conftest) runs in a process of its own on 127.0.0.1 and
serves A2A JSON-RPC and the live trajectory extension as the framework generates them.
The tests speak plain JSON-RPC to it over httpx, follow its tasks with the library, and
compare what was stored with the trajectory the agent serves once the task has ended.
Real sockets and real time: every test is bounded with ``anyio.fail_after``, and waits
on what the agent or the store says, never on sleeps.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urljoin

import anyio
import httpx
import pytest

import follower
from follower import FilesystemStore, LiveTurns, MemoryStore, following_live_trajectory

from ..support.stored import stored_turn
from .conftest import RunningAgent
from .helpers import (
    FORMAT,
    MAX_PAGE_EVENTS,
    POLL,
    PREFIX,
    TEST_SECONDS,
    Agent,
    WatchedStore,
    follow_task_to_its_end,
    indexes,
)

pytestmark = [pytest.mark.anyio, pytest.mark.waiting]


async def test_the_card_offers_the_live_cursor_read(afp_agent: RunningAgent) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient() as http:
            card = (await http.get(afp_agent.card_url)).json()
    a2a_url = urljoin(afp_agent.card_url, card["url"])
    assert a2a_url == afp_agent.url + "/a2a"
    expected = afp_agent.url + "/ext/trajectory"
    assert follower.lowlevel.live_trajectory_endpoint(card, a2a_url) == expected
    assert follower.lowlevel.live_trajectory_endpoint(card, afp_agent.url) == expected


async def test_a_task_is_stored_whole_and_in_order(afp_agent: RunningAgent) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with Agent.client(afp_agent) as agent:
            followed = await follow_task_to_its_end(agent, events=20, interval=0.03)
            final = await agent.final(followed.task_id)
    served, stored = followed.served, followed.stored
    assert followed.state == "completed"
    assert served.state == "completed"
    assert served.format == FORMAT
    assert indexes(served.events) == list(range(20))
    assert served.events == final
    assert stored.events == served.events
    assert stored.end == {"state": "completed", "next": 20, "complete": True}
    assert stored.meta == {"format": FORMAT}
    assert stored.next_turn is None  # a lone turn, not through LiveTurns: no link


async def test_every_event_is_read_while_the_task_runs(afp_agent: RunningAgent) -> None:
    # Lockstep: the agent appends event i only once a read asking for it (after >= i)
    # reached it, so each event is stored as a chunk of its own before the next exists.
    events = 8
    with anyio.fail_after(TEST_SECONDS):
        async with Agent.client(afp_agent) as agent:
            followed = await follow_task_to_its_end(agent, events=events, interval=0, lockstep=True)
    served, stored = followed.served, followed.stored
    assert served.state == "completed", afp_agent.log_tail()
    assert stored.chunks == [(i, i + 1) for i in range(events)]
    assert stored.events == served.events
    assert stored.end == {"state": "completed", "next": events, "complete": True}


@pytest.mark.parametrize(
    ("events", "pad_bytes", "most_per_page"),
    [
        pytest.param(2500, 0, MAX_PAGE_EVENTS, id="more-than-1000-events"),
        # 1.5 MB events: the agent's 4 MiB budget (MAX_PAGE_BYTES) fits two a page.
        pytest.param(7, 1_500_000, 2, id="more-than-4-MiB"),
    ],
)
async def test_pages_the_agent_splits_are_stored_contiguously(
    afp_agent: RunningAgent, events: int, pad_bytes: int, most_per_page: int
) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with Agent.client(afp_agent) as agent:
            followed = await follow_task_to_its_end(
                agent, events=events, interval=0, pad_bytes=pad_bytes
            )
    served, stored = followed.served, followed.stored
    assert len(served.events) == events
    assert indexes(stored.events) == indexes(served.events)
    assert stored.events == served.events
    assert all(next_ - after <= most_per_page for after, next_ in stored.chunks), stored.chunks
    assert stored.end == {"state": "completed", "next": events, "complete": True}


async def test_a_failed_task_ends_failed(afp_agent: RunningAgent) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with Agent.client(afp_agent) as agent:
            followed = await follow_task_to_its_end(agent, events=3, interval=0.02, fail=True)
    served, stored = followed.served, followed.stored
    assert followed.state == "failed"
    assert served.state == "failed"
    assert stored.events == served.events
    assert stored.end == {"state": "failed", "next": 3, "complete": True}


async def test_a_step_that_cancels_its_task_stores_it_to_the_end(
    afp_agent: RunningAgent,
) -> None:
    # The body sends tasks/cancel and returns: the follower drains to the agent's last page.
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient() as http:
            agent = await Agent.connect(http, afp_agent)
            store = WatchedStore()
            async with following_live_trajectory(
                agent.endpoint, store, PREFIX, "turn-1", poll_interval_seconds=POLL
            ) as turn:
                task = await agent.send(events=10_000, interval=0.02)
                turn.follow(task["id"])
                await store.wait_events("turn-1", 3)
                assert await agent.cancel(task["id"]) == "canceled"
                turn.ended(await agent.wait_ended(task["id"]))
            served = await agent.served(task["id"])
            stored = await stored_turn(store, PREFIX, "turn-1")
            assert await agent.state(task["id"]) == "canceled"
    assert served.state == "canceled"
    assert 3 <= len(served.events) < 10_000
    assert stored.events == served.events
    assert stored.end == {"state": "canceled", "next": len(served.events), "complete": True}


async def test_a_cancelled_step_leaves_its_task_canceled(afp_agent: RunningAgent) -> None:
    # The step is cancelled while the task runs: the follower is torn down at once and
    # the turn is marked canceled; then the step runner cancels the agent's task.
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient() as http:
            agent = await Agent.connect(http, afp_agent)
            store = WatchedStore()
            task_id = ""
            with anyio.CancelScope() as step:
                async with following_live_trajectory(
                    agent.endpoint, store, PREFIX, "turn-1", poll_interval_seconds=POLL
                ) as turn:
                    task = await agent.send(events=10_000, interval=0.02)
                    task_id = task["id"]
                    turn.follow(task_id)
                    await store.wait_events("turn-1", 3)
                    step.cancel()
                    await anyio.sleep_forever()
            assert step.cancelled_caught
            stored = await stored_turn(store, PREFIX, "turn-1")
            assert await agent.state(task_id) == "working"
            assert await agent.cancel(task_id) == "canceled"
            served = await agent.served(task_id)
            assert await agent.state(task_id) == "canceled"
    assert served.state == "canceled"
    assert stored.end == {"state": "canceled", "next": len(stored.events), "complete": False}
    assert len(stored.events) >= 3
    assert stored.events == served.events[: len(stored.events)]


async def test_an_unknown_task_ends_following_quietly(afp_agent: RunningAgent) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient() as http:
            agent = await Agent.connect(http, afp_agent)
            answer = await http.post(agent.endpoint, json={"task_id": "no-such-task", "after": 0})
            assert answer.status_code == 404
            store = MemoryStore()
            async with following_live_trajectory(
                agent.endpoint, store, PREFIX, "turn-1", poll_interval_seconds=POLL
            ) as turn:
                turn.follow("no-such-task")
            stored = await stored_turn(store, PREFIX, "turn-1")
    assert stored.chunks == []
    assert stored.end == {"state": "failed", "next": 0, "complete": False}


async def test_two_turns_in_one_context_are_linked_and_read_back(
    afp_agent: RunningAgent, tmp_path: Path
) -> None:
    store = FilesystemStore(tmp_path)
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient() as http:
            agent = await Agent.connect(http, afp_agent)
            tasks = []
            async with LiveTurns(
                agent.endpoint, store, PREFIX, poll_interval_seconds=POLL
            ) as turns:
                context_id = None
                for turn_id, count in (("turn-1", 4), ("turn-2", 6)):
                    async with turns.following(turn_id) as turn:
                        task = await agent.send(context_id, events=count, interval=0.02)
                        context_id = task["contextId"]
                        tasks.append(task["id"])
                        turn.follow(task["id"])
                        turn.ended(await agent.wait_ended(task["id"]))
            served = [await agent.served(task_id) for task_id in tasks]
            read_back = [
                (stored.turn_id, stored.index, stored.event)
                async for stored in follower.read_live_trajectory(
                    store, PREFIX, "turn-1", poll_interval_seconds=0.02
                )
            ]
            first = await stored_turn(store, PREFIX, "turn-1")
            second = await stored_turn(store, PREFIX, "turn-2")
    assert first.next_turn == {"turn": "turn-2"}
    assert second.next_turn == {"turn": None}
    assert first.end == {"state": "completed", "next": 4, "complete": True}
    assert second.end == {"state": "completed", "next": 6, "complete": True}
    assert read_back == [
        *(("turn-1", i, event) for i, event in enumerate(served[0].events)),
        *(("turn-2", i, event) for i, event in enumerate(served[1].events)),
    ]
