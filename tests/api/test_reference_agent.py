"""The reference agent (``follower.testing``), seen from the client side.

In-process tests run on virtual time: a task's progress is a function of the
clock, so ``anyio.sleep_until(sent_at + t)`` puts a read at a chosen instant of
the task's script; it orders nothing. Loopback tests serve the agent through
hypercorn on real sockets, on real time, under both backends.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

import follower._http._exchange as _exchange
from follower import (
    AgentRefusedError,
    AgentUnavailableError,
    LiveTurns,
    MalformedPageReason,
    MemoryStore,
    TaskNotFoundError,
    TrajectoryState,
    connect_agent,
    read_live_trajectory,
    run_a2a_turn,
)
from follower._format._wire import Page
from follower._http._exchange import read_page
from follower.lowlevel import (
    LiveTrajectoryChunks,
    TrajectoryBatch,
    follow_trajectory,
    live_trajectory_endpoint,
)
from follower.testing import (
    AgentStatistics,
    Fault,
    FaultKind,
    ReferenceAgent,
    TaskScript,
    serve_agent,
)

from ..support.malformed import raises_malformed
from ..support.stored import stored_turn
from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

BASE = "http://agent.test/"
ENDPOINT = "http://agent.test/ext/trajectory"
MIB = 1024 * 1024
# Loopback tests run on real time, on both backends.
REAL_TIME = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


# --- A2A helpers ----------------------------------------------------------------------------


class Body(httpx.AsyncByteStream):
    """A request body that is an iterator, not an async generator.

    httpx's own body is an async generator; when the agent closes the connection
    mid-request it is left half-read, which trio reports as a ResourceWarning.
    """

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def __aiter__(self) -> Body:
        return self

    async def __anext__(self) -> bytes:
        if self._data is None:
            raise StopAsyncIteration
        data, self._data = self._data, None
        return data


async def rpc(client: httpx.AsyncClient, method: str, params: Any, url: str = BASE) -> Any:
    request = client.build_request(
        "POST", url, json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    )
    request.stream = Body(request.read())
    answer = await client.send(request)
    assert answer.status_code == 200
    return answer.json()


def user_message(text: str = "run") -> dict[str, Any]:
    return {
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        "messageId": "m-1",
        "kind": "message",
    }


async def send_message(client: httpx.AsyncClient, url: str = BASE) -> dict[str, Any]:
    answer = await rpc(client, "message/send", {"message": user_message()}, url)
    task: dict[str, Any] = answer["result"]
    return task


@asynccontextmanager
async def client_and_task(
    agent: ReferenceAgent,
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, Any]]]:
    """A client of ``agent`` for the block, and a task started on it with ``message/send``."""
    async with agent.client() as client:
        yield client, await send_message(client)


async def follow_task(
    client: httpx.AsyncClient,
    task_id: str,
    sink: Any,
    *,
    stop: anyio.Event | None = None,
    poll_interval_seconds: float = 1.0,
    **options: Any,
) -> None:
    """``follow_trajectory`` of ``task_id`` at the agent's cursor read, until it ends."""
    await follow_trajectory(
        ENDPOINT,
        task_id,
        sink,
        poll_interval_seconds=poll_interval_seconds,
        stop=anyio.Event() if stop is None else stop,
        client=client,
        **options,
    )


async def get_task(client: httpx.AsyncClient, task_id: str, url: str = BASE) -> dict[str, Any]:
    task: dict[str, Any] = (await rpc(client, "tasks/get", {"id": task_id}, url))["result"]
    return task


async def wait_for_task(
    client: httpx.AsyncClient, task_id: str, url: str = BASE, poll: float = 0.25
) -> str:
    """Poll ``tasks/get`` until the task is terminal, as a step does; return its state."""
    while True:
        state: str = (await get_task(client, task_id, url))["status"]["state"]
        if state not in ("submitted", "working"):
            return state
        await anyio.sleep(poll)


async def read_to_end(
    client: httpx.AsyncClient, task_id: str, endpoint: str = ENDPOINT, poll: float = 0.25
) -> list[Any]:
    """Read every event by cursor until the last page, as a follower does."""
    events: list[Any] = []
    after = 0
    while True:
        page = await read_page(client, endpoint, task_id, after)
        assert page.after == after
        events.extend(page.events)
        after = page.next
        if page.last:
            return events
        if not page.has_more:
            await anyio.sleep(poll)


def indexes(events: list[Any]) -> list[int]:
    return [event["index"] for event in events]


async def stored_events(store: MemoryStore) -> list[Any]:
    """Turn 1's stored events, chunk after chunk, checking the chunks are contiguous."""
    return (await stored_turn(store, "steps/s1/", "turn-1")).events


async def post_read(client: httpx.AsyncClient, body: Any) -> httpx.Response:
    return await client.post(
        ENDPOINT, content=body if isinstance(body, bytes) else json.dumps(body)
    )


# --- the card -------------------------------------------------------------------------------


async def test_card_offers_the_cursor_read() -> None:
    with anyio.fail_after(10):
        async with ReferenceAgent().client() as client:
            card = (await client.get("/.well-known/agent-card.json")).json()
            legacy = (await client.get("/.well-known/agent.json")).json()
            refused = await client.post("/.well-known/agent-card.json")
    assert card == legacy
    assert card["url"] == BASE
    assert card["protocolVersion"] == "0.3.0"
    assert card["capabilities"]["streaming"] is True
    assert card["supportedInterfaces"] == [
        {"url": BASE, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert card["defaultInputModes"]
    assert card["defaultOutputModes"]
    assert card["skills"]
    assert live_trajectory_endpoint(card, card["url"]) == ENDPOINT
    assert refused.status_code == 405


async def test_card_names_a_configured_url() -> None:
    agent = ReferenceAgent(card_url="https://agents.example/a2a/")
    with anyio.fail_after(10):
        async with agent.client() as client:
            card = (await client.get("/.well-known/agent-card.json")).json()
    assert card["url"] == "https://agents.example/a2a/"
    assert live_trajectory_endpoint(card, card["url"]) == "https://agents.example/ext/trajectory"


# --- A2A ------------------------------------------------------------------------------------


async def test_task_answers_at_once_then_runs_to_its_outcome() -> None:
    script = TaskScript(events=4, interval_seconds=1.0, start_delay_seconds=0.5, outcome="failed")
    agent = ReferenceAgent(script=script)
    with anyio.fail_after(60):
        async with agent.client() as client:
            sent_at = anyio.current_time()
            task = await send_message(client)
            assert task["kind"] == "task"
            assert task["status"]["state"] == "submitted"
            assert task["history"][0]["parts"] == user_message()["parts"]
            assert task["history"][0]["taskId"] == task["id"]
            assert task["history"][0]["contextId"] == task["contextId"]
            await anyio.sleep_until(sent_at + 0.5)
            assert (await get_task(client, task["id"]))["status"]["state"] == "working"
            assert await wait_for_task(client, task["id"]) == "failed"
            assert anyio.current_time() - sent_at == pytest.approx(4.5, abs=0.25)
            done = await get_task(client, task["id"])
    assert done["status"]["message"]["role"] == "agent"
    assert done["id"] == task["id"]
    assert done["contextId"] == task["contextId"]


async def test_completed_task_carries_an_artifact() -> None:
    agent = ReferenceAgent(script=TaskScript(events=2, interval_seconds=0.0))
    with anyio.fail_after(10):
        async with client_and_task(agent) as (client, task):
            done = await get_task(client, task["id"])
    assert done["status"]["state"] == "completed"
    assert done["artifacts"][0]["parts"] == [{"kind": "text", "text": "2 events"}]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        pytest.param(b"{not json", -32700, id="parse-error"),
        pytest.param([{"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}], -32600, id="batch"),
        pytest.param({"jsonrpc": "1.0", "id": 1, "method": "tasks/get"}, -32600, id="version"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": "tasks/nap"}, -32601, id="method"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": "message/send"}, -32602, id="params"),
        pytest.param(
            {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {}}},
            -32602,
            id="message",
        ),
        pytest.param(
            {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "nope"}},
            -32001,
            id="task-not-found",
        ),
        pytest.param(
            {"jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": {"id": "nope"}},
            -32001,
            id="cancel-not-found",
        ),
        pytest.param(
            {"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard"},
            -32004,
            id="unsupported",
        ),
        pytest.param(
            {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}},
            -32009,
            id="v1-without-the-version-header",
        ),
    ],
)
async def test_json_rpc_errors(body: Any, code: int) -> None:
    with anyio.fail_after(10):
        async with ReferenceAgent().client() as client:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            answer = await client.post("/", content=content)
    assert answer.status_code == 200
    assert answer.json()["jsonrpc"] == "2.0"
    assert answer.json()["error"]["code"] == code


async def test_a_message_naming_a_running_task_joins_it() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=1.0))
    with anyio.fail_after(60):
        async with client_and_task(agent) as (client, task):
            more = {**user_message("more"), "messageId": "m-2", "taskId": task["id"]}
            joined = (await rpc(client, "message/send", {"message": more}))["result"]
            unknown = {**more, "taskId": "nope"}
            missing = await rpc(client, "message/send", {"message": unknown})
            await wait_for_task(client, task["id"])
            late = await rpc(client, "message/send", {"message": more})
            routes = [
                (await client.get("/")).status_code,
                (await client.get("/elsewhere")).status_code,
            ]
    assert joined["id"] == task["id"]
    assert [m["messageId"] for m in joined["history"]] == ["m-1", "m-2"]
    assert missing["error"]["code"] == -32001
    assert late["error"]["code"] == -32602
    assert routes == [405, 404]


async def test_cancel_seals_the_log() -> None:
    agent = ReferenceAgent(script=TaskScript(events=10, interval_seconds=1.0))
    with anyio.fail_after(60):
        async with agent.client() as client:
            sent_at = anyio.current_time()
            task = await send_message(client)
            await anyio.sleep_until(sent_at + 3.5)  # events 0..3 are out
            canceled = (await rpc(client, "tasks/cancel", {"id": task["id"]}))["result"]
            assert canceled["status"]["state"] == "canceled"
            await anyio.sleep_until(sent_at + 20)  # past the script's end
            assert await wait_for_task(client, task["id"]) == "canceled"
            events = await read_to_end(client, task["id"])
            page = await read_page(client, ENDPOINT, task["id"], 0)
            again = await rpc(client, "tasks/cancel", {"id": task["id"]})
    assert indexes(events) == [0, 1, 2, 3]
    assert page.state is TrajectoryState.CANCELED
    assert page.last
    assert again["error"]["code"] == -32002
    assert agent.statistics().canceled_tasks == 1


async def test_finished_task_is_not_cancelable() -> None:
    agent = ReferenceAgent(script=TaskScript(events=1, interval_seconds=1.0))
    with anyio.fail_after(60):
        async with client_and_task(agent) as (client, task):
            await wait_for_task(client, task["id"])
            answer = await rpc(client, "tasks/cancel", {"id": task["id"]})
    assert answer["error"]["code"] == -32002


# --- the cursor read ------------------------------------------------------------------------


async def test_every_event_read_once_in_order_by_cursor() -> None:
    script = TaskScript(events=12, interval_seconds=0.4, start_delay_seconds=1.0, format="x/v2")
    agent = ReferenceAgent(script=script)
    with anyio.fail_after(60):
        async with client_and_task(agent) as (client, task):
            first = await read_page(client, ENDPOINT, task["id"], 0)
            events = await read_to_end(client, task["id"])
            last = await read_page(client, ENDPOINT, task["id"], len(events))
    assert first.state is TrajectoryState.PENDING
    assert first.events == ()
    assert first.context_id == task["contextId"]
    assert first.format == "x/v2"
    assert indexes(events) == list(range(12))
    assert events[3] == script.event(3)
    assert last.state is TrajectoryState.COMPLETED
    assert last.last
    assert last.events == ()


async def test_follow_trajectory_stores_every_event() -> None:
    agent = ReferenceAgent(script=TaskScript(events=30, interval_seconds=0.1))
    store = MemoryStore()
    sink = LiveTrajectoryChunks(store, "steps/s1/", "turn-1")
    stop = anyio.Event()
    with anyio.fail_after(60):
        async with agent.client() as client, anyio.create_task_group() as tg:
            task = await send_message(client)
            tg.start_soon(
                lambda: follow_task(client, task["id"], sink, stop=stop, poll_interval_seconds=0.5)
            )
            await wait_for_task(client, task["id"])
            stop.set()
    assert sink.final_state is TrajectoryState.COMPLETED
    assert indexes(await stored_events(store)) == list(range(30))
    assert agent.statistics().reads > 2  # read while it ran, not only at the end


async def test_live_turns_store_a_trajectory_readers_read_back() -> None:
    agent = ReferenceAgent(script=TaskScript(events=8, interval_seconds=0.3))
    store = MemoryStore()
    with anyio.fail_after(60):
        async with (
            agent.client() as client,
            LiveTurns(
                ENDPOINT, store, "steps/s1/", poll_interval_seconds=0.5, client=client
            ) as turns,
            turns.following("turn-1") as turn,
        ):
            task = await send_message(client)
            turn.follow(task["id"])
            turn.ended(await wait_for_task(client, task["id"]))
        read = [stored.event async for stored in read_live_trajectory(store, "steps/s1/", "turn-1")]
    assert indexes(read) == list(range(8))


async def test_a_whole_a2a_turn_of_the_library_is_stored() -> None:
    agent = ReferenceAgent(script=TaskScript(events=15, interval_seconds=0.2))
    store = MemoryStore()
    with anyio.fail_after(600):
        async with agent.client() as client, connect_agent(BASE, client=client) as a2a:
            assert a2a.trajectory_endpoint == ENDPOINT
            async with LiveTurns(
                ENDPOINT, store, "steps/s1/", poll_interval_seconds=0.5, client=client
            ) as turns:
                final = await run_a2a_turn(a2a, turns, "turn-1", "run", task_poll_seconds=0.5)
        read = [stored.event async for stored in read_live_trajectory(store, "steps/s1/", "turn-1")]
    assert final.state == "completed"
    assert indexes(read) == list(range(15))


async def test_a_cancelled_step_cancels_the_agents_task() -> None:
    agent = ReferenceAgent(script=TaskScript(events=100, interval_seconds=1.0))
    store = MemoryStore()
    with anyio.fail_after(600):
        async with (
            agent.client() as client,
            connect_agent(BASE, client=client) as a2a,
            LiveTurns(
                ENDPOINT, store, "steps/s1/", poll_interval_seconds=0.5, client=client
            ) as turns,
        ):
            with anyio.move_on_after(5.25) as step:
                await run_a2a_turn(a2a, turns, "turn-1", "run", task_poll_seconds=0.5)
        end = json.loads(await store.get("steps/s1/turn-1/live/end.json"))
        stored = await stored_events(store)
    assert step.cancelled_caught
    assert agent.statistics().canceled_tasks == 1
    assert end == {"state": "canceled", "next": len(stored), "complete": False}
    assert indexes(stored) == list(range(6))  # events 0..5 were out by 5.25 s


async def test_a_read_holds_at_most_1000_events() -> None:
    agent = ReferenceAgent(script=TaskScript(events=2500, interval_seconds=0.0))
    with anyio.fail_after(10):
        async with client_and_task(agent) as (client, task):
            pages: list[Page] = []
            after = 0
            while not pages or pages[-1].has_more:
                pages.append(await read_page(client, ENDPOINT, task["id"], after))
                after = pages[-1].next
            limited = (
                await post_read(client, {"task_id": task["id"], "after": 5, "limit": 7})
            ).json()
    assert [len(page.events) for page in pages] == [1000, 1000, 500]
    assert [page.has_more for page in pages] == [True, True, False]
    assert indexes(list(limited["events"])) == list(range(5, 12))
    assert limited["next"] == 12
    assert limited["has_more"] is True


@pytest.fixture
def pages_decoded_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large pages decoded on the loop: a virtual clock jumps while a worker thread decodes."""
    monkeypatch.setattr(_exchange, "LARGE_PAGE_BYTES", 1 << 40)


@pytest.mark.usefixtures("pages_decoded_in_place")
async def test_a_read_holds_about_4_mib() -> None:
    agent = ReferenceAgent(script=TaskScript(events=7, interval_seconds=0.0, event_bytes=MIB))
    with anyio.fail_after(10):
        async with client_and_task(agent) as (client, task):
            answer = await post_read(client, {"task_id": task["id"], "after": 0})
            events = await read_to_end(client, task["id"])
    page = answer.json()
    assert len(page["events"]) == 3  # a fourth event would take the page over 4 MiB
    assert 3 * MIB < len(answer.content) <= 4 * MIB + 1024
    assert page["has_more"] is True
    assert indexes(events) == list(range(7))


@pytest.mark.usefixtures("pages_decoded_in_place")
async def test_a_read_holds_the_first_event_however_large() -> None:
    agent = ReferenceAgent(script=TaskScript(events=2, interval_seconds=0.0, event_bytes=5 * MIB))
    with anyio.fail_after(10):
        async with client_and_task(agent) as (client, task):
            first = await read_page(client, ENDPOINT, task["id"], 0)
            second = await read_page(client, ENDPOINT, task["id"], 1)
    assert (len(first.events), first.has_more) == (1, True)
    assert (len(second.events), second.last) == (1, True)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"{", id="not-json"),
        pytest.param([], id="not-an-object"),
        pytest.param({"after": 0}, id="no-task-id"),
        pytest.param({"task_id": "T", "after": -1}, id="negative-after"),
        pytest.param({"task_id": "T", "after": True}, id="bool-after"),
        pytest.param({"task_id": "T", "after": "0"}, id="string-after"),
        pytest.param({"task_id": "T", "after": 0, "limit": 0}, id="limit-0"),
        pytest.param({"task_id": "T", "after": 0, "limit": 1001}, id="limit-1001"),
        pytest.param({"task_id": "T", "after": 0, "cursor": 3}, id="unknown-field"),
        pytest.param({"task_id": "T", "after": 4}, id="past-the-end"),
    ],
)
async def test_bad_reads_answer_400(body: Any) -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0))
    with anyio.fail_after(10):
        async with client_and_task(agent) as (client, task):
            if isinstance(body, dict) and body.get("task_id") == "T":
                body = {**body, "task_id": task["id"]}
            answer = await post_read(client, body)
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("text/plain")


async def test_read_past_the_end_is_refused() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0))
    with anyio.fail_after(10):
        async with client_and_task(agent) as (client, task):
            with pytest.raises(AgentRefusedError) as refused:
                await read_page(client, ENDPOINT, task["id"], 4)
    assert refused.value.status_code == 400


async def test_unknown_task_answers_404() -> None:
    with anyio.fail_after(10):
        async with ReferenceAgent().client() as client:
            answer = await post_read(client, {"task_id": "nope", "after": 0})
            with pytest.raises(TaskNotFoundError):
                await read_page(client, ENDPOINT, "nope", 0)
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_other_methods_answer_405(method: str) -> None:
    with anyio.fail_after(10):
        async with ReferenceAgent().client() as client:
            answer = await client.request(method, ENDPOINT)
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"


# --- faults, in-process ---------------------------------------------------------------------


async def test_close_drops_every_connection_until_cleared() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0))
    with anyio.fail_after(10):
        async with client_and_task(agent) as (client, task):
            agent.fault = Fault.close()
            with pytest.raises(AgentUnavailableError) as failed:
                await read_page(client, ENDPOINT, task["id"], 0)
            with pytest.raises(httpx.RemoteProtocolError):
                await get_task(client, task["id"])
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get("/.well-known/agent-card.json")
            agent.fault = None
            page = await read_page(client, ENDPOINT, task["id"], 0)
    assert isinstance(failed.value.__cause__, httpx.RemoteProtocolError)
    assert agent.statistics().dropped_connections == 3
    assert page.last
    assert len(page.events) == 3


async def test_silent_never_answers() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0))
    with anyio.fail_after(60):
        async with client_and_task(agent) as (client, task):
            agent.fault = Fault.silent()
            started = anyio.current_time()
            with pytest.raises(AgentUnavailableError, match="took over"):
                await read_page(client, ENDPOINT, task["id"], 0, read_timeout_seconds=2.0)
            assert anyio.current_time() - started == pytest.approx(2.0)
            with anyio.move_on_after(5) as waited:
                await get_task(client, task["id"])
    assert waited.cancelled_caught
    assert agent.statistics().reads == 1


async def test_unavailable_for_some_reads_then_healthy() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0))
    with anyio.fail_after(10):
        async with client_and_task(agent) as (client, task):
            agent.fault = Fault.unavailable(reads=2, status=502)
            for _ in range(2):
                with pytest.raises(AgentUnavailableError, match="502"):
                    await read_page(client, ENDPOINT, task["id"], 0)
            page = await read_page(client, ENDPOINT, task["id"], 0)
    assert page.last


async def test_unavailable_for_a_while_is_outwaited_by_the_follower() -> None:
    agent = ReferenceAgent(script=TaskScript(events=20, interval_seconds=0.5))
    agent.fault = Fault.unavailable(seconds=12.0)
    store = MemoryStore()
    sink = LiveTrajectoryChunks(store, "steps/s1/", "turn-1")
    with anyio.fail_after(600):
        async with client_and_task(agent) as (client, task):
            started = anyio.current_time()
            with pytest.raises(AgentUnavailableError):
                await read_page(client, ENDPOINT, task["id"], 0)
            await follow_task(client, task["id"], sink)
    assert anyio.current_time() - started >= 12.0
    assert indexes(await stored_events(store)) == list(range(20))


MALFORMED = [
    pytest.param(Fault.not_json(), MalformedPageReason.NOT_AN_OBJECT, id="not-json"),
    pytest.param(Fault.not_an_object(), MalformedPageReason.NOT_AN_OBJECT, id="not-an-object"),
    pytest.param(Fault.missing_field(), MalformedPageReason.BAD_FIELD, id="missing-next"),
    pytest.param(Fault.missing_field("state"), MalformedPageReason.BAD_FIELD, id="missing-state"),
    pytest.param(Fault.unknown_state(), MalformedPageReason.UNKNOWN_STATE, id="unknown-state"),
    pytest.param(
        Fault.cursor_mismatch(), MalformedPageReason.CURSOR_MISMATCH, id="cursor-mismatch"
    ),
    pytest.param(Fault.other_task(), MalformedPageReason.TASK_MISMATCH, id="other-task"),
    pytest.param(Fault.no_progress(), MalformedPageReason.NO_PROGRESS, id="no-progress"),
    pytest.param(Fault.oversized(size_bytes=20_000), MalformedPageReason.TOO_LARGE, id="oversized"),
]


@pytest.mark.parametrize(("fault", "reason"), MALFORMED)
async def test_malformed_pages(fault: Fault, reason: MalformedPageReason) -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0), fault=fault)
    batches: list[TrajectoryBatch] = []

    async def sink(batch: TrajectoryBatch) -> None:
        batches.append(batch)

    with anyio.fail_after(60):
        async with client_and_task(agent) as (client, task):
            with raises_malformed(reason):
                await read_page(client, ENDPOINT, task["id"], 0, max_page_bytes=10_000)
            with raises_malformed(reason):
                await follow_task(client, task["id"], sink, max_page_bytes=10_000)
            agent.fault = None
            healthy = await read_page(client, ENDPOINT, task["id"], 0, max_page_bytes=10_000)
    assert batches == []
    assert healthy.last
    assert len(healthy.events) == 3


async def test_oversized_page_is_otherwise_valid() -> None:
    agent = ReferenceAgent(
        script=TaskScript(events=3, interval_seconds=0.0), fault=Fault.oversized(size_bytes=50_000)
    )
    with anyio.fail_after(10):
        async with client_and_task(agent) as (client, task):
            answer = await post_read(client, {"task_id": task["id"], "after": 0})
            page = await read_page(client, ENDPOINT, task["id"], 0)
    assert len(answer.content) == 50_000
    assert page.last
    assert indexes(list(page.events)) == [0, 1, 2]


async def test_gone_mid_turn_ends_following_after_stop() -> None:
    agent = ReferenceAgent(script=TaskScript(events=10, interval_seconds=1.0), fault=Fault.gone(3))
    store = MemoryStore()
    sink = LiveTrajectoryChunks(store, "steps/s1/", "turn-1")
    stop = anyio.Event()
    with anyio.fail_after(600):
        async with agent.client() as client, anyio.create_task_group() as tg:
            sent_at = anyio.current_time()
            task = await send_message(client)
            tg.start_soon(
                lambda: follow_task(client, task["id"], sink, stop=stop, poll_interval_seconds=0.5)
            )
            # At 3 s the agent goes; at 4 s the follower is in its backoff after a failed read.
            await anyio.sleep_until(sent_at + 4.0)
            with pytest.raises(httpx.RemoteProtocolError):
                await get_task(client, task["id"])
            stop.set()
        stopped_at = anyio.current_time()
    assert stopped_at - sent_at == pytest.approx(4.0)  # the failed read after stop ended it
    assert indexes(await stored_events(store)) == [0, 1, 2]
    assert agent.statistics().dropped_connections >= 3


async def test_restart_forgets_every_task() -> None:
    agent = ReferenceAgent(script=TaskScript(events=5, interval_seconds=1.0))
    with anyio.fail_after(60):
        async with agent.client() as client:
            old = await send_message(client)
            await read_page(client, ENDPOINT, old["id"], 0)
            agent.fault = Fault.restart()
            with pytest.raises(TaskNotFoundError):
                await read_page(client, ENDPOINT, old["id"], 0)
            lookup = await rpc(client, "tasks/get", {"id": old["id"]})
            await follow_task(client, old["id"], _discard)  # a 404 ends following quietly
            new = await send_message(client)
            events = await read_to_end(client, new["id"])
    assert lookup["error"]["code"] == -32001
    assert indexes(events) == list(range(5))


async def _discard(batch: TrajectoryBatch) -> None:
    raise AssertionError(f"no batch expected, got {batch}")


async def test_slow_reads_take_their_time() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0), fault=Fault.slow(4.0))
    with anyio.fail_after(60):
        async with client_and_task(agent) as (client, task):
            with pytest.raises(AgentUnavailableError):
                await read_page(client, ENDPOINT, task["id"], 0, read_timeout_seconds=1.0)
            started = anyio.current_time()
            page = await read_page(client, ENDPOINT, task["id"], 0, read_timeout_seconds=10.0)
            took = anyio.current_time() - started
    assert took == pytest.approx(4.0)
    assert page.last
    assert agent.statistics() == AgentStatistics(
        tasks=1, reads=2, rpc_calls=1, dropped_connections=0, canceled_tasks=0
    )


async def test_wait_reads_orders_on_what_the_agent_saw() -> None:
    agent = ReferenceAgent(script=TaskScript(events=100, interval_seconds=1.0))
    stop = anyio.Event()
    with anyio.fail_after(600):
        async with agent.client() as client, anyio.create_task_group() as tg:
            task = await send_message(client)
            tg.start_soon(
                lambda: follow_task(
                    client, task["id"], _ignore, stop=stop, poll_interval_seconds=2.0
                )
            )
            await agent.wait_reads(3)
            assert agent.statistics().reads == 3
            tg.cancel_scope.cancel()


async def _ignore(batch: TrajectoryBatch) -> None:
    pass


def test_fault_parameters_are_checked() -> None:
    assert Fault.unavailable(reads=2) == Fault(FaultKind.UNAVAILABLE, reads=2, status=503)
    with pytest.raises(ValueError, match="not both"):
        Fault.unavailable(reads=2, seconds=1.0)
    with pytest.raises(ValueError, match="5xx"):
        Fault.unavailable(status=404)
    with pytest.raises(ValueError, match="takes no"):
        Fault(FaultKind.CLOSE, seconds=1.0)
    with pytest.raises(ValueError, match="SLOW needs"):
        Fault(FaultKind.SLOW)
    with pytest.raises(ValueError, match="GONE needs"):
        Fault(FaultKind.GONE)
    with pytest.raises(ValueError, match="no field"):
        Fault.missing_field("nope")
    with pytest.raises(ValueError, match="outcome"):
        TaskScript(outcome="paused")


def test_script_timeline() -> None:
    script = TaskScript(events=3, interval_seconds=1.0, start_delay_seconds=2.0)
    seen = [script.visible_at(t / 2) for t in range(12)]
    assert seen == [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 3]
    assert script.duration_seconds == 5.0
    assert not script.finished_by(4.9)
    assert script.finished_by(5.0)


# --- on a loopback socket -------------------------------------------------------------------


@REAL_TIME
async def test_served_on_loopback_and_stopped_by_cancel() -> None:
    agent = ReferenceAgent(script=TaskScript(events=6, interval_seconds=0.01))
    store = MemoryStore()
    sink = LiveTrajectoryChunks(store, "steps/s1/", "turn-1")
    with anyio.fail_after(10):
        async with httpx.AsyncClient() as client, anyio.create_task_group() as tg:
            url = await tg.start(serve_agent, agent)
            assert url.startswith("http://127.0.0.1:")
            assert url.endswith("/")
            card = (await client.get(url + ".well-known/agent-card.json")).json()
            endpoint = live_trajectory_endpoint(card, card["url"])
            assert endpoint is not None
            assert card["url"] == url
            assert endpoint == url + "ext/trajectory"
            task = await send_message(client, url)
            await follow_trajectory(
                endpoint,
                task["id"],
                sink,
                poll_interval_seconds=0.02,
                stop=anyio.Event(),
                client=client,
            )
            assert await wait_for_task(client, task["id"], url) == "completed"
            # A read left hanging must not hold the server up.
            agent.fault = Fault.silent()
            reads = agent.statistics().reads
            tg.start_soon(lambda: client.post(endpoint, json={"task_id": task["id"], "after": 0}))
            await agent.wait_reads(reads + 1)
            tg.cancel_scope.cancel()
            cancelled_at = anyio.current_time()
        assert anyio.current_time() - cancelled_at < 1.0
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(url + ".well-known/agent-card.json")
    assert indexes(await stored_events(store)) == list(range(6))


@REAL_TIME
async def test_loopback_close_and_silent() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0))
    with anyio.fail_after(10):
        async with httpx.AsyncClient() as client, anyio.create_task_group() as tg:
            url = await tg.start(serve_agent, agent)
            endpoint = url + "ext/trajectory"
            task = await send_message(client, url)  # the connection stays open (keep-alive)
            agent.fault = Fault.close()
            with pytest.raises(AgentUnavailableError):
                await read_page(client, endpoint, task["id"], 0)
            with pytest.raises(httpx.TransportError):
                await get_task(client, task["id"], url)
            agent.fault = Fault.silent()
            with pytest.raises(AgentUnavailableError, match="took over"):
                await read_page(client, endpoint, task["id"], 0, read_timeout_seconds=0.2)
            agent.fault = None
            page = await read_page(client, endpoint, task["id"], 0)
            tg.cancel_scope.cancel()
    assert page.last
    assert len(page.events) == 3
    assert agent.statistics().dropped_connections >= 2


@REAL_TIME
async def test_loopback_gone_closes_every_later_connection() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0), fault=Fault.gone(0))
    with anyio.fail_after(10):
        async with httpx.AsyncClient() as client, anyio.create_task_group() as tg:
            url = await tg.start(serve_agent, agent)
            task = await send_message(client, url)  # the agent goes as the task starts
            with pytest.raises(AgentUnavailableError):
                await read_page(client, url + "ext/trajectory", task["id"], 0)
            async with httpx.AsyncClient() as fresh:
                with pytest.raises(httpx.TransportError):
                    await fresh.get(url + ".well-known/agent-card.json")
            tg.cancel_scope.cancel()


@REAL_TIME
async def test_request_log_says_when_each_request_came_and_how_it_was_answered() -> None:
    agent = ReferenceAgent(script=TaskScript(events=3, interval_seconds=0.0), log_requests=True)
    with anyio.fail_after(10):
        async with httpx.AsyncClient() as client, anyio.create_task_group() as tg:
            url = await tg.start(serve_agent, agent)
            endpoint = url + "ext/trajectory"
            task = await send_message(client, url)
            await read_page(client, endpoint, task["id"], 0)
            agent.fault = Fault.unavailable()
            with pytest.raises(AgentUnavailableError):
                await read_page(client, endpoint, task["id"], 0)
            agent.fault = Fault.close()
            with pytest.raises(AgentUnavailableError):
                await read_page(client, endpoint, task["id"], 0)
            agent.fault = Fault.silent()
            before_silent = anyio.current_time()
            tg.start_soon(lambda: client.post(endpoint, json={"task_id": task["id"], "after": 0}))
            await agent.wait_requests(5)
            log = agent.request_log()
            tg.cancel_scope.cancel()
    assert [(r.path, r.status) for r in log] == [
        ("/", 200),
        ("/ext/trajectory", 200),
        ("/ext/trajectory", 503),
        (None, None),  # dropped: whatever it carried never reached the agent
        ("/ext/trajectory", None),  # silent: never answered
    ]
    times = [r.at for r in log]
    assert times == sorted(times)
    assert times[-1] >= before_silent


_BODY = json.dumps({"task_id": "no-such-task", "after": 0}).encode()
# A cursor read the agent answers 404, sent as raw bytes: nothing but the send yields.
LOGGED_REQUEST = (
    b"POST /ext/trajectory HTTP/1.1\r\nhost: agent\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_BODY), _BODY)
)


@asynccontextmanager
async def served_port(agent: ReferenceAgent) -> AsyncIterator[int]:
    """``agent`` served on loopback for the block: its port."""
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            port = urlsplit(await tg.start(serve_agent, agent)).port
            assert port is not None
            yield port
            tg.cancel_scope.cancel()


@REAL_TIME
async def test_once_quiet_every_request_sent_is_in_the_log() -> None:
    # Each request is sent with no checkpoint after it: on asyncio it is still in the
    # front's socket, unpolled, when every task already counts as blocked, so
    # ``anyio.wait_all_tasks_blocked()`` alone returns before the agent logged it.
    agent = ReferenceAgent(log_requests=True)
    async with served_port(agent) as port:
        async with await anyio.connect_tcp("127.0.0.1", port) as kept_alive:
            for sent in (1, 2, 3):
                await kept_alive.send(LOGGED_REQUEST)
                await agent.wait_quiet()
                assert len(agent.request_log()) == sent
        for sent in (4, 5):  # each on a new connection, waiting to be accepted
            async with await anyio.connect_tcp("127.0.0.1", port) as fresh:
                await fresh.send(LOGGED_REQUEST)
                await agent.wait_quiet()
                assert len(agent.request_log()) == sent
    assert {(r.path, r.status) for r in agent.request_log()} == {("/ext/trajectory", 404)}


@REAL_TIME
@pytest.mark.parametrize("connection", ["kept alive", "new"])
@pytest.mark.parametrize("after_wait", [1, 2])
async def test_a_request_sent_as_the_agent_looks_is_in_the_log(
    connection: str, after_wait: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client sends just after one of the agent's waits for blocked tasks returned,
    # in the same turn of the loop, so no task has run since. After the first, the
    # request moves on while the agent looks again; after the second, its last, only
    # the bytes in the front's socket (or the connection in its listener's backlog)
    # say that one is on its way.
    agent = ReferenceAgent(log_requests=True)
    async with served_port(agent) as port:
        kept_alive = socket.create_connection(("127.0.0.1", port))
        fresh = socket.socket()
        waits = 0
        real_wait = anyio.wait_all_tasks_blocked

        async def wait_then_send() -> None:
            nonlocal waits
            await real_wait()
            waits += 1
            if waits == after_wait:  # of the agent's first look
                if connection == "kept alive":
                    kept_alive.sendall(LOGGED_REQUEST)
                else:
                    fresh.connect(("127.0.0.1", port))
                    fresh.sendall(LOGGED_REQUEST)

        with kept_alive, fresh:
            await agent.wait_quiet()  # the connection is accepted and relayed first
            monkeypatch.setattr(anyio, "wait_all_tasks_blocked", wait_then_send)
            await agent.wait_quiet()
            assert waits > 2  # it looked again
            assert len(agent.request_log()) == 1


@REAL_TIME
async def test_a_connection_reset_before_it_is_taken_in_leaves_the_agent_serving() -> None:
    agent = ReferenceAgent(log_requests=True)
    async with served_port(agent) as port, httpx.AsyncClient() as client:
        gone = socket.create_connection(("127.0.0.1", port))
        # Closed with a reset while it waits in the listener's queue: no turn of the loop
        # has run since it connected.
        gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone.close()
        answer = await client.post(
            f"http://127.0.0.1:{port}/ext/trajectory", json={"task_id": "none", "after": 0}
        )
        assert answer.status_code == 404
        await agent.wait_quiet()
    assert [(r.path, r.status) for r in agent.request_log()] == [("/ext/trajectory", 404)]


async def test_request_log_is_kept_only_when_asked_for() -> None:
    agent = ReferenceAgent()
    async with agent.client() as client:
        await send_message(client)
    with pytest.raises(ValueError, match="log_requests"):
        agent.request_log()
    with pytest.raises(ValueError, match="log_requests"):
        await agent.wait_requests(1)


def test_the_served_agent_answers_without_waiting_for_delayed_acks() -> None:
    # Accepted connections inherit the listening socket's TCP_NODELAY (Linux, macOS).
    from follower.testing._serve import upstream_socket

    upstream = upstream_socket()
    with upstream:
        assert upstream.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
