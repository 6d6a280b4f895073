"""A stream that ends before the task does: a gap, a new subscription, and the task as it ended.

The agent is httpx's ``MockTransport``: its first stream ends after one update with no terminal
state (an agent restarting, a proxy closing idle streams); its second carries the rest. The SDK
agent of tests/streams keeps a subscription open in that case, so the early end is played here.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from follower import LiveTurns, MemoryStore, TaskSource, Via, read_live_trajectory
from follower._format._layout import EndMark, TurnKeys

pytestmark = pytest.mark.anyio

TASK = "t1"
URL = "http://agent.test/a2a"


def frame(result: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode() + b"\n\n"


def message(text: str) -> dict[str, Any]:
    return {"messageId": text, "role": "ROLE_AGENT", "parts": [{"text": text}]}


def status(state: str, text: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"state": state}
    if text is not None:
        body["message"] = message(text)
    return {"statusUpdate": {"taskId": TASK, "contextId": "c", "status": body}}


def task(state: str, history: list[str]) -> dict[str, Any]:
    return {
        "id": TASK,
        "contextId": "c",
        "status": {"state": state},
        "history": [message(text) for text in history],
    }


class Body(httpx.AsyncByteStream):
    """A stream's bytes in one piece: an iterator, no generator left to the collector."""

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def __aiter__(self) -> Body:
        return self

    async def __anext__(self) -> bytes:
        data, self._data = self._data, None
        if data is None:
            raise StopAsyncIteration
        return data


class Agent:
    """Two subscriptions, the first cut short; GetTask answers the task as it ended."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.streams = [
            [
                frame({"task": task("TASK_STATE_WORKING", [])}),
                frame(status("TASK_STATE_WORKING", "one")),
            ],
            [
                frame({"task": task("TASK_STATE_WORKING", ["one", "lost"])}),
                frame(status("TASK_STATE_WORKING", "two")),
                frame(status("TASK_STATE_COMPLETED")),
            ],
        ]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        method = json.loads(request.content)["method"]
        self.methods.append(method)
        if method == "SubscribeToTask":
            body = Body(b"".join(self.streams.pop(0)))
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)
        assert method == "GetTask"
        result = task("TASK_STATE_COMPLETED", ["one", "lost", "two"])
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": result})


async def test_a_stream_that_ends_early_is_followed_again_and_reconciled() -> None:
    agent = Agent()
    store = MemoryStore()
    source = TaskSource(Via.STREAM, URL, "1.0")
    with anyio.fail_after(30):
        async with (
            httpx.AsyncClient(transport=httpx.MockTransport(agent)) as client,
            LiveTurns(source, store, "s/", poll_interval_seconds=0.01, client=client) as turns,
            turns.following("t") as turn,
        ):
            turn.follow(TASK)
            # The body returns once the turn is whole (a backoff of at most 5 s after the
            # early end): the turn's statistics have no change notice.
            while not turn.statistics().complete:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            turn.ended("completed")
        events = [stored.event async for stored in read_live_trajectory(store, "s/", "t")]
    assert agent.methods == ["SubscribeToTask", "SubscribeToTask", "GetTask"]
    kinds = [next(iter(event)) for event in events]
    assert kinds == ["task", "statusUpdate", "gap", "task", "statusUpdate", "statusUpdate", "task"]
    assert events[2]["gap"]["after"] == 2
    assert [m["parts"][0]["text"] for m in events[-1]["task"]["history"]] == ["one", "lost", "two"]
    keys = TurnKeys("s/", "t")
    mark = EndMark.decode(await store.get(keys.end), keys.end)
    assert (mark.state, mark.next, mark.complete) == ("completed", len(events), True)
