"""What the interop tests share: JSON-RPC and trajectory reads against the framework
agent (afp_agent.py), and a store that says when a turn's events are stored (read
back by tests/support/stored.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urljoin

import anyio
import attrs
import httpx

import follower
from follower import MemoryStore, following_live_trajectory

from ..support.stored import StoredTurn, stored_turn
from .conftest import RunningAgent

PREFIX = "steps/s1/"
FORMAT = "interop-events/1"  # what afp_agent.py names its events' format
POLL = 0.1
TEST_SECONDS = 20.0
TERMINAL = frozenset({"completed", "canceled", "failed", "rejected"})
MAX_PAGE_EVENTS = 1000  # the framework's page limits (and the cursor read's, docs/protocol.md)
MAX_PAGE_BYTES = 4 * 1024 * 1024


@attrs.frozen
class Served:
    """A task's trajectory as the agent serves it through cursor reads from ``after=0``."""

    state: str
    format: str | None
    events: list[Any]


class Agent:
    """Plain JSON-RPC and trajectory reads against the framework agent."""

    def __init__(self, http: httpx.AsyncClient, running: RunningAgent, card: dict[str, Any]):
        self.http = http
        self.running = running
        self.card = card
        # The framework's card names its JSON-RPC URL as a path, relative to the card's URL.
        self.a2a_url = urljoin(running.card_url, card["url"])
        endpoint = follower.lowlevel.live_trajectory_endpoint(card, self.a2a_url)
        assert endpoint is not None, f"the card offers no live read: {card}"
        self.endpoint = endpoint

    @classmethod
    async def connect(cls, http: httpx.AsyncClient, running: RunningAgent) -> Agent:
        answer = await http.get(running.card_url)
        assert answer.status_code == 200, answer.text
        return cls(http, running, answer.json())

    @classmethod
    @asynccontextmanager
    async def client(cls, running: RunningAgent) -> AsyncIterator[Agent]:
        """:meth:`connect` on a client of its own, closed after the block."""
        async with httpx.AsyncClient() as http:
            yield await cls.connect(http, running)

    async def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        answer = await self.http.post(self.a2a_url, json=request)
        assert answer.status_code == 200, f"{method}: HTTP {answer.status_code} {answer.text}"
        body = answer.json()
        assert "error" not in body, f"{method}: {body['error']}\n{self.running.log_tail()}"
        result: dict[str, Any] = body["result"]
        return result

    async def send(self, context_id: str | None = None, **script: Any) -> dict[str, Any]:
        """``message/send``, not blocking: the task as it starts (``script``: see afp_agent)."""
        message: dict[str, Any] = {
            "role": "user",
            "kind": "message",
            "messageId": uuid.uuid4().hex,
            "parts": [{"kind": "text", "text": "go"}],
            "metadata": {"interop": script},
        }
        if context_id is not None:
            message["contextId"] = context_id
        task = await self.rpc(
            "message/send", {"message": message, "configuration": {"blocking": False}}
        )
        assert task["kind"] == "task", task
        return task

    async def state(self, task_id: str) -> str:
        task = await self.rpc("tasks/get", {"id": task_id})
        state: str = task["status"]["state"]
        return state

    async def wait_ended(self, task_id: str) -> str:
        """Poll ``tasks/get`` until the task is terminal; its state."""
        while True:
            state = await self.state(task_id)
            if state in TERMINAL:
                return state
            await anyio.sleep(0.05)

    async def cancel(self, task_id: str) -> str:
        task = await self.rpc("tasks/cancel", {"id": task_id})
        state: str = task["status"]["state"]
        return state

    async def read(self, task_id: str, after: int) -> dict[str, Any]:
        answer = await self.http.post(self.endpoint, json={"task_id": task_id, "after": after})
        assert answer.status_code == 200, f"read after={after}: {answer.status_code} {answer.text}"
        page: dict[str, Any] = answer.json()
        return page

    async def served(self, task_id: str) -> Served:
        """A full cursor read from ``after=0``, once the trajectory is terminal.

        Polls while the state is not terminal: on ``tasks/cancel`` the framework publishes
        ``canceled`` from its cancel handler but seals the log only when ``run()`` gets
        the cancel, so the log can still read ``running`` just after the status changed.
        """
        while True:
            events: list[Any] = []
            after = 0
            while True:
                page = await self.read(task_id, after)
                assert page["next"] == after + len(page["events"]), page
                events.extend(page["events"])
                after = page["next"]
                if not page["has_more"]:
                    break
            if page["state"] in TERMINAL:
                return Served(page["state"], page["format"], events)
            await anyio.sleep(0.05)

    async def final(self, task_id: str) -> list[Any]:
        """The completed-task read ``{task_id}``: the final trajectory as one array."""
        answer = await self.http.post(self.endpoint, json={"task_id": task_id})
        assert answer.status_code == 200, answer.text
        trajectory: list[Any] = answer.json()["trajectory"]
        return trajectory


@attrs.frozen
class FollowedTask:
    """A task run to its end while a lone turn followed it: as the agent served it, as stored."""

    task_id: str
    state: str
    """The state ``tasks/get`` reported it ended in."""
    served: Served
    stored: StoredTurn


async def follow_task_to_its_end(agent: Agent, **script: Any) -> FollowedTask:
    """Start a task (``script``: see afp_agent), follow it in turn-1 to its end, read it back."""
    store = MemoryStore()
    async with following_live_trajectory(
        agent.endpoint, store, PREFIX, "turn-1", poll_interval_seconds=POLL
    ) as turn:
        task = await agent.send(**script)
        turn.follow(task["id"])
        state = await agent.wait_ended(task["id"])
        turn.ended(state)
    served = await agent.served(task["id"])
    stored = await stored_turn(store, PREFIX, "turn-1")
    return FollowedTask(task["id"], state, served, stored)


class WatchedStore(MemoryStore):
    """A memory store that tells who waits on it that an object was stored."""

    def __init__(self) -> None:
        super().__init__()
        self._stored = anyio.Event()

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await super().put(key, body, content_type=content_type)
        self._stored.set()
        self._stored = anyio.Event()

    async def wait_events(self, turn_id: str, events: int) -> None:
        """Return once at least ``events`` events of the turn are stored."""
        while True:
            stored = self._stored
            if len((await stored_turn(self, PREFIX, turn_id)).events) >= events:
                return
            await stored.wait()


def indexes(events: list[Any]) -> list[int]:
    return [event["index"] for event in events]
