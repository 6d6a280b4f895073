"""Every error a user can meet, met through the public API: typed, one line, and about something.

For each error class exported from ``follower`` (the list is ``follower.__all__``,
so a new class without a case here fails :func:`test_every_exported_error_has_a_case`),
one or more realistic triggers: an agent on a real loopback socket answering what
a misbehaving agent (or proxy) answers, real ``MemoryStore`` and ``FilesystemStore``
objects for the store errors, and boto3 itself talking to a loopback endpoint that
answers as S3 does for the S3 ones. Each case checks the class, that ``str(exc)``
is one line, that the context the raiser knew (``task_id``, ``turn_id``, ``url``,
``key``, and the class's own attributes) is set, that the message names what it
is about, and that the error survives a pickle round trip with its attributes.
"""

from __future__ import annotations

import inspect
import json
import pickle
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs
import httpx
import pytest

import follower
from follower import (
    A2AProtocolError,
    AgentCardError,
    AgentError,
    AgentRefusedError,
    AgentUnavailableError,
    ClientClosedError,
    CorruptObjectError,
    FilesystemStore,
    FollowerError,
    InvalidArgumentError,
    InvalidKeyError,
    MalformedPageError,
    MalformedPageReason,
    MemoryStore,
    ObjectConflictError,
    ObjectExistsError,
    ObjectNotFoundError,
    PoolBusyError,
    ReaderIdleError,
    StoreAccessDeniedError,
    StoreError,
    StoreEscapeError,
    StoreNotFoundError,
    StoreUnavailableError,
    TaskNotFoundError,
    TaskTimeoutError,
    TrajectoryState,
    TurnConflictError,
    TurnExistsError,
    TurnStateError,
    UsageError,
    WriterGoneError,
    connect_agent,
    following_live_trajectory,
    read_live_trajectory,
)
from follower._errors import add_context
from follower.lowlevel import LiveTrajectoryChunks, TrajectoryBatch, follow_trajectory

from ..support.http_requests import read_request

pytestmark = pytest.mark.anyio

TASK = "t1"
TURN = "turn-1"
PREFIX = "step/"
LIVE = f"{PREFIX}{TURN}/live/"
JSON_TYPE = "application/json"
# Classes no library code raises bare: each case of a subclass is one of theirs.
NEVER_RAISED_BARE = frozenset({FollowerError, AgentError, ObjectExistsError})
# The attributes every error carries, and those some classes add.
CONTEXT = ("task_id", "turn_id", "url", "key")


# --- an agent that answers what the test says, on a loopback socket --------------------


@attrs.frozen
class Answer:
    """What the agent sends back; a status of 0 closes the connection without a word."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()

    def encode(self) -> bytes:
        fields = [
            ("content-type", "application/json"),
            ("content-length", str(len(self.body))),
            ("connection", "close"),
            *self.headers,
        ]
        head = f"HTTP/1.1 {self.status} X\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields)
        return head.encode() + b"\r\n" + self.body


def ok(value: Any) -> Answer:
    return Answer(200, value if isinstance(value, bytes) else json.dumps(value).encode())


def page(**fields: Any) -> Answer:
    """A valid last page of TASK read from 0, with ``fields`` changed (None: dropped)."""
    body: dict[str, Any] = {
        "context_id": "ctx",
        "task_id": TASK,
        "state": "completed",
        "format": None,
        "events": [],
        "next": 0,
        "has_more": False,
    }
    body.update(fields)
    return ok({name: value for name, value in body.items() if value is not None})


def rpc_result(state: str) -> Answer:
    task = {"kind": "task", "id": TASK, "contextId": "ctx", "status": {"state": state}}
    return ok({"jsonrpc": "2.0", "id": "1", "result": task})


def rpc_error(code: int, message: str) -> Answer:
    return ok({"jsonrpc": "2.0", "id": "1", "error": {"code": code, "message": message}})


CARD = ok({"name": "catalogue", "url": "/a2a", "capabilities": {}})


@asynccontextmanager
async def agent_answering(*answers: Answer) -> AsyncIterator[str]:
    """A loopback agent answering each request with the next answer (the last, over and over)."""
    queue = list(answers)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def handle(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            try:
                await read_request(stream, b"")
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
            if answer.status:
                await stream.send(answer.encode())

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            tg.cancel_scope.cancel()


async def no_sink(batch: TrajectoryBatch) -> None:
    pass


async def follow(url: str, **options: Any) -> None:
    await follow_trajectory(
        url, TASK, no_sink, poll_interval_seconds=0.05, stop=anyio.Event(), **options
    )


# --- the cases ---------------------------------------------------------------------------

# A trigger raises the error; it fills ``expected`` with the context only known at run
# time (the agent's URL, a folder's path).
Trigger = Callable[[dict[str, Any]], Awaitable[None]]


@attrs.frozen
class Case:
    error: type[FollowerError]
    trigger: Trigger
    expected: dict[str, Any] = attrs.field(factory=dict)
    """Attributes and their values, known before the run."""
    named: tuple[str, ...] = ()
    """Attributes whose value the message must name."""
    id: str = ""


CASES: list[Case] = []


def case(
    error: type[FollowerError], *, named: tuple[str, ...], **expected: Any
) -> Callable[[Trigger], Trigger]:
    def register(trigger: Trigger) -> Trigger:
        CASES.append(Case(error, trigger, expected, named, f"{error.__name__}-{trigger.__name__}"))
        return trigger

    return register


def page_case(reason: MalformedPageReason, answer: Answer, **options: Any) -> None:
    """A malformed page of ``reason``: follow_trajectory refuses the answer to its first read."""

    async def trigger(expected: dict[str, Any]) -> None:
        async with agent_answering(answer) as url:
            expected["url"] = url + "/ext/trajectory"
            await follow(url + "/ext/trajectory", **options)

    trigger.__name__ = f"follow_trajectory_{reason.value}"
    case(MalformedPageError, named=("task_id",), task_id=TASK, after=0, reason=reason)(trigger)


page_case(MalformedPageReason.NOT_AN_OBJECT, ok(b"not json"))
page_case(MalformedPageReason.BAD_FIELD, page(state=None))
page_case(MalformedPageReason.UNKNOWN_STATE, page(state="sleeping"))
page_case(MalformedPageReason.CURSOR_MISMATCH, page(events=[1], next=5))
page_case(MalformedPageReason.TASK_MISMATCH, page(task_id="t2"))
page_case(MalformedPageReason.NO_PROGRESS, page(state="running", has_more=True))
page_case(MalformedPageReason.TOO_LARGE, page(events=["x" * 200], next=1), max_page_bytes=100)
page_case(MalformedPageReason.TOO_MANY_EVENTS, page(events=[0] * 1001, next=1001))
page_case(MalformedPageReason.EVENT_TOO_LARGE, page(events=["x" * 100], next=1), max_event_bytes=50)
page_case(MalformedPageReason.TOO_DEEP, ok(b"[" * 200 + b"]" * 200))
page_case(MalformedPageReason.BAD_NUMBER, ok(b'{"task_id":"t1","events":[NaN]}'))


@case(AgentRefusedError, named=("url", "task_id"), task_id=TASK, status_code=400)
async def a_read_answered_400(expected: dict[str, Any]) -> None:
    async with agent_answering(Answer(400, b"bad body")) as url:
        expected["url"] = url + "/ext/trajectory"
        await follow(url + "/ext/trajectory")


@case(AgentRefusedError, named=("url", "task_id"), task_id=TASK, status_code=403)
async def tasks_get_answered_403(expected: dict[str, Any]) -> None:
    async with agent_answering(CARD, Answer(403)) as url:
        expected["url"] = url + "/a2a"
        async with connect_agent(url) as agent:
            await agent.get_task(TASK)


@case(
    AgentUnavailableError,
    named=("url", "task_id"),
    task_id=TASK,
    status_code=503,
    retry_after_seconds=7.0,
)
async def tasks_get_answered_503(expected: dict[str, Any]) -> None:
    async with agent_answering(CARD, Answer(503, headers=(("retry-after", "7"),))) as url:
        expected["url"] = url + "/a2a"
        async with connect_agent(url) as agent:
            await agent.get_task(TASK)


@case(AgentUnavailableError, named=("url", "task_id"), task_id=TASK, status_code=None)
async def a_connection_closed_unanswered(expected: dict[str, Any]) -> None:
    async with agent_answering(CARD, Answer(0)) as url:
        expected["url"] = url + "/a2a"
        async with connect_agent(url) as agent:
            await agent.get_task(TASK)


@case(TaskNotFoundError, named=("url", "task_id"), task_id=TASK)
async def tasks_get_of_an_unknown_task(expected: dict[str, Any]) -> None:
    async with agent_answering(CARD, rpc_error(-32001, "no such task")) as url:
        expected["url"] = url + "/a2a"
        async with connect_agent(url) as agent:
            await agent.get_task(TASK)


@case(AgentCardError, named=("url",))
async def a_card_answered_500(expected: dict[str, Any]) -> None:
    async with agent_answering(Answer(500)) as url:
        expected["url"] = url + "/.well-known/agent-card.json"
        async with connect_agent(url):
            pass


@case(AgentCardError, named=("url",))
async def a_card_that_is_a_list(expected: dict[str, Any]) -> None:
    async with agent_answering(ok([1, 2])) as url:
        expected["url"] = url + "/.well-known/agent-card.json"
        async with connect_agent(url):
            pass


@case(A2AProtocolError, named=("url", "task_id"), task_id=TASK, code=-32603)
async def tasks_get_answered_an_rpc_error(expected: dict[str, Any]) -> None:
    async with agent_answering(CARD, rpc_error(-32603, "internal\nerror")) as url:
        expected["url"] = url + "/a2a"
        async with connect_agent(url) as agent:
            await agent.get_task(TASK)


@case(A2AProtocolError, named=("url",), task_id=None, code=None)
async def message_send_answered_no_task(expected: dict[str, Any]) -> None:
    async with agent_answering(CARD, ok({"jsonrpc": "2.0", "id": "1", "result": 7})) as url:
        expected["url"] = url + "/a2a"
        async with connect_agent(url) as agent:
            await agent.send_message("hello")


@case(TaskTimeoutError, named=("url", "task_id"), task_id=TASK)
async def a_task_that_never_ends(expected: dict[str, Any]) -> None:
    async with agent_answering(CARD, rpc_result("working")) as url:
        expected["url"] = url + "/a2a"
        async with connect_agent(url) as agent:
            await agent.wait_for_task(TASK, deadline_seconds=0.2, poll_interval_seconds=0.05)


@case(PoolBusyError, named=("url",))
async def our_pool_had_no_connection(expected: dict[str, Any]) -> None:
    def full(request: httpx.Request) -> httpx.Response:
        raise httpx.PoolTimeout("no connection", request=request)

    expected["url"] = "http://agent.test/.well-known/agent-card.json"
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(full)) as client,
        connect_agent("http://agent.test", client=client),
    ):
        pass


@case(ClientClosedError, named=("url", "task_id"), task_id=TASK)
async def a_closed_client(expected: dict[str, Any]) -> None:
    client = httpx.AsyncClient()
    await client.aclose()
    expected["url"] = "http://127.0.0.1:9/ext/trajectory"
    await follow("http://127.0.0.1:9/ext/trajectory", client=client)


# --- the store's -------------------------------------------------------------------------


@case(ObjectConflictError, named=("key",), key="a/b")
async def a_put_of_other_bytes(expected: dict[str, Any]) -> None:
    store = MemoryStore()
    await store.put("a/b", b"1", content_type=JSON_TYPE)
    await store.put("a/b", b"2", content_type=JSON_TYPE)


@case(
    ObjectConflictError,
    named=("key",),
    key=f"{LIVE}00000000-00000001.jsonl",
    turn_id=TURN,
    task_id=TASK,
)
async def a_chunk_the_store_holds_otherwise(expected: dict[str, Any]) -> None:
    store = MemoryStore()
    await store.put(f"{LIVE}00000000-00000001.jsonl", b"other\n", content_type=JSON_TYPE)
    sink = LiveTrajectoryChunks(store, PREFIX, TURN, task_id=TASK)
    async with agent_answering(page(events=[1], next=1)) as url:
        expected["url"] = None  # a store's error: no request to the agent
        await follow_trajectory(url, TASK, sink, poll_interval_seconds=0.05, stop=anyio.Event())


@case(ObjectNotFoundError, named=("key",), key="a/b")
async def a_get_of_no_object(expected: dict[str, Any]) -> None:
    await MemoryStore().get("a/b")


@case(CorruptObjectError, named=("key",), key=f"{LIVE}end.json", turn_id=TURN)
async def a_reader_meets_an_end_mark_that_is_not_json(expected: dict[str, Any]) -> None:
    store = MemoryStore()
    await store.put(f"{LIVE}end.json", b"{", content_type=JSON_TYPE)
    async for _ in read_live_trajectory(store, PREFIX, TURN, poll_interval_seconds=0.01):
        pass


@case(CorruptObjectError, named=("key",), key=f"{LIVE}task.json", turn_id=TURN)
async def a_turn_entered_over_a_broken_task_mark(expected: dict[str, Any]) -> None:
    store = MemoryStore()
    await store.put(f"{LIVE}task.json", b"[]", content_type=JSON_TYPE)
    async with following_live_trajectory(
        "http://agent.test/", store, PREFIX, TURN, poll_interval_seconds=1.0, resume=True
    ):
        pass


@case(StoreEscapeError, named=("key",), key="out/secret")
async def a_symbolic_link_out_of_the_root(expected: dict[str, Any]) -> None:
    root, outside = expected.pop("tmp_path") / "root", expected.pop("tmp_path_outside")
    root.mkdir()
    (root / "out").symlink_to(outside, target_is_directory=True)
    await FilesystemStore(root).get("out/secret")


@case(StoreError, named=("key",), key="a")
async def a_put_over_a_folder_of_keys(expected: dict[str, Any]) -> None:
    store = FilesystemStore(expected.pop("tmp_path"))
    expected.pop("tmp_path_outside")
    await store.put("a/b", b"1", content_type=JSON_TYPE)
    await store.put("a", b"1", content_type=JSON_TYPE)


def s3_case(error: type[StoreError], answer: Answer) -> None:
    """An S3 error: boto3 itself reading from an endpoint that answers as S3 would."""

    async def trigger(expected: dict[str, Any]) -> None:
        pytest.importorskip("boto3")
        import boto3.session
        import botocore.config

        from follower.s3 import S3Store

        async with agent_answering(answer) as url:
            client = boto3.session.Session().client(
                "s3",
                endpoint_url=url,
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                config=botocore.config.Config(retries={"total_max_attempts": 1}),
            )
            await S3Store("bucket", prefix="p/", client=client).get("a/b")

    trigger.__name__ = "s3_get"
    case(error, named=("key",), key="a/b")(trigger)


def s3_error(status: int, code: str) -> Answer:
    body = f"<Error><Code>{code}</Code><Message>said\nS3</Message></Error>".encode()
    return Answer(status, body, (("content-type", "application/xml"),))


s3_case(StoreNotFoundError, s3_error(404, "NoSuchBucket"))
s3_case(StoreAccessDeniedError, s3_error(403, "AccessDenied"))
s3_case(StoreUnavailableError, s3_error(503, "ServiceUnavailable"))


# --- the caller's ------------------------------------------------------------------------


@case(InvalidKeyError, named=("key",), key="a/../b")
async def a_key_with_a_dot_dot_segment(expected: dict[str, Any]) -> None:
    await MemoryStore().get("a/../b")


@case(InvalidKeyError, named=("turn_id",), turn_id="a/b")
async def a_turn_id_of_two_segments(expected: dict[str, Any]) -> None:
    following_live_trajectory(
        "http://agent.test/", MemoryStore(), PREFIX, "a/b", poll_interval_seconds=1
    )


@case(InvalidKeyError, named=("key",), key="step")
async def a_prefix_without_its_slash(expected: dict[str, Any]) -> None:
    following_live_trajectory(
        "http://agent.test/", MemoryStore(), "step", TURN, poll_interval_seconds=1
    )


@case(InvalidArgumentError, named=("turn_id",), turn_id=TURN)
async def follow_of_an_empty_task_id(expected: dict[str, Any]) -> None:
    async with following_live_trajectory(
        "http://agent.test/", MemoryStore(), PREFIX, TURN, poll_interval_seconds=1.0
    ) as turn:
        turn.follow("")


@case(TurnStateError, named=("turn_id", "task_id"), turn_id=TURN, task_id=TASK)
async def follow_twice_in_one_turn(expected: dict[str, Any]) -> None:
    async with (
        agent_answering(page()) as url,
        following_live_trajectory(
            url, MemoryStore(), PREFIX, TURN, poll_interval_seconds=1.0
        ) as turn,
    ):
        turn.follow(TASK)
        turn.follow(TASK)


@case(UsageError, named=("turn_id",), turn_id=TURN, task_id=TASK)
async def a_batch_that_skips_events(expected: dict[str, Any]) -> None:
    sink = LiveTrajectoryChunks(MemoryStore(), PREFIX, TURN, task_id=TASK)
    await sink(TrajectoryBatch(5, 6, [0], None, TrajectoryState.RUNNING, False))


@case(TurnExistsError, named=("turn_id",), turn_id=TURN, key=LIVE)
async def entering_a_stored_turn(expected: dict[str, Any]) -> None:
    store = MemoryStore()
    await store.put(f"{LIVE}00000000-00000001.jsonl", b"1\n", content_type=JSON_TYPE)
    async with following_live_trajectory(
        "http://agent.test/", store, PREFIX, TURN, poll_interval_seconds=1.0
    ):
        pass


@case(TurnConflictError, named=("turn_id", "task_id"), turn_id=TURN, task_id=TASK, key=LIVE)
async def resuming_another_tasks_turn(expected: dict[str, Any]) -> None:
    store = MemoryStore()
    mark = b'{"task_id":"t0","endpoint":"","started_at":"2026-01-01T00:00:00Z"}'
    await store.put(f"{LIVE}task.json", mark, content_type=JSON_TYPE)
    async with following_live_trajectory(
        "http://agent.test/", store, PREFIX, TURN, poll_interval_seconds=1.0, resume=True
    ) as turn:
        turn.follow(TASK)


@case(ReaderIdleError, named=("key",), key=LIVE, turn_id=TURN)
async def a_reader_that_sees_nothing(expected: dict[str, Any]) -> None:
    async for _ in read_live_trajectory(
        MemoryStore(), PREFIX, TURN, poll_interval_seconds=0.01, idle_timeout_seconds=0.05
    ):
        pass


@case(
    WriterGoneError,
    named=("turn_id", "key"),
    key=f"{PREFIX}{TURN}/alive/",
    turn_id=TURN,
    heartbeat_seconds=0.05,
)
async def a_reader_whose_writer_stopped_without_an_end_mark(expected: dict[str, Any]) -> None:
    store = MemoryStore()
    # A writer that said it beats every 0.05 s, then died before its first beat.
    await LiveTrajectoryChunks(
        store, PREFIX, TURN, task_id=TASK, heartbeat_seconds=0.05
    ).store_task()
    async for _ in read_live_trajectory(
        store, PREFIX, TURN, poll_interval_seconds=0.01, listing_lag_seconds=0.05
    ):
        pass


# --- the checks --------------------------------------------------------------------------


async def raised_by(trigger: Trigger, expected: dict[str, Any]) -> FollowerError:
    """The error the trigger raised: the one error in it, if a task group wrapped it."""
    try:
        await trigger(expected)
    except FollowerError as exc:
        return exc
    except BaseExceptionGroup as group:
        # The loopback agent's task group wraps what its block raised: exactly one error.
        leaves = []
        pending: list[BaseException] = [group]
        while pending:
            item = pending.pop()
            if isinstance(item, BaseExceptionGroup):
                pending.extend(item.exceptions)
            else:
                leaves.append(item)
        assert len(leaves) == 1, leaves
        assert isinstance(leaves[0], FollowerError), leaves[0]
        return leaves[0]
    raise AssertionError("the trigger raised nothing")


def own_attributes(cls: type) -> list[str]:
    """The attributes a class adds to those of its bases (its own annotations)."""
    return list(inspect.get_annotations(cls))


def all_attributes(cls: type) -> list[str]:
    return [name for klass in reversed(cls.__mro__) for name in own_attributes(klass)]


def exported_errors() -> list[type[FollowerError]]:
    found = []
    for name in follower.__all__:
        value = getattr(follower, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert issubclass(value, FollowerError), name
            found.append(value)
    return found


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_each_error_is_typed_one_line_and_names_what_it_is_about(
    case: Case, tmp_path: Path
) -> None:
    expected: dict[str, Any] = dict(case.expected)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("not the store's")
    expected["tmp_path"], expected["tmp_path_outside"] = tmp_path, tmp_path / "outside"
    with anyio.fail_after(10):
        exc = await raised_by(case.trigger, expected)
    expected.pop("tmp_path", None)
    expected.pop("tmp_path_outside", None)
    assert type(exc) is case.error, exc
    message = str(exc)
    assert message, case
    assert len(message.splitlines()) == 1, message
    assert "\n" not in message, message
    for name in all_attributes(case.error):
        if name in expected:
            assert getattr(exc, name) == expected[name], (name, message)
    for name in case.named:
        assert expected[name] in message, (name, message)
    # Every context attribute the case does not name stays None: nothing is made up.
    for name in CONTEXT:
        if name not in expected:
            assert getattr(exc, name) is None, (name, getattr(exc, name))
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is type(exc)
    assert copy.args == exc.args
    assert str(copy) == message
    for name in all_attributes(case.error):
        assert getattr(copy, name) == getattr(exc, name), name


def test_every_exported_error_has_a_case() -> None:
    raised = {c.error for c in CASES}
    for cls in exported_errors():
        if cls in NEVER_RAISED_BARE:
            assert any(issubclass(error, cls) for error in raised), cls
        else:
            assert cls in raised, f"{cls.__name__} has no case in the catalogue"


def test_every_exported_error_pickles_with_its_attributes() -> None:
    for cls in exported_errors():
        values: dict[str, Any] = {name: f"{name} value" for name in CONTEXT}
        own = {
            "status_code": 418,
            "retry_after_seconds": 2.5,
            "code": -1,
            "after": 3,
            "reason": MalformedPageReason.BAD_FIELD,
            "heartbeat_seconds": 10.0,
            "silent_seconds": 35.5,
        }
        keywords = values | {n: own[n] for n in all_attributes(cls) if n in own}
        exc = cls("what\nhappened", **keywords)
        copy = pickle.loads(pickle.dumps(exc))
        assert type(copy) is cls
        assert str(copy) == str(exc) == "what happened"
        for name, value in keywords.items():
            assert getattr(copy, name) == value, (cls, name)


def test_context_is_filled_once_never_replaced_and_the_error_is_the_same() -> None:
    cause = OSError("disk")
    exc = ObjectNotFoundError("no object 'a'", key="a")
    exc.__cause__ = cause
    same = add_context(exc, key="other", turn_id="t", task_id=None)
    assert same is exc
    assert (exc.key, exc.turn_id, exc.task_id) == ("a", "t", None)
    assert exc.__cause__ is cause
    assert type(exc) is ObjectNotFoundError
    page_error = MalformedPageError(
        "page for task 't1' at after=2 has no 'state' field", reason=MalformedPageReason.BAD_FIELD
    )
    add_context(page_error, after=2, url="http://agent.test/")
    assert (page_error.after, page_error.url) == (2, "http://agent.test/")
    not_ours = ValueError("x")
    assert add_context(not_ours, key="a") is not_ours
    assert not hasattr(not_ours, "key")


def test_errors_raised_as_a_callers_store_raises_them_keep_working() -> None:
    # A store of the caller's may raise our errors bare, around an OSError, or from a
    # subclass whose __init__ skips ours: each is still a typed, one-line error that
    # takes context (put_once's "same bytes" path rests on a bare ObjectExistsError).
    bare = ObjectExistsError()
    assert str(bare) == ""
    assert bare.key is None
    wrapped = StoreError(OSError(5, "Input/output error\non two lines"))
    assert "\n" not in str(wrapped)
    assert "Input/output error on two lines" in str(wrapped)

    class OwnError(StoreError):
        def __init__(self) -> None:
            Exception.__init__(self, "the caller's own")

    own = OwnError()
    assert own.key is None
    assert add_context(own, key="a", turn_id="t") is own
    assert (own.key, own.turn_id, own.task_id) == ("a", "t", None)
    page = MalformedPageError.__new__(MalformedPageError)
    assert add_context(page, after=3).after == 3


# --- a turn's own limit on events ----------------------------------------------------------


@pytest.mark.parametrize("api", ["following_live_trajectory", "LiveTurns"])
async def test_a_turn_refuses_an_event_over_its_max_event_bytes(
    api: str, caplog: pytest.LogCaptureFixture
) -> None:
    big = "x" * 100  # 102 bytes of JSON: over a cap of 101, within one of 102
    answer = page(events=["small", big], next=2)
    stored = {}
    for cap in (102, 101):
        store = MemoryStore()
        caplog.clear()
        with anyio.fail_after(10):
            async with agent_answering(answer) as url:
                endpoint = url + "/ext/trajectory"
                if api == "LiveTurns":
                    async with (
                        follower.LiveTurns(
                            endpoint, store, PREFIX, poll_interval_seconds=0.05, max_event_bytes=cap
                        ) as turns,
                        turns.following(TURN) as turn,
                    ):
                        turn.follow(TASK)
                else:
                    async with following_live_trajectory(
                        endpoint,
                        store,
                        PREFIX,
                        TURN,
                        poll_interval_seconds=0.05,
                        max_event_bytes=cap,
                    ) as turn:
                        turn.follow(TASK)
        stored[cap] = (
            await store.list(LIVE),
            json.loads(await store.get(f"{LIVE}end.json")),
            [r.getMessage() for r in caplog.records if r.name == "follower.turns"],
        )
    keys, end, logged = stored[102]
    assert f"{LIVE}00000000-00000002.jsonl" in keys
    assert end["complete"] is True
    assert logged == []
    keys, end, logged = stored[101]
    assert not any(key.endswith(".jsonl") for key in keys)
    assert (end["next"], end["complete"]) == (0, False)
    assert len(logged) == 1
    assert "MalformedPageError" in logged[0]
    assert "over the 101-byte cap (max_event_bytes)" in logged[0]
