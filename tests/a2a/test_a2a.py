"""The library's A2A client: finding the card, JSON-RPC answers, waiting for a task, a turn.

The reference agent plays a real agent; ``FakeAgent`` (an ``httpx.MockTransport``) gives
the answers it cannot: malformed JSON-RPC, scripted failures, calls that never answer.
All in-process, so on virtual time: deadlines cost nothing and clock readings are exact.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from unittest.mock import ANY

import anyio
import attrs
import httpx
import pytest

from follower import (
    A2AAgent,
    A2AProtocolError,
    AgentCardError,
    AgentRefusedError,
    AgentUnavailableError,
    InvalidArgumentError,
    LiveTurns,
    MemoryStore,
    TaskNotFoundError,
    TaskTimeoutError,
    TurnExistsError,
    connect_agent,
    follow_a2a_task,
    run_a2a_turn,
)
from follower._a2a._client import CANCEL_TASK_SECONDS
from follower._a2a._turn import Message, TaskWait, _following, a2a_turn
from follower.testing import ReferenceAgent, TaskScript

from ..support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

BASE = "http://agent.test/"
FAKE = "http://fake.test/"
ENDPOINT = BASE + "ext/trajectory"
CARD_PATH = "/.well-known/agent-card.json"
UNDER, ROOT = FAKE + "agents/a" + CARD_PATH, FAKE + CARD_PATH[1:]
# A task that outlives every deadline below.
LONG = TaskScript(events=1000, interval_seconds=1.0)
TEST_SECONDS = 600  # virtual


@pytest.fixture(params=virtual_time_backends(), scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


# --- a fake of the agent's HTTP answers -----------------------------------------------------

HANG = object()
"""An answer that never comes."""


def task(state: str) -> dict[str, Any]:
    return {"kind": "task", "id": "t-1", "contextId": "c-1", "status": {"state": state}}


def ok(answer: Any) -> httpx.Response:
    return httpx.Response(200, json=answer)


def result(value: Any) -> httpx.Response:
    return ok({"jsonrpc": "2.0", "id": "1", "result": value})


def rpc_error(code: int) -> httpx.Response:
    return ok({"jsonrpc": "2.0", "id": "1", "error": {"code": code, "message": "no"}})


@attrs.define
class FakeAgent:
    """Cards by path (404 elsewhere); JSON-RPC answers by method, in order, the last repeated.

    ``calls`` holds each JSON-RPC call's method, params and time since ``client()``.
    """

    answers: dict[str, list[Any]] = attrs.field(factory=dict)
    cards: dict[str, httpx.Response] = attrs.field(factory=dict)
    gets: list[str] = attrs.field(factory=list)
    calls: list[tuple[str, Any, float]] = attrs.field(factory=list)
    start: float = 0.0

    @property
    def methods(self) -> list[str]:
        return [method for method, _, _ in self.calls]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            self.gets.append(str(request.url))
            return self.cards.get(request.url.path, httpx.Response(404, text="not found"))
        body = json.loads(request.content)
        self.calls.append((body["method"], body["params"], anyio.current_time() - self.start))
        queue = self.answers[body["method"]]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if answer is HANG:
            await anyio.sleep_forever()
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, httpx.Response)
        return answer

    def client(self) -> httpx.AsyncClient:
        self.start = anyio.current_time()
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle))

    @asynccontextmanager
    async def agent(self, timeout_seconds: float = 10.0) -> AsyncIterator[A2AAgent]:
        async with self.client() as client:
            yield A2AAgent._create(FAKE, {}, client, timeout_seconds=timeout_seconds)


# --- finding the card -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("named", "rpc_url"),
    [
        ("/a2a", FAKE + "a2a"),
        ("rpc", FAKE + "agents/a/.well-known/rpc"),
        (None, FAKE + "agents/a/"),
    ],
)
async def test_a_card_under_the_url_comes_first_and_its_url_is_resolved_against_it(
    named: str | None, rpc_url: str
) -> None:
    card = {"name": "a", "url": named} if named else {"name": "a"}
    fake = FakeAgent(cards={"/agents/a" + CARD_PATH: ok(card), CARD_PATH: ok({})})
    with anyio.fail_after(TEST_SECONDS):
        async with fake.client() as client, connect_agent(FAKE + "agents/a/", client=client) as a2a:
            assert (a2a.card, a2a.url) == (card, rpc_url)
    assert fake.gets == [UNDER]


async def test_the_card_is_looked_for_at_the_origins_root_next() -> None:
    agent = ReferenceAgent()
    asked: list[str] = []

    async def note(request: httpx.Request) -> None:
        asked.append(str(request.url))

    with anyio.fail_after(TEST_SECONDS):
        async with (
            agent.client(event_hooks={"request": [note]}) as client,
            connect_agent(BASE + "agents/a", client=client) as a2a,
        ):
            started = await a2a.send_message("run", context_id="c-9")
    assert asked[:2] == [BASE + "agents/a" + CARD_PATH, BASE + CARD_PATH[1:]]
    assert a2a.url == BASE  # what the card names, at the origin it was read at
    assert a2a.trajectory_endpoint == ENDPOINT
    assert (started.state, started.context_id) == ("working", "c-9")


@pytest.mark.parametrize(
    ("url", "status", "asked"),
    [
        (FAKE + "agents/a/", 404, [UNDER, ROOT]),
        (FAKE, 404, [ROOT]),
        (FAKE + "agents/a", 401, [UNDER]),
    ],
    ids=["404-under-the-url-and-at-the-root", "404-at-the-root", "refused-is-not-looked-past"],
)
async def test_no_card_is_a_card_error(url: str, status: int, asked: list[str]) -> None:
    fake = FakeAgent(cards={"/agents/a" + CARD_PATH: httpx.Response(status)})
    with anyio.fail_after(TEST_SECONDS), pytest.raises(AgentCardError, match=f"HTTP {status}"):
        async with fake.client() as client, connect_agent(url, client=client):
            pass
    assert fake.gets == asked


@pytest.mark.parametrize("body", [b"<html>502</html>", b"[{}]", b'"card"', b"null", b"{"])
async def test_a_card_that_is_not_a_json_object_is_a_card_error(body: bytes) -> None:
    fake = FakeAgent(cards={CARD_PATH: httpx.Response(200, content=body)})
    with anyio.fail_after(TEST_SECONDS), pytest.raises(AgentCardError):
        async with fake.client() as client, connect_agent(FAKE, client=client):
            pass


@pytest.mark.parametrize("seconds", [None, 0, -1.0, float("nan"), float("inf"), "30"])
async def test_a_timeout_that_is_no_positive_number_is_refused_before_any_call(
    seconds: Any,
) -> None:
    fake = FakeAgent(cards={CARD_PATH: httpx.Response(200, json={})})
    with (
        anyio.fail_after(TEST_SECONDS),
        pytest.raises(InvalidArgumentError, match="timeout_seconds"),
    ):
        async with (
            fake.client() as client,
            connect_agent(FAKE, client=client, timeout_seconds=seconds),
        ):
            pass
    assert fake.gets == []


async def test_a_card_naming_another_origin_is_reached_where_it_was_found() -> None:
    agent = ReferenceAgent(card_url="https://agents.example/a2a/")
    with anyio.fail_after(TEST_SECONDS):
        async with agent.client() as client, connect_agent(BASE, client=client) as a2a:
            assert a2a.url == BASE
            started = await a2a.send_message("run")
    assert agent.statistics().tasks == 1
    assert started.state == "working"


async def test_a_card_without_the_extension_has_no_live_read_and_a_turn_stores_nothing() -> None:
    answers = {"message/send": [result(task("working"))], "tasks/get": [result(task("completed"))]}
    fake, store = FakeAgent(answers, cards={CARD_PATH: ok({"name": "plain"})}), MemoryStore()
    with anyio.fail_after(TEST_SECONDS):
        async with fake.client() as client, connect_agent(FAKE, client=client) as a2a:
            assert (a2a.url, a2a.trajectory_endpoint) == (FAKE, None)
            async with LiveTurns(
                FAKE + "ext", store, "s/", poll_interval_seconds=1, client=client
            ) as turns:
                final = await run_a2a_turn(a2a, turns, "turn-1", "run")
    assert final.state == "completed"
    assert await store.list("") == []


# --- JSON-RPC -------------------------------------------------------------------------------


async def test_a_message_is_sent_as_a_user_message_that_does_not_block() -> None:
    started = result({**task("WORKING"), "contextId": 7})
    fake = FakeAgent(answers={"message/send": [started], "tasks/get": [result(task("working"))]})
    with anyio.fail_after(TEST_SECONDS):
        async with fake.agent() as a2a:
            sent = await a2a.send_message("hi", context_id="c-9")
            await a2a.send_message("again")
            await a2a.get_task("t-1")
    assert (sent.id, sent.context_id, sent.state) == ("t-1", None, "working")
    (_, first, _), (_, second, _), (_, get, _) = fake.calls
    message = {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "kind": "message"}
    assert first["configuration"] == {"blocking": False}
    assert first["message"] == {**message, "contextId": "c-9", "messageId": ANY}
    assert "contextId" not in second["message"]
    assert first["message"]["messageId"] != second["message"]["messageId"]
    assert get == {"id": "t-1", "historyLength": 0}


async def test_the_agents_own_errors() -> None:
    agent = ReferenceAgent(script=TaskScript(events=1, interval_seconds=1.0))
    with anyio.fail_after(TEST_SECONDS):
        async with agent.client() as client, connect_agent(BASE, client=client) as a2a:
            with pytest.raises(TaskNotFoundError):
                await a2a.get_task("no-such-task")
            started = await a2a.send_message("run")
            await a2a.wait_for_task(started.id)
            with pytest.raises(A2AProtocolError) as refused:
                await a2a.cancel_task(started.id)  # it has ended: not cancelable
    assert type(refused.value) is A2AProtocolError
    assert refused.value.code == -32002


async def wait(fake: FakeAgent, timeout_seconds: float = 10.0, **options: Any) -> Any:
    """``wait_for_task("t-1")`` on ``fake``: its return or its exception, and how long it took."""
    with anyio.fail_after(TEST_SECONDS):
        async with fake.agent(timeout_seconds) as a2a:
            try:
                outcome: Any = await a2a.wait_for_task("t-1", **options)
            except Exception as exc:
                outcome = exc
    return outcome, anyio.current_time() - fake.start


MALFORMED = {
    "not-json": (httpx.Response(200, content=b"<html>502</html>"), A2AProtocolError),
    "not-an-object": (ok([task("working")]), A2AProtocolError),
    "neither-result-nor-error": (ok({"jsonrpc": "2.0", "id": "1"}), A2AProtocolError),
    "error": (rpc_error(-32603), A2AProtocolError),
    "error-not-an-object": (ok({"jsonrpc": "2.0", "error": "boom"}), A2AProtocolError),
    "task-not-found": (rpc_error(-32001), TaskNotFoundError),
    "result-a-message": (result({**task("working"), "kind": "message"}), A2AProtocolError),
    "result-a-list": (result([task("working")]), A2AProtocolError),
    "task-without-id": (result({"status": {"state": "working"}}), A2AProtocolError),
    "task-without-state": (result({**task("working"), "status": "working"}), A2AProtocolError),
    "http-503": (httpx.Response(503), AgentUnavailableError),
    "http-401": (httpx.Response(401), AgentRefusedError),
    "connect-error": (httpx.ConnectError("refused"), AgentUnavailableError),
}


@pytest.mark.parametrize("name", MALFORMED)
async def test_a_bad_answer_is_named_by_what_went_wrong(name: str) -> None:
    answer, expected = MALFORMED[name]
    fake = FakeAgent(answers={"tasks/get": [answer]})
    outcome, took = await wait(fake, max_failures=2)
    assert type(outcome) is expected
    # Only an agent that is unavailable is asked again; the rest retrying cannot mend.
    retried = expected is AgentUnavailableError
    assert (len(fake.calls), took) == ((2, 1) if retried else (1, 0))
    if isinstance(outcome, A2AProtocolError) and name == "error":
        assert outcome.code == -32603
    if isinstance(outcome, AgentRefusedError):
        assert outcome.status_code == int(name.removeprefix("http-"))


# --- waiting for the task -------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer", [result(task("working")), httpx.Response(503)], ids=["running", "unavailable"]
)
async def test_polls_back_off_to_the_longest_interval_until_the_deadline(answer: Any) -> None:
    fake = FakeAgent(answers={"tasks/get": [answer]})
    outcome, took = await wait(fake, deadline_seconds=20, max_interval_seconds=3.0)
    assert isinstance(outcome, TaskTimeoutError)
    assert took == pytest.approx(20)
    assert [at for *_, at in fake.calls] == pytest.approx(
        [0, 1, 2.5, 4.75, 7.75, 10.75, 13.75, 16.75, 19.75]
    )


@pytest.mark.parametrize(
    ("retry_after", "polled_at"),
    [("5", [0, 5, 6.5]), ("100", [0, 3, 4.5])],
    ids=["honoured", "capped"],
)
async def test_a_retry_after_lengthens_one_wait_within_the_longest_interval(
    retry_after: str, polled_at: list[float]
) -> None:
    throttled = httpx.Response(429, headers={"Retry-After": retry_after})
    get = [throttled, result(task("working")), result(task("completed"))]
    fake = FakeAgent(answers={"tasks/get": get})
    final, _ = await wait(fake, max_interval_seconds=3.0 if retry_after == "100" else 10.0)
    assert final.state == "completed"
    assert [at for *_, at in fake.calls] == pytest.approx(polled_at)


@pytest.mark.parametrize("state", ["input-required", "auth-required", "rejected", "failed"])
async def test_the_wait_ends_when_the_turn_does(state: str) -> None:
    fake = FakeAgent(
        answers={"tasks/get": [result(task("submitted")), result(task(state.upper()))]}
    )
    final, _ = await wait(fake)
    assert final.state == state
    assert fake.methods == ["tasks/get"] * 2


async def test_the_deadline_cuts_a_call_that_hangs() -> None:
    fake = FakeAgent(answers={"tasks/get": [result(task("working")), HANG]})
    outcome, took = await wait(fake, timeout_seconds=100, deadline_seconds=20)
    assert isinstance(outcome, TaskTimeoutError)
    assert isinstance(outcome, TimeoutError)
    assert (fake.methods, took) == (["tasks/get"] * 2, pytest.approx(20))


FAILURES = {"503": httpx.Response(503), "connect": httpx.ConnectError("no"), "timeout": HANG}


@pytest.mark.parametrize("name", FAILURES)
async def test_max_failures_in_a_row_end_the_wait(name: str) -> None:
    fake = FakeAgent(answers={"tasks/get": [FAILURES[name]]})
    outcome, _ = await wait(fake, timeout_seconds=2, max_failures=3)
    assert type(outcome) is AgentUnavailableError
    assert fake.methods == ["tasks/get"] * 3


async def test_a_success_resets_the_failure_count() -> None:
    two_failures_then_working = [httpx.Response(503)] * 2 + [result(task("working"))]
    fake = FakeAgent(
        answers={"tasks/get": two_failures_then_working * 2 + [result(task("failed"))]}
    )
    final, _ = await wait(fake, max_failures=3)
    assert (final.state, len(fake.calls)) == ("failed", 7)


async def test_a_busy_pool_is_not_a_failure_of_the_agent() -> None:
    busy = [httpx.PoolTimeout("busy")] * 4
    fake = FakeAgent(answers={"tasks/get": [*busy, result(task("completed"))]})
    final, _ = await wait(fake, max_failures=1)
    assert (final.state, len(fake.calls)) == ("completed", 5)


# --- a whole turn ---------------------------------------------------------------------------


@pytest.mark.parametrize("followed", [True, False], ids=["followed", "unfollowed"])
async def test_a_turn_past_its_deadline_cancels_the_agents_task(followed: bool) -> None:
    agent, store = ReferenceAgent(script=LONG), MemoryStore()
    with anyio.fail_after(TEST_SECONDS):
        async with (
            agent.client() as client,
            connect_agent(BASE, client=client) as a2a,
            LiveTurns(ENDPOINT, store, "s/", poll_interval_seconds=1, client=client) as turns,
        ):
            with pytest.raises(TaskTimeoutError):  # as itself, not in a group
                await run_a2a_turn(
                    a2a, turns if followed else None, "t", "run", task_deadline_seconds=5
                )
    assert agent.statistics().canceled_tasks == 1
    assert bool(await store.list("s/")) is followed


async def turn(
    fake: FakeAgent, step: Callable[[Awaitable[Any]], Awaitable[Any]] | None = None
) -> Any:
    """Run a turn on ``fake`` (inside ``step``, if given); its outcome and how long it took."""
    fake.answers.setdefault("message/send", [result(task("submitted"))])
    with anyio.fail_after(TEST_SECONDS):
        async with fake.agent(timeout_seconds=100) as a2a:
            run = run_a2a_turn(a2a, None, "turn-1", "run", task_poll_seconds=1)
            try:
                outcome: Any = await (step(run) if step else run)
            except Exception as exc:
                outcome = exc
    return outcome, anyio.current_time() - fake.start


@pytest.mark.parametrize(
    "cancel",
    [result(task("canceled")), rpc_error(-32002), httpx.Response(503), HANG],
    ids=["canceled", "not-cancelable", "unavailable", "hangs"],
)
async def test_a_failed_wait_cancels_the_task_and_raises_its_own_error(cancel: Any) -> None:
    get = [result(task("working")), httpx.Response(401)]
    fake = FakeAgent(answers={"tasks/get": get, "tasks/cancel": [cancel]})
    outcome, took = await turn(fake)
    assert type(outcome) is AgentRefusedError
    assert outcome.status_code == 401
    assert fake.methods == ["message/send", "tasks/get", "tasks/get", "tasks/cancel"]
    assert fake.calls[-1][1] == {"id": "t-1"}
    # Asking costs at most its own bound, even when the agent never answers.
    assert took == pytest.approx(1 + (CANCEL_TASK_SECONDS if cancel is HANG else 0))


async def test_a_cancelled_step_still_asks_the_agent_to_cancel_within_a_bound() -> None:
    fake = FakeAgent(answers={"tasks/get": [result(task("working"))], "tasks/cancel": [HANG]})

    async def step(run: Awaitable[Any]) -> bool:
        with anyio.move_on_after(10) as scope:
            await run
        return scope.cancelled_caught  # the step's own cancel went on unchanged

    outcome, took = await turn(fake, step)
    assert outcome is True
    assert fake.methods[-1] == "tasks/cancel"
    assert took == pytest.approx(10 + CANCEL_TASK_SECONDS)


@pytest.mark.parametrize("anyio_backend", [virtual_time_backends()[0]])
async def test_a_native_asyncio_timeout_still_cancels_the_agents_task() -> None:
    # asyncio only: an asyncio.timeout around the step is a native task.cancel().
    agent = ReferenceAgent(script=LONG)
    with anyio.fail_after(TEST_SECONDS):
        async with agent.client() as client, connect_agent(BASE, client=client) as a2a:
            with pytest.raises(TimeoutError) as raised:
                async with asyncio.timeout(10):
                    await run_a2a_turn(a2a, None, "turn-1", "run")
    assert type(raised.value) is TimeoutError  # asyncio's, not the task's deadline
    assert agent.statistics().canceled_tasks == 1


@pytest.mark.parametrize("ends", ["done", "send-fails"])
async def test_no_cancel_is_sent_for_a_task_that_ended_or_never_started(ends: str) -> None:
    fake = FakeAgent(answers={"tasks/get": [result(task("completed"))], "tasks/cancel": [HANG]})
    if ends == "send-fails":
        fake.answers["message/send"] = [httpx.Response(503)]
    outcome, _ = await turn(fake)
    if ends == "send-fails":
        assert (type(outcome), fake.methods) == (AgentUnavailableError, ["message/send"])
    else:
        assert (outcome.state, fake.methods) == ("completed", ["message/send", "tasks/get"])


async def test_following_a_given_task_cancels_it_when_its_turn_cannot_be_entered() -> None:
    agent, store = ReferenceAgent(script=LONG), MemoryStore()
    for turn_id in ("t", "u"):
        chunk = f"s/{turn_id}/live/00000000-00000001.jsonl"
        await store.put(chunk, b"1\n", content_type="application/jsonl")
    with anyio.fail_after(TEST_SECONDS):
        async with (
            agent.client() as client,
            connect_agent(BASE, client=client) as a2a,
            LiveTurns(ENDPOINT, store, "s/", poll_interval_seconds=1, client=client) as turns,
        ):
            started = await a2a.send_message("started elsewhere")
            with pytest.raises(TurnExistsError):  # the store refuses the turn
                await follow_a2a_task(a2a, turns, "t", started.id)
            with pytest.raises(TurnExistsError):  # refused before anything is sent
                await run_a2a_turn(a2a, turns, "u", "run")
    assert (agent.statistics().tasks, agent.statistics().canceled_tasks) == (1, 1)


async def test_a_turn_that_keeps_its_task_for_a_retry_never_cancels_it() -> None:
    agent = ReferenceAgent(script=LONG)
    judged: list[BaseException] = []

    def keeps_task(exc: BaseException) -> bool:
        judged.append(exc)
        return True  # as a Temporal attempt that hands its turn off

    with anyio.fail_after(TEST_SECONDS):
        async with agent.client() as client, connect_agent(BASE, client=client) as a2a:
            with pytest.raises(TaskTimeoutError):
                await a2a_turn(
                    a2a,
                    _following(a2a, None, "t"),
                    Message(text="run"),
                    TaskWait(deadline_seconds=5),
                    keeps_task=keeps_task,
                )
    assert [type(exc) for exc in judged] == [TaskTimeoutError]
    assert (agent.statistics().tasks, agent.statistics().canceled_tasks) == (1, 0)
