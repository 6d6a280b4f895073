"""A2A stream frames as stored events (``follower._format._stream``), and the A2A wire they ride.

``stream_item`` on the frames the official a2a-sdk sends in A2A 1.0 (``result``
holding one of ``task``, ``message``, ``statusUpdate``, ``artifactUpdate``) and
in 0.3 (``result`` tagged with ``kind``), every refusal with its reason, the
JSON-RPC errors, and one check that a frame echoing the request's token never
gets it into an error. Then ``a2a_state`` for every spelling of both versions,
``A2AWire``'s calls, and which way ``task_source`` follows a card's tasks.

Pure code, no I/O: plain (sync) tests.
"""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from follower import (
    A2AProtocolError,
    MalformedPageError,
    MalformedPageReason,
    TaskNotFoundError,
    TrajectoryState,
)
from follower._format._a2a import (
    VERSION_HEADER,
    A2AWire,
    TaskSource,
    Via,
    a2a_state,
    jsonrpc_interface,
    task_source,
)
from follower._format._nesting import MAX_JSON_DEPTH
from follower._format._stream import (
    StreamItem,
    gap_event,
    stream_item,
    task_item,
    trajectory_state,
)
from follower._redact import hiding, secrets_of
from follower.testing._cursor_read import TRAJECTORY_EXTENSION

from ..support.malformed import raises_malformed

TASK = "T"
URL = "http://agent.test/a2a"
MAX_EVENT_BYTES = 64 * 1024
R = MalformedPageReason


def item(frame: Any, *, max_event_bytes: int = MAX_EVENT_BYTES) -> StreamItem:
    data = frame if isinstance(frame, str) else json.dumps(frame)
    return stream_item(data, task_id=TASK, url=URL, max_event_bytes=max_event_bytes)


def response(result: Any) -> dict[str, Any]:
    """A JSON-RPC response, as the SDK writes one into a frame's data."""
    return {"result": result, "id": 2, "jsonrpc": "2.0"}


# --- A2A 1.0, as a2a-sdk 1.x streams it -----------------------------------------------------

AGENT_MESSAGE = {
    "messageId": "m-2",
    "role": "ROLE_AGENT",
    "parts": [{"text": "thinking about it"}],
    "contextId": "C",
    "taskId": TASK,
}


def status_update(state: str = "TASK_STATE_WORKING", task_id: str = TASK) -> dict[str, Any]:
    return {
        "statusUpdate": {
            "taskId": task_id,
            "contextId": "C",
            "status": {
                "state": state,
                "message": AGENT_MESSAGE,
                "timestamp": "2025-06-01T12:00:00.000000+00:00",
            },
        }
    }


def task(state: str = "TASK_STATE_SUBMITTED", task_id: str = TASK) -> dict[str, Any]:
    return {
        "task": {
            "id": task_id,
            "contextId": "C",
            "status": {"state": state, "timestamp": "2025-06-01T12:00:00.000000+00:00"},
            "history": [{"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}],
        }
    }


def artifact_update(*, append: bool, last_chunk: bool) -> dict[str, Any]:
    return {
        "artifactUpdate": {
            "taskId": TASK,
            "contextId": "C",
            "artifact": {"artifactId": "a-1", "name": "answer", "parts": [{"text": "chunk"}]},
            "append": append,
            "lastChunk": last_chunk,
        }
    }


def test_a_status_update_is_stored_as_it_came_with_its_state() -> None:
    frame = response(status_update())
    got = item(frame)
    assert (got.kind, got.state, got.ends_stream) == ("statusUpdate", "working", False)
    assert got.event == frame["result"]


def test_a_task_snapshot_is_stored_with_its_state() -> None:
    got = item(response(task()))
    assert (got.kind, got.state, got.ends_stream) == ("task", "submitted", False)
    assert got.event == task()


@pytest.mark.parametrize(("append", "last_chunk"), [(False, False), (True, False), (True, True)])
def test_artifact_chunks_keep_append_and_last_chunk_and_report_no_state(
    append: bool, last_chunk: bool
) -> None:
    got = item(response(artifact_update(append=append, last_chunk=last_chunk)))
    assert (got.kind, got.state, got.ends_stream) == ("artifactUpdate", None, False)
    payload = got.event["artifactUpdate"]
    assert (payload["append"], payload["lastChunk"]) == (append, last_chunk)


def test_a_message_is_stored_and_may_leave_its_task_unnamed() -> None:
    got = item(response({"message": AGENT_MESSAGE}))
    assert (got.kind, got.state, got.event) == ("message", None, {"message": AGENT_MESSAGE})
    unnamed = {k: v for k, v in AGENT_MESSAGE.items() if k != "taskId"}
    assert item(response({"message": unnamed})).kind == "message"


@pytest.mark.parametrize(
    ("state", "ends"),
    [
        ("TASK_STATE_COMPLETED", True),
        ("TASK_STATE_FAILED", True),
        ("TASK_STATE_CANCELED", True),
        ("TASK_STATE_REJECTED", True),
        ("TASK_STATE_INPUT_REQUIRED", True),
        ("TASK_STATE_AUTH_REQUIRED", True),
        ("TASK_STATE_WORKING", False),
        ("TASK_STATE_SUBMITTED", False),
    ],
)
def test_a_state_that_ends_the_turn_ends_the_stream(state: str, ends: bool) -> None:
    assert item(response(status_update(state))).ends_stream is ends
    assert item(response(task(state))).ends_stream is ends


def test_task_item_stores_a_get_task_answer_as_a_task_event() -> None:
    snapshot = task("TASK_STATE_COMPLETED")["task"]
    got = task_item(snapshot, task_id=TASK, url=URL)
    assert (got.kind, got.state, got.ends_stream, got.event) == (
        "task", "completed", True, {"task": snapshot}
    )  # fmt: skip
    with raises_malformed(R.TASK_MISMATCH):
        task_item(task(task_id="OTHER")["task"], task_id=TASK, url=URL)


def test_a_gap_is_an_event_of_the_followers_own_kind() -> None:
    assert gap_event(7, "resumed", "2025-06-01T12:00:00Z") == {
        "gap": {"after": 7, "reason": "resumed", "at": "2025-06-01T12:00:00Z"}
    }


@pytest.mark.parametrize(
    ("state", "trajectory"),
    [
        ("submitted", TrajectoryState.PENDING),
        ("working", TrajectoryState.RUNNING),
        ("unknown", TrajectoryState.RUNNING),
        ("completed", TrajectoryState.COMPLETED),
        ("failed", TrajectoryState.FAILED),
        ("canceled", TrajectoryState.CANCELED),
    ],
)
def test_trajectory_state_of_an_a2a_state(state: str, trajectory: TrajectoryState) -> None:
    assert trajectory_state(state) is trajectory


# --- A2A 0.3: a result tagged with its kind --------------------------------------------------


def test_a_0_3_status_update_is_stored_under_its_1_0_name() -> None:
    result = {
        "kind": "status-update",
        "taskId": TASK,
        "contextId": "C",
        "status": {"state": "working", "message": {"kind": "message", "role": "agent"}},
        "final": False,
    }
    got = item(response(result))
    assert (got.kind, got.state, got.ends_stream) == ("statusUpdate", "working", False)
    assert got.event == {"statusUpdate": result}


@pytest.mark.parametrize(
    ("state", "ends"),
    [("completed", True), ("input-required", True), ("auth-required", True), ("working", False)],
)
def test_a_0_3_final_status_update_ends_by_its_state(state: str, ends: bool) -> None:
    result = {"kind": "status-update", "taskId": TASK, "status": {"state": state}, "final": ends}
    assert item(response(result)).ends_stream is ends


@pytest.mark.parametrize(
    ("result", "kind", "state"),
    [
        ({"kind": "task", "id": TASK, "status": {"state": "submitted"}}, "task", "submitted"),
        (
            {"kind": "artifact-update", "taskId": TASK, "artifact": {"parts": []}, "append": True},
            "artifactUpdate",
            None,
        ),
        ({"kind": "message", "role": "agent", "parts": [], "taskId": TASK}, "message", None),
    ],
    ids=["task", "artifact-update", "message"],
)
def test_the_other_0_3_kinds(result: dict[str, Any], kind: str, state: str | None) -> None:
    got = item(response(result))
    assert (got.kind, got.state, got.event) == (kind, state, {kind: result})


# --- refusals, each with its reason ----------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        status_update(task_id="OTHER"),
        task(task_id="OTHER"),
        {"artifactUpdate": {**artifact_update(append=False, last_chunk=True)["artifactUpdate"],
                            "taskId": "OTHER"}},
        {"message": {**AGENT_MESSAGE, "taskId": "OTHER"}},
        {"artifactUpdate": {"artifact": {"parts": []}}},  # no taskId: no task's
        {"kind": "status-update", "taskId": "OTHER", "status": {"state": "working"}},
        {"kind": "task", "status": {"state": "working"}},
    ],
    ids=["status", "task", "artifact", "message", "artifact-unnamed", "0.3-status", "0.3-task"],
)  # fmt: skip
def test_another_tasks_event_is_refused(result: dict[str, Any]) -> None:
    with raises_malformed(R.TASK_MISMATCH, match="carries a"):
        item(response(result))


@pytest.mark.parametrize(
    "status",
    [
        {"state": "TASK_STATE_PAUSED"},
        {"state": "TASK_STATE_UNSPECIFIED"},
        {"state": "paused"},
        {"state": "input_required"},
        {"state": 5},
        {"state": None},
        {},
        "working",
        None,
    ],
)
def test_an_unknown_state_is_refused(status: Any) -> None:
    update = status_update()
    update["statusUpdate"]["status"] = status
    with raises_malformed(R.UNKNOWN_STATE, match="reports state"):
        item(response(update))
    snapshot = task()
    snapshot["task"]["status"] = status
    with raises_malformed(R.UNKNOWN_STATE):
        item(response(snapshot))


@pytest.mark.parametrize("data", ["", "not json", '{"result": ', "{'result': {}}", "\ufeff{}"])
def test_a_frame_that_is_not_json_is_refused(data: str) -> None:
    with raises_malformed(R.NOT_AN_OBJECT, match="not JSON"):
        item(data)


@pytest.mark.parametrize("data", ["[]", "[1, 2]", '"result"', "2", "null", "true"])
def test_a_frame_that_is_json_but_not_an_object_is_refused(data: str) -> None:
    with raises_malformed(R.NOT_AN_OBJECT):
        item(data)


@pytest.mark.parametrize(
    "frame",
    [
        {"jsonrpc": "2.0", "id": 2},
        {"jsonrpc": "2.0", "id": 2, "result": None},
        {"jsonrpc": "2.0", "id": 2, "result": [status_update()]},
        {"jsonrpc": "2.0", "id": 2, "result": "task"},
        {"jsonrpc": "2.0", "id": 2, "error": None},
    ],
    ids=["no-result", "null", "list", "string", "null-error-no-result"],
)
def test_a_frame_with_no_result_object_is_refused(frame: dict[str, Any]) -> None:
    with raises_malformed(R.BAD_FIELD, match="no result object"):
        item(frame)


@pytest.mark.parametrize(
    "result",
    [
        {**task(), **status_update()},
        {},
        {"taskUpdate": {"taskId": TASK}},
        {"kind": "other", "taskId": TASK},
        {"kind": "statusUpdate", "taskId": TASK, "status": {"state": "working"}},
        {"kind": 5},
        {"task": [1]},
        {"statusUpdate": "working"},
    ],
    ids=[
        "two-kinds", "none", "unknown-kind", "unknown-0.3-kind",
        "1.0-name-as-0.3-kind", "kind-not-text", "task-not-object", "update-not-object",
    ],
)  # fmt: skip
def test_a_result_of_two_kinds_or_none_is_refused(result: dict[str, Any]) -> None:
    with raises_malformed(R.BAD_FIELD):
        item(response(result))


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
def test_a_number_json_cannot_carry_is_refused(number: str) -> None:
    data = json.dumps(response(status_update())).replace('"id": 2', f'"id": {number}')
    assert number in data
    with raises_malformed(R.BAD_NUMBER):
        item(data)


def test_an_integer_over_pythons_digit_limit_is_refused() -> None:
    data = json.dumps(response(status_update())).replace('"id": 2', '"id": ' + "9" * 4400)
    with raises_malformed(R.BAD_NUMBER):
        item(data)


def nested(depth: int) -> str:
    """A frame nesting ``depth`` levels: a message whose metadata holds nested lists."""
    inner = "[" * (depth - 3) + "]" * (depth - 3)
    return (
        '{"jsonrpc": "2.0", "id": 2, "result": {"message": {"taskId": "T", "metadata": '
        + inner
        + "}}}"
    )


def test_a_frame_nesting_deeper_than_max_json_depth_is_refused() -> None:
    assert item(nested(MAX_JSON_DEPTH)).kind == "message"
    with raises_malformed(R.TOO_DEEP, match=f"deeper than {MAX_JSON_DEPTH}"):
        item(nested(MAX_JSON_DEPTH + 1))
    with raises_malformed(R.TOO_DEEP):
        item(nested(100_000), max_event_bytes=1 << 20)  # past any recursion limit


def test_a_frame_over_max_event_bytes_is_refused_counted_in_utf_8_bytes() -> None:
    frame = response(status_update())
    frame["result"]["statusUpdate"]["status"]["message"]["parts"] = [{"text": "é" * 100}]
    data = json.dumps(frame, ensure_ascii=False)
    size = len(data.encode())
    assert size > len(data)  # the bound is on bytes, not characters
    assert item(data, max_event_bytes=size).kind == "statusUpdate"
    with raises_malformed(R.EVENT_TOO_LARGE, match=f"{size} bytes"):
        item(data, max_event_bytes=size - 1)
    with raises_malformed(R.EVENT_TOO_LARGE):
        item(data, max_event_bytes=len(data))


def test_the_size_is_checked_before_the_depth_and_the_json() -> None:
    with raises_malformed(R.EVENT_TOO_LARGE):
        item(nested(10_000), max_event_bytes=1000)
    with raises_malformed(R.EVENT_TOO_LARGE):
        item("x" * 1001, max_event_bytes=1000)


# --- JSON-RPC errors ------------------------------------------------------------------------


def error_frame(code: Any, message: Any = "refused") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 2, "error": {"code": code, "message": message}}


def test_task_not_found_is_its_own_error() -> None:
    with pytest.raises(TaskNotFoundError, match="does not know the task: Task not found") as info:
        item(error_frame(-32001, "Task not found"))
    assert (info.value.task_id, info.value.url) == (TASK, URL)


@pytest.mark.parametrize("code", [-32004, -32603, -32600, -32602, 7, None, "oops"])
def test_another_json_rpc_error_is_a_protocol_error_with_its_code(code: Any) -> None:
    with pytest.raises(A2AProtocolError, match="failed: refused") as info:
        item(error_frame(code))
    assert not isinstance(info.value, TaskNotFoundError)
    assert info.value.code == code
    assert (info.value.task_id, info.value.url) == (TASK, URL)


def test_an_error_wins_over_a_result_in_the_same_frame() -> None:
    frame = {**error_frame(-32001), "result": status_update()}
    with pytest.raises(TaskNotFoundError):
        item(frame)


def test_an_error_that_is_no_object_is_still_an_error() -> None:
    with pytest.raises(A2AProtocolError, match="failed: boom"):
        item({"jsonrpc": "2.0", "id": 2, "error": "boom"})


# --- no error message holds a secret ----------------------------------------------------------

TOKEN = "tok-7f3a9c1e5b2d"
PIECE = 6  # no run of this many characters of the token may show


def leaked(text: str) -> list[str]:
    return [
        TOKEN[i : i + PIECE] for i in range(len(TOKEN) - PIECE + 1) if TOKEN[i : i + PIECE] in text
    ]


def echo() -> str:
    """The token again and again, a copy starting where messages cut a value (40, 60, 80, 200)."""
    text = f"Bearer {TOKEN}"
    for start in (30, 50, 70, 190):
        text = text.ljust(start, ".") + f"Bearer {TOKEN}"
    return text


def echoing_frames() -> Iterator[tuple[str, dict[str, Any]]]:
    yield "state", response(status_update(state=echo()))
    yield "owner", response(status_update(task_id=echo()))
    yield "error-message", error_frame(-32000, echo())
    yield "not-found-message", error_frame(-32001, echo())
    yield "error-code", error_frame(echo())


@pytest.mark.parametrize("where", [where for where, _ in echoing_frames()])
def test_a_frame_that_echoes_the_requests_token_never_shows_it_in_the_error(where: str) -> None:
    frame = dict(echoing_frames())[where]
    assert leaked(json.dumps(frame)), "the frame does not hold the token: the check is empty"
    secrets = secrets_of(headers={"Authorization": f"Bearer {TOKEN}"})
    with (
        hiding(secrets),
        pytest.raises((MalformedPageError, A2AProtocolError, TaskNotFoundError)) as info,
    ):
        item(frame)
    error = info.value
    shown = [str(error), repr(error), repr(vars(error)), repr(error.args)]
    shown.append(pickle.dumps(error).decode("latin-1"))
    for text in shown:
        assert not leaked(text), text
    assert "***" in str(error)  # hidden, not dropped


# --- a2a_state: every spelling of both versions ------------------------------------------------

SPELLINGS = {
    "submitted": ["TASK_STATE_SUBMITTED", "submitted"],
    "working": ["TASK_STATE_WORKING", "working"],
    "completed": ["TASK_STATE_COMPLETED", "completed"],
    "failed": ["TASK_STATE_FAILED", "failed"],
    "canceled": ["TASK_STATE_CANCELED", "TASK_STATE_CANCELLED", "canceled", "cancelled"],
    "rejected": ["TASK_STATE_REJECTED", "rejected"],
    "input-required": ["TASK_STATE_INPUT_REQUIRED", "input-required"],
    "auth-required": ["TASK_STATE_AUTH_REQUIRED", "auth-required"],
    "unknown": ["TASK_STATE_UNKNOWN", "unknown"],
}


@pytest.mark.parametrize(
    ("raw", "state"),
    [(raw, state) for state, spellings in SPELLINGS.items() for raw in spellings],
)
def test_every_spelling_of_a_state_is_read(raw: str, state: str) -> None:
    assert a2a_state(raw) == state
    assert a2a_state(raw.lower()) == state
    assert a2a_state(f" {raw.title()}\n") == state


@pytest.mark.parametrize(
    "raw",
    [
        "TASK_STATE_UNSPECIFIED", "TASK_STATE_", "TASK_STATE_PAUSED", "input_required",
        "TASK-STATE-WORKING", "STATE_WORKING", "inputrequired", "", " ", None, 3, ["working"],
    ],
)  # fmt: skip
def test_what_is_no_state_is_none(raw: object) -> None:
    assert a2a_state(raw) is None


# --- A2AWire: the calls of each version --------------------------------------------------------

V1, V03 = A2AWire("1.0"), A2AWire()


def test_only_1_0_sends_the_version_header() -> None:
    assert V1.headers == ((VERSION_HEADER, "1.0"),)
    assert VERSION_HEADER == "A2A-Version"
    assert V03.headers == ()


def test_method_names_of_each_version() -> None:
    assert [call[0] for call in calls(V1)] == [
        "SendMessage", "GetTask", "GetTask", "CancelTask", "SubscribeToTask"
    ]  # fmt: skip
    assert [call[0] for call in calls(V03)] == [
        "message/send", "tasks/get", "tasks/get", "tasks/cancel", "tasks/resubscribe"
    ]  # fmt: skip


def calls(wire: A2AWire) -> list[tuple[str, dict[str, Any]]]:
    return [
        wire.send_message("hi", None),
        wire.get_task(TASK),
        wire.get_task(TASK, history=True),
        wire.cancel_task(TASK),
        wire.subscribe(TASK),
    ]


def test_a_1_0_message_returns_immediately_in_1_0_shapes() -> None:
    _, params = V1.send_message("hello", "ctx-1")
    message = params["message"]
    assert params["configuration"] == {"returnImmediately": True}
    assert (message["role"], message["parts"], message["contextId"]) == (
        "ROLE_USER", [{"text": "hello"}], "ctx-1"
    )  # fmt: skip
    assert "kind" not in message
    assert message["messageId"]


def test_a_0_3_message_does_not_block_in_0_3_shapes() -> None:
    _, params = V03.send_message("hello", None)
    message = params["message"]
    assert params["configuration"] == {"blocking": False}
    assert (message["role"], message["parts"], message["kind"]) == (
        "user", [{"kind": "text", "text": "hello"}], "message"
    )  # fmt: skip
    assert "contextId" not in message


def test_each_message_has_its_own_id() -> None:
    first, second = V1.send_message("a", None)[1], V1.send_message("a", None)[1]
    assert first["message"]["messageId"] != second["message"]["messageId"]


@pytest.mark.parametrize("wire", [V1, V03], ids=["1.0", "0.3"])
def test_task_calls_name_the_task_and_get_task_asks_no_history_unless_told(wire: A2AWire) -> None:
    assert wire.get_task(TASK)[1] == {"id": TASK, "historyLength": 0}
    assert wire.get_task(TASK, history=True)[1] == {"id": TASK}
    assert wire.cancel_task(TASK)[1] == {"id": TASK}
    assert wire.subscribe(TASK)[1] == {"id": TASK}


def test_a_request_is_a_json_rpc_2_0_call_with_a_fresh_id() -> None:
    request = A2AWire.request("GetTask", {"id": TASK})
    assert {k: v for k, v in request.items() if k != "id"} == {
        "jsonrpc": "2.0", "method": "GetTask", "params": {"id": TASK}
    }  # fmt: skip
    assert request["id"] != A2AWire.request("GetTask", {"id": TASK})["id"]


# --- the card: its JSON-RPC interface, and how its tasks are followed ---------------------------


def interface(binding: str = "JSONRPC", url: Any = URL, version: Any = "1.0") -> dict[str, Any]:
    return {"url": url, "protocolBinding": binding, "protocolVersion": version}


@pytest.mark.parametrize(
    ("card", "expected"),
    [
        ({"supportedInterfaces": [interface()]}, (URL, "1.0")),
        ({"supportedInterfaces": [interface(version="1.3")]}, (URL, "1.0")),
        ({"supportedInterfaces": [interface(binding="jsonrpc")]}, (URL, "1.0")),
        (
            {"supportedInterfaces": [interface("GRPC", "grpc://a"), interface(url="http://b/")]},
            ("http://b/", "1.0"),
        ),
        ({"supportedInterfaces": ["x", None, interface()]}, (URL, "1.0")),
        ({"supportedInterfaces": [interface(version="0.3")], "url": "http://c/"}, (URL, None)),
        ({"supportedInterfaces": [interface(version=None)]}, (URL, None)),
        ({"supportedInterfaces": [interface(url="")]}, (None, "1.0")),
        ({"supportedInterfaces": [interface(url=5)]}, (None, "1.0")),
        ({"supportedInterfaces": [interface("HTTP+JSON")], "url": "http://c"}, ("http://c", None)),
        ({"url": URL, "protocolVersion": "0.3.0"}, (URL, None)),
        ({"supportedInterfaces": "JSONRPC", "url": URL}, (URL, None)),
        ({"url": ""}, (None, None)),
        ({}, (None, None)),
    ],
    ids=[
        "1.0", "1.x", "binding-any-case", "first-jsonrpc", "junk-entries", "jsonrpc-0.3",
        "no-version", "empty-url", "url-not-text", "no-jsonrpc-falls-to-top-url", "0.3-card",
        "interfaces-not-a-list", "empty-top-url", "empty-card",
    ],
)  # fmt: skip
def test_the_cards_json_rpc_interface(card: dict[str, Any], expected: tuple[Any, Any]) -> None:
    assert jsonrpc_interface(card) == expected


AGENT = "http://agent.test/"
RPC = "http://agent.test/a2a"


def card(*, extension: bool = False, streaming: Any = None) -> dict[str, Any]:
    capabilities: dict[str, Any] = {}
    if extension:
        capabilities["extensions"] = [copy.deepcopy(TRAJECTORY_EXTENSION)]
    if streaming is not None:
        capabilities["streaming"] = streaming
    return {"url": RPC, "capabilities": capabilities}


CURSOR = TaskSource(Via.CURSOR, AGENT + "ext/trajectory", "1.0")
STREAM = TaskSource(Via.STREAM, RPC, "1.0")
POLL = TaskSource(Via.POLL, RPC, "1.0")


@pytest.mark.parametrize(
    ("extension", "streaming", "via", "expected"),
    [
        (True, True, None, CURSOR),
        (True, False, None, CURSOR),
        (False, True, None, STREAM),
        (False, False, None, POLL),
        (False, None, None, POLL),
        (False, "true", None, POLL),  # only JSON true says it streams
        (True, True, "stream", STREAM),
        (True, True, Via.POLL, POLL),
        (False, False, "stream", STREAM),  # asked for: taken though the card does not say
        (True, False, "cursor", CURSOR),
        (False, True, "cursor", None),
        (False, False, Via.CURSOR, None),
    ],
)
def test_how_a_task_is_followed(
    extension: bool, streaming: Any, via: Via | str | None, expected: TaskSource | None
) -> None:
    chosen = task_source(card(extension=extension, streaming=streaming), RPC, V1, via)
    assert chosen == expected


def test_the_source_speaks_the_wires_version() -> None:
    chosen = task_source(card(streaming=True), RPC, V03)
    assert chosen == TaskSource(Via.STREAM, RPC, None)
    assert chosen.wire == V03
    assert task_source(card(extension=True), RPC, V03) == TaskSource(
        Via.CURSOR, AGENT + "ext/trajectory", None
    )


def test_an_unknown_via_is_refused() -> None:
    with pytest.raises(ValueError, match="sideways"):
        task_source(card(), RPC, V1, "sideways")
