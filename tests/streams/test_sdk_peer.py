"""The streaming test peer itself: the SDK agent's frames through the cutting proxy, in plain httpx.

These prove the harness the stream follower's tests stand on: what the SDK agent streams for
each script, that a cut ends an open stream with an error (never a hang), that a stream can
end without a terminal state, and that ``GetTask`` afterwards holds everything. Order comes
from what the client observes (a task's gate opens once the snapshot has arrived), never from
sleeps.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

from .conftest import SdkAgent
from .proxy import CuttingProxy

pytestmark = pytest.mark.anyio

TEST_SECONDS = 30.0
V1 = {"A2A-Version": "1.0"}
WORKING = "TASK_STATE_WORKING"


async def rpc(
    client: httpx.AsyncClient,
    base: str,
    method: str,
    params: dict[str, Any],
    *,
    headers: dict[str, str] | None = V1,
) -> dict[str, Any]:
    """One JSON-RPC call to ``base``'s ``/a2a``; the whole response object."""
    request = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    answer = await client.post(base + "/a2a", json=request, headers=headers)
    answer.raise_for_status()
    body: dict[str, Any] = answer.json()
    return body


async def start_task(client: httpx.AsyncClient, base: str, **script: Any) -> str:
    """Send a message holding ``script``; the new task's id (answered at once)."""
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": json.dumps(script)}],
    }
    params = {"message": message, "configuration": {"returnImmediately": True}}
    answer = await rpc(client, base, "SendMessage", params)
    task_id: str = answer["result"]["task"]["id"]
    return task_id


async def open_gate(client: httpx.AsyncClient, base: str, task_id: str) -> None:
    (await client.post(f"{base}/test/gates/{task_id}")).raise_for_status()


@asynccontextmanager
async def subscribed(
    client: httpx.AsyncClient, base: str, task_id: str
) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
    """``SubscribeToTask`` on ``task_id``: the ``result`` of each frame, in order."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    async with aconnect_sse(client, "POST", base + "/a2a", json=request, headers=V1) as source:

        async def results() -> AsyncIterator[dict[str, Any]]:
            async for event in source.aiter_sse():
                frame = json.loads(event.data)
                assert "error" not in frame, frame
                yield frame["result"]

        yield results()


async def stream_message(
    client: httpx.AsyncClient, base: str, **script: Any
) -> list[dict[str, Any]]:
    """``SendStreamingMessage`` holding ``script``: each frame's ``result``, to the stream's end."""
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": json.dumps(script)}],
    }
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": message},
    }
    async with aconnect_sse(client, "POST", base + "/a2a", json=request, headers=V1) as source:
        return [json.loads(event.data)["result"] async for event in source.aiter_sse()]


class Reader:
    """Reads a stream's results in a task of its own, noting each frame and how it ended."""

    def __init__(self, results: AsyncIterator[dict[str, Any]]) -> None:
        self._results = results
        self.frames: list[dict[str, Any]] = []
        self.error: Exception | None = None
        self.ended = anyio.Event()
        self._seen = anyio.Event()

    async def read(self) -> None:
        try:
            async for result in self._results:
                self.frames.append(result)
                self._seen.set()
                self._seen = anyio.Event()
        except Exception as exc:  # the test asserts which
            self.error = exc
        finally:
            self.ended.set()

    async def wait_for_text(self, text: str) -> None:
        while not any(text_of(frame) == text for frame in self.frames):
            if self.ended.is_set():
                pytest.fail(f"the stream ended before {text!r}: {self.frames}, {self.error!r}")
            seen, ended = self._seen, self.ended
            async with anyio.create_task_group() as tg:

                async def cancel_when(event: anyio.Event) -> None:
                    await event.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(cancel_when, seen)
                tg.start_soon(cancel_when, ended)


def kind(result: dict[str, Any]) -> str:
    """Which one of ``task``, ``message``, ``statusUpdate``, ``artifactUpdate`` a result is."""
    (name,) = result
    return name


def text_of(result: dict[str, Any]) -> str | None:
    """The text a status update's message or an artifact chunk carries, if any."""
    if "statusUpdate" in result:
        message = result["statusUpdate"]["status"].get("message")
        return None if message is None else message["parts"][0]["text"]
    if "artifactUpdate" in result:
        return str(result["artifactUpdate"]["artifact"]["parts"][0]["text"])
    return None


def state_of(result: dict[str, Any]) -> str | None:
    if "statusUpdate" in result:
        return str(result["statusUpdate"]["status"]["state"])
    if "task" in result:
        return str(result["task"]["status"]["state"])
    return None


def scripted(updates: int, chunks: int) -> list[str]:
    """The texts a script's events carry, in the order the agent emits them."""
    texts = []
    for index in range(max(updates, chunks)):
        if index < updates:
            texts.append(f"update {index}")
        if index < chunks:
            texts.append(f"chunk {index}")
    return texts


async def follow_after_gate(
    client: httpx.AsyncClient, base: str, task_id: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Subscribe, take the snapshot, open the gate, read to the stream's end."""
    async with subscribed(client, base, task_id) as results:
        snapshot = await anext(results)
        await open_gate(client, base, task_id)
        rest = [result async for result in results]
    return snapshot, rest


def scripted_frames(rest: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The frames after the snapshot, less the start's bare working update if it came late."""
    if rest and state_of(rest[0]) == WORKING and text_of(rest[0]) is None:
        return rest[1:]
    return rest


async def test_subscribe_sees_every_event_once_in_order(sdk_proxy: CuttingProxy) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient(timeout=10) as client:
            task_id = await start_task(
                client, sdk_proxy.url, gate=True, updates=3, chunks=2, interval=0.01
            )
            snapshot, rest = await follow_after_gate(client, sdk_proxy.url, task_id)
    assert kind(snapshot) == "task"
    assert snapshot["task"]["id"] == task_id
    assert state_of(snapshot) in ("TASK_STATE_SUBMITTED", WORKING)
    frames = scripted_frames(rest)
    assert [text_of(frame) for frame in frames[:-1]] == scripted(3, 2)
    assert all(state_of(f) == WORKING for f in frames[:-1] if kind(f) == "statusUpdate")
    assert state_of(frames[-1]) == "TASK_STATE_COMPLETED"
    assert text_of(frames[-1]) == "end completed"
    assert sdk_proxy.connections >= 1


@pytest.mark.parametrize(
    ("end", "state"),
    [
        ("completed", "TASK_STATE_COMPLETED"),
        ("failed", "TASK_STATE_FAILED"),
        ("input-required", "TASK_STATE_INPUT_REQUIRED"),
    ],
)
async def test_a_streamed_message_ends_after_the_scripted_end(
    sdk_proxy: CuttingProxy, end: str, state: str
) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient(timeout=10) as client:
            results = await stream_message(client, sdk_proxy.url, updates=2, chunks=1, end=end)
    assert kind(results[0]) == "task"
    frames = scripted_frames(results[1:])
    assert [text_of(frame) for frame in frames] == [*scripted(2, 1), f"end {end}"]
    assert state_of(frames[-1]) == state


async def test_a_cut_ends_an_open_stream_with_an_error(
    sdk_proxy: CuttingProxy, sdk_agent: SdkAgent
) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient(timeout=10) as client:
            task_id = await start_task(client, sdk_proxy.url, gate=True, updates=1)
            async with subscribed(client, sdk_proxy.url, task_id) as results:
                assert kind(await anext(results)) == "task"
                assert sdk_proxy.open_connections >= 1
                assert sdk_proxy.cut() >= 1
                with pytest.raises(httpx.TransportError):
                    await anext(results)
            assert sdk_proxy.open_connections == 0
            # The agent is untouched: the task still runs, and a new subscription sees it end.
            async with subscribed(client, sdk_proxy.url, task_id) as results:
                snapshot = await anext(results)
                assert state_of(snapshot) in ("TASK_STATE_SUBMITTED", WORKING)
                await open_gate(client, sdk_agent.url, task_id)
                rest = [result async for result in results]
    assert [text_of(frame) for frame in scripted_frames(rest)] == ["update 0", "end completed"]
    assert sdk_proxy.connections >= 2


async def test_end_none_ends_a_streamed_message_without_a_terminal_state(
    sdk_proxy: CuttingProxy,
) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient(timeout=10) as client:
            results = await stream_message(
                client, sdk_proxy.url, updates=2, chunks=3, interval=0.01, end="none"
            )
            task_id = results[0]["task"]["id"]
            task = (await rpc(client, sdk_proxy.url, "GetTask", {"id": task_id}))["result"]
    frames = scripted_frames(results[1:])
    assert [text_of(frame) for frame in frames] == scripted(2, 3)
    assert all(state_of(f) == WORKING for f in frames if kind(f) == "statusUpdate")
    # What the stream showed, GetTask shows too: the task still working, every chunk, every update.
    assert task["status"]["state"] == WORKING
    assert _texts(task["artifacts"][0]["parts"]) == ["chunk 0", "chunk 1", "chunk 2"]
    assert _agent_texts(task) == ["update 0", "update 1"]


async def test_a_subscription_outlives_a_task_left_without_a_terminal_state(
    sdk_proxy: CuttingProxy,
) -> None:
    """SDK 1.3: a subscription stays open once the executor returns without ending the task.

    (A streamed message's stream ends then; see above.) The test shows the stream still open
    after the last event, and a cut as the way to end it.
    """
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient(timeout=10) as client:
            task_id = await start_task(client, sdk_proxy.url, gate=True, updates=2, end="none")
            async with subscribed(client, sdk_proxy.url, task_id) as results:
                assert kind(await anext(results)) == "task"
                await open_gate(client, sdk_proxy.url, task_id)
                reader = Reader(results)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(reader.read)
                    await reader.wait_for_text("update 1")
                    # The observation window: the stream must still be open after it.
                    await anyio.sleep(0.5)
                    assert not reader.ended.is_set(), reader.frames
                    sdk_proxy.cut()
                    await reader.ended.wait()
    assert isinstance(reader.error, httpx.TransportError)
    seen = [text_of(frame) for frame in reader.frames]
    assert [text for text in seen if text is not None] == ["update 0", "update 1"]


async def test_get_task_after_the_end_holds_every_chunk_and_message(
    sdk_proxy: CuttingProxy,
) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient(timeout=10) as client:
            task_id = await start_task(
                client, sdk_proxy.url, gate=True, updates=3, chunks=3, interval=0.01
            )
            await follow_after_gate(client, sdk_proxy.url, task_id)
            task = (await rpc(client, sdk_proxy.url, "GetTask", {"id": task_id}))["result"]
            # A terminal task cannot be subscribed to: a plain JSON-RPC error, no stream.
            again = await rpc(client, sdk_proxy.url, "SubscribeToTask", {"id": task_id})
    assert task["id"] == task_id
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [artifact["artifactId"] for artifact in task["artifacts"]] == ["result"]
    assert _texts(task["artifacts"][0]["parts"]) == ["chunk 0", "chunk 1", "chunk 2"]
    assert task["history"][0]["role"] == "ROLE_USER"
    assert _agent_texts(task) == ["update 0", "update 1", "update 2", "end completed"]
    assert again["error"]["code"] == -32004


async def test_a_quiet_task_streams_nothing_until_canceled(
    sdk_proxy: CuttingProxy, sdk_agent: SdkAgent
) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient(timeout=10) as client:
            task_id = await start_task(client, sdk_proxy.url, updates=0, hold=600)
            async with subscribed(client, sdk_proxy.url, task_id) as results:
                assert kind(await anext(results)) == "task"
                reader = Reader(results)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(reader.read)
                    # The observation window: a holding task streams nothing in it.
                    await anyio.sleep(0.5)
                    quiet = list(reader.frames)
                    canceled = await rpc(client, sdk_agent.url, "CancelTask", {"id": task_id})
                    await reader.ended.wait()
    assert reader.error is None
    # Only the start's bare working update may come before the cancel.
    assert [(state_of(f), text_of(f)) for f in quiet] in ([], [(WORKING, None)])
    rest = reader.frames[len(quiet) :]
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert [state_of(frame) for frame in rest] == ["TASK_STATE_CANCELED"]


async def test_the_v0_3_names_are_served_without_the_version_header(
    sdk_proxy: CuttingProxy,
) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient(timeout=10) as client:
            task_id = await start_task(client, sdk_proxy.url, gate=True, updates=1)
            unversioned = await rpc(client, sdk_proxy.url, "GetTask", {"id": task_id}, headers=None)
            request = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tasks/resubscribe",
                "params": {"id": task_id},
            }
            async with aconnect_sse(client, "POST", sdk_proxy.url + "/a2a", json=request) as source:
                frames = []
                async for event in source.aiter_sse():
                    frames.append(json.loads(event.data)["result"])
                    if len(frames) == 1:
                        await open_gate(client, sdk_proxy.url, task_id)
    # A 1.0 name without the header is taken as 0.3, which has no such method.
    assert unversioned["error"]["code"] == -32009
    assert frames[0]["kind"] == "task"
    assert frames[-1]["kind"] == "status-update"
    assert frames[-1]["status"]["state"] == "completed"
    assert frames[-1]["final"] is True


async def test_a_refusing_proxy_closes_new_connections(sdk_proxy: CuttingProxy) -> None:
    with anyio.fail_after(TEST_SECONDS):
        async with httpx.AsyncClient(timeout=10) as client:
            sdk_proxy.refuse(True)
            with pytest.raises(httpx.TransportError):
                await client.get(sdk_proxy.url + "/.well-known/agent-card.json")
            assert sdk_proxy.refused == 1
            sdk_proxy.refuse(False)
            card = (await client.get(sdk_proxy.url + "/.well-known/agent-card.json")).json()
    assert card["capabilities"]["streaming"] is True
    (interface,) = card["supportedInterfaces"]
    assert interface["protocolBinding"] == "JSONRPC"
    assert interface["protocolVersion"] == "1.0"
    assert sdk_proxy.connections == 2


def _texts(parts: list[dict[str, Any]]) -> list[str]:
    return [part["text"] for part in parts]


def _agent_texts(task: dict[str, Any]) -> list[str]:
    """The agent's messages in the task: its history's, then its status's (not yet history)."""
    messages = [m for m in task["history"] if m["role"] == "ROLE_AGENT"]
    if "message" in task["status"]:
        messages.append(task["status"]["message"])
    return [text for message in messages for text in _texts(message["parts"])]
