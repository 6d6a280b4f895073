"""The reference agent's streams (``follower.testing``): its tasks as server-sent events.

In-process tests run on virtual time (the stream waits on the clock between frames, so a
task's whole run takes no real time); loopback tests serve the agent through hypercorn on
real sockets, on real time, under both backends. What is asserted is what the agent
promises: every event once, in order, between the snapshot and the terminal state.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from follower.testing import Fault, ReferenceAgent, TaskScript, serve_agent

from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

V1 = {"A2A-Version": "1.0"}
REAL_TIME = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


def message_v1(text: str = "run") -> dict[str, Any]:
    return {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]}


async def rpc_v1(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> Any:
    answer = await client.post("/", json=request(method, params), headers=V1)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    return answer.json()


async def send_v1(client: httpx.AsyncClient) -> dict[str, Any]:
    params = {"message": message_v1(), "configuration": {"returnImmediately": True}}
    task: dict[str, Any] = (await rpc_v1(client, "SendMessage", params))["result"]["task"]
    return task


@asynccontextmanager
async def stream(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str] | None = V1,
) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
    """The ``result`` of each frame of a streamed call, read as SSE by hand."""
    body = request(method, params)
    async with client.stream("POST", "/", json=body, headers=headers) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "text/event-stream"

        async def results() -> AsyncIterator[dict[str, Any]]:
            async for line in answer.aiter_lines():
                if line.startswith("data: "):
                    frame = json.loads(line.removeprefix("data: "))
                    assert frame["id"] == 7
                    assert frame["jsonrpc"] == "2.0"
                    yield frame["result"]

        yield results()


async def read_all(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> list[Any]:
    async with stream(client, method, params) as results:
        return [result async for result in results]


def event_indexes(messages: list[dict[str, Any]]) -> list[int]:
    """The trajectory events that agent messages carry, as their indexes."""
    return [
        part["data"]["index"]
        for message in messages
        if message["role"] == "ROLE_AGENT"
        for part in message["parts"]
        if "data" in part
    ]


def snapshot_events(task: dict[str, Any]) -> list[int]:
    """The events a 1.0 task shows: its history's, then its status message's."""
    messages = list(task["history"])
    if "message" in task["status"]:
        messages.append(task["status"]["message"])
    return event_indexes(messages)


def update_events(results: list[dict[str, Any]]) -> list[int]:
    """The trajectory events that status updates carry, as their indexes."""
    statuses = [r["statusUpdate"]["status"] for r in results if "statusUpdate" in r]
    return event_indexes([status["message"] for status in statuses if "message" in status])


# --- in-process, virtual time ---------------------------------------------------------------


async def test_a_subscription_shows_every_event_once_in_order_then_ends() -> None:
    agent = ReferenceAgent(script=TaskScript(events=6, interval_seconds=1.0))
    with anyio.fail_after(60):
        async with agent.client() as client:
            sent_at = anyio.current_time()
            task = await send_v1(client)
            await anyio.sleep_until(sent_at + 2.5)  # a point in the script: events 0..2 made
            results = await read_all(client, "SubscribeToTask", {"id": task["id"]})
            ended_at = anyio.current_time()
            done = (await rpc_v1(client, "GetTask", {"id": task["id"]}))["result"]
    snapshot = results[0]["task"]
    assert snapshot["id"] == task["id"]
    assert snapshot["status"]["state"] == "TASK_STATE_WORKING"
    assert snapshot_events(snapshot) == [0, 1, 2]
    updates = results[1:-2]
    assert all(u["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING" for u in updates)
    assert update_events(updates) == [3, 4, 5]
    assert results[-2]["artifactUpdate"]["artifact"]["parts"] == [{"text": "6 events"}]
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert results[-1]["statusUpdate"]["taskId"] == task["id"]
    assert ended_at == pytest.approx(sent_at + 6.0)
    # Afterwards the task tells its whole trajectory: the user's message, then every event.
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["history"][0]["role"] == "ROLE_USER"
    assert snapshot_events(done) == [0, 1, 2, 3, 4, 5]
    assert agent.statistics().streams == 1


async def test_a_streamed_message_sends_every_event_as_an_update() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=1.0, outcome="failed"))
    with anyio.fail_after(60):
        async with agent.client() as client:
            results = await read_all(client, "SendStreamingMessage", {"message": message_v1()})
    snapshot = results[0]["task"]
    assert snapshot["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert snapshot_events(snapshot) == []
    assert update_events(results[1:-1]) == [0, 1, 2]
    final = results[-1]["statusUpdate"]["status"]
    assert final["state"] == "TASK_STATE_FAILED"
    assert final["message"]["role"] == "ROLE_AGENT"
    assert agent.statistics().streams == 1


async def test_the_0_3_resubscription_speaks_0_3() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=1.0))
    with anyio.fail_after(60):
        async with agent.client() as client:
            sent = {
                "role": "user",
                "parts": [{"kind": "text", "text": "run"}],
                "messageId": "m-1",
                "kind": "message",
            }
            answer = await client.post("/", json=request("message/send", {"message": sent}))
            task = answer.json()["result"]
            async with stream(client, "tasks/resubscribe", {"id": task["id"]}, None) as results:
                frames = [result async for result in results]
    assert frames[0]["kind"] == "task"
    updates = [f for f in frames[1:] if f["kind"] == "status-update"]
    assert [u["status"]["message"]["parts"][0]["data"]["index"] for u in updates[:-1]] == [1, 2]
    assert all(u["status"]["state"] == "working" and not u["final"] for u in updates[:-1])
    assert updates[-1]["status"]["state"] == "completed"
    assert updates[-1]["final"] is True
    assert [f["kind"] for f in frames[-2:]] == ["artifact-update", "status-update"]


async def test_cancel_ends_an_open_stream_at_once() -> None:
    agent = ReferenceAgent(script=TaskScript(events=100, interval_seconds=1.0))
    with anyio.fail_after(600):
        async with agent.client() as client:
            task = await send_v1(client)
            async with stream(client, "SubscribeToTask", {"id": task["id"]}) as results:
                assert "task" in await anext(results)
                first = await anext(results)
                canceled_at = anyio.current_time()
                canceled = await rpc_v1(client, "CancelTask", {"id": task["id"]})
                rest = [result async for result in results]
            ended_at = anyio.current_time()
    assert update_events([first]) == [1]
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert [r["statusUpdate"]["status"]["state"] for r in rest] == ["TASK_STATE_CANCELED"]
    assert ended_at == pytest.approx(canceled_at)


@pytest.mark.parametrize("fault", [Fault.close(), Fault.restart()], ids=["close", "restart"])
async def test_a_connection_fault_cuts_an_open_stream(fault: Fault) -> None:
    agent = ReferenceAgent(script=TaskScript(events=100, interval_seconds=1.0))
    with anyio.fail_after(600):
        async with agent.client() as client:
            task = await send_v1(client)
            async with stream(client, "SubscribeToTask", {"id": task["id"]}) as results:
                assert "task" in await anext(results)
                await anext(results)
                agent.fault = fault
                with pytest.raises(httpx.RemoteProtocolError):
                    await anext(results)
    assert agent.statistics().dropped_connections == (fault.kind.value == "close")


async def test_a_gone_agent_cuts_streams_when_it_goes() -> None:
    agent = ReferenceAgent(
        script=TaskScript(events=10, interval_seconds=1.0), fault=Fault.gone(after_events=4)
    )
    with anyio.fail_after(600):
        async with agent.client() as client:
            task = await send_v1(client)
            seen: list[dict[str, Any]] = []
            async with stream(client, "SubscribeToTask", {"id": task["id"]}) as results:
                with pytest.raises(httpx.RemoteProtocolError):
                    async for result in results:
                        seen.append(result)
    assert update_events(seen[1:]) == [1, 2, 3]
    assert agent.statistics().dropped_connections == 1


async def test_the_stream_errors_are_plain_json_rpc_errors() -> None:
    agent = ReferenceAgent(script=TaskScript(events=1, interval_seconds=0.0))
    with anyio.fail_after(60):
        async with agent.client() as client:
            task = await send_v1(client)
            ended = await rpc_v1(client, "SubscribeToTask", {"id": task["id"]})
            unknown = await rpc_v1(client, "SubscribeToTask", {"id": "nope"})
            no_header = await client.post("/", json=request("SubscribeToTask", {"id": "nope"}))
    assert ended["error"]["code"] == -32004
    assert unknown["error"]["code"] == -32001
    assert no_header.headers["content-type"] == "application/json"
    assert no_header.json()["error"]["code"] == -32009
    assert agent.statistics().streams == 0


async def test_v1_methods_speak_v1() -> None:
    agent = ReferenceAgent(script=TaskScript(events=2, interval_seconds=1.0))
    with anyio.fail_after(60):
        async with agent.client() as client:
            task = await send_v1(client)
            got = (await rpc_v1(client, "GetTask", {"id": task["id"]}))["result"]
            canceled = (await rpc_v1(client, "CancelTask", {"id": task["id"]}))["result"]
            again = await rpc_v1(client, "CancelTask", {"id": task["id"]})
    assert "kind" not in task
    assert task["history"][0] == {
        **message_v1(),
        "taskId": task["id"],
        "contextId": task["contextId"],
    }
    assert got["status"]["state"] == "TASK_STATE_WORKING"
    assert snapshot_events(got) == [0]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert again["error"]["code"] == -32002


# --- on a loopback socket, real time --------------------------------------------------------


@REAL_TIME
async def test_a_served_agent_streams_and_its_faults_cut_streams() -> None:
    agent = ReferenceAgent(script=TaskScript(events=5, interval_seconds=0.02))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            url = await tg.start(serve_agent, agent)
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                results = await read_all(client, "SendStreamingMessage", {"message": message_v1()})
                agent.script = TaskScript(events=1000, interval_seconds=0.02)
                task = await send_v1(client)
                async with stream(client, "SubscribeToTask", {"id": task["id"]}) as cut:
                    assert "task" in await anext(cut)
                    agent.fault = Fault.close()
                    with pytest.raises(httpx.TransportError):
                        async for _ in cut:
                            pass
                agent.fault = None
                await rpc_v1(client, "CancelTask", {"id": task["id"]})
            tg.cancel_scope.cancel()
    assert update_events(results[1:-2]) == [0, 1, 2, 3, 4]
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    stats = agent.statistics()
    assert stats.streams == 2
    assert stats.dropped_connections >= 1


@REAL_TIME
async def test_an_agent_serves_on_after_a_client_leaves_its_stream() -> None:
    agent = ReferenceAgent(script=TaskScript(events=100_000, interval_seconds=0.01))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            url = await tg.start(serve_agent, agent)
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                task = await send_v1(client)
                async with stream(client, "SubscribeToTask", {"id": task["id"]}) as results:
                    assert "task" in await anext(results)
                    await anext(results)
                # Left: the agent still answers, and the serving stops at once.
                got = await rpc_v1(client, "GetTask", {"id": task["id"]})
            tg.cancel_scope.cancel()
    assert got["result"]["status"]["state"] == "TASK_STATE_WORKING"
