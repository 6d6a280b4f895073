"""A2A stream frames as stored events: what one server-sent event of a task's stream says.

An A2A agent streams a task as server-sent events, each ``data`` a JSON-RPC
response whose ``result`` is one of ``task``, ``message``, ``statusUpdate`` or
``artifactUpdate`` (A2A 1.0; 0.3 says ``kind`` instead, and ``status-update``).
A streamed turn stores each as one event, in 1.0's shape whatever version the
agent spoke: an object with exactly one key naming its kind, so a reader tells
kinds apart without knowing the version. The follower adds one kind of its own,
``gap``, where a stream was lost and events may be missing (docs/protocol.md,
"Streamed turns"). Sync and I/O-free, like the page rules in ``_wire``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs

from .._errors import ErrorContext, MalformedPageError, MalformedPageReason
from .._redact import scrub
from ._a2a import a2a_state, ends_turn, rpc_error
from ._nesting import MAX_JSON_DEPTH, nests_too_deep
from ._wire import NumberRefused, TrajectoryState, loads_strict_json

# The format a streamed turn's meta.json names.
STREAM_FORMAT = "a2a-stream/v1"
# The kinds of a stored stream event: the agent's four, and the follower's own.
TASK, MESSAGE, STATUS_UPDATE, ARTIFACT_UPDATE, GAP = (
    "task",
    "message",
    "statusUpdate",
    "artifactUpdate",
    "gap",
)
AGENT_KINDS = frozenset({TASK, MESSAGE, STATUS_UPDATE, ARTIFACT_UPDATE})
_V03_KINDS = {
    "task": TASK,
    "message": MESSAGE,
    "status-update": STATUS_UPDATE,
    "artifact-update": ARTIFACT_UPDATE,
}
_TRAJECTORY_STATES = {
    "submitted": TrajectoryState.PENDING,
    "working": TrajectoryState.RUNNING,
    "unknown": TrajectoryState.RUNNING,
}


def trajectory_state(state: str) -> TrajectoryState:
    """The trajectory state an A2A state stands for in a turn's marks."""
    known = _TRAJECTORY_STATES.get(state)
    return known if known is not None else TrajectoryState.from_task_state(state)


@final
@attrs.frozen
class StreamItem:
    """One frame of a task's stream, as it is stored.

    ``event`` is the stored event (``{kind: payload}``); ``state`` the A2A state
    it reports (a ``task`` or a ``statusUpdate``), else None.
    """

    kind: str
    event: Mapping[str, Any]
    state: str | None

    @property
    def ends_stream(self) -> bool:
        """The agent ends its stream after this frame: the task is done with the turn."""
        return ends_turn(self.state)


def gap_event(after: int, reason: str, at: str) -> dict[str, Any]:
    """The stored mark of a gap: events from position ``after`` on may be missing."""
    return {GAP: {"after": after, "reason": reason, "at": at}}


def stream_item(data: str, *, task_id: str, url: str, max_event_bytes: int) -> StreamItem:
    """The stored form of one frame's ``data``: a JSON-RPC response carrying one stream event.

    Raises :class:`~follower.MalformedPageError` for a frame that is no such
    response, or another task's; :class:`~follower.TaskNotFoundError` and
    :class:`~follower.A2AProtocolError` for a JSON-RPC error.
    """
    context: ErrorContext = {"task_id": task_id, "url": url}
    encoded = data.encode("utf-8", "surrogatepass")
    if len(encoded) > max_event_bytes:
        raise MalformedPageError(
            f"a stream event of task {task_id!r} is {len(encoded)} bytes, over the "
            f"{max_event_bytes}-byte max_event_bytes",
            reason=MalformedPageReason.EVENT_TOO_LARGE,
            **context,
        )
    if nests_too_deep(encoded):
        raise MalformedPageError(
            f"a stream event of task {task_id!r} nests deeper than {MAX_JSON_DEPTH} levels",
            reason=MalformedPageReason.TOO_DEEP,
            **context,
        )
    try:
        answer = loads_strict_json(data)
    except NumberRefused as exc:
        raise MalformedPageError(
            f"a stream event of task {task_id!r}: {exc}",
            reason=MalformedPageReason.BAD_NUMBER,
            **context,
        ) from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # over sys.get_int_max_str_digits()
            raise MalformedPageError(
                f"a stream event of task {task_id!r} holds an integer of more digits than "
                "Python converts exactly",
                reason=MalformedPageReason.BAD_NUMBER,
                **context,
            ) from None
        raise MalformedPageError(
            f"a stream event of task {task_id!r} is not JSON",
            reason=MalformedPageReason.NOT_AN_OBJECT,
            **context,
        ) from None
    if not isinstance(answer, dict):
        raise MalformedPageError(
            f"a stream event of task {task_id!r} at {url} is a JSON {type(answer).__name__}, "
            "not a JSON-RPC response object",
            reason=MalformedPageReason.NOT_AN_OBJECT,
            **context,
        )
    error = answer.get("error")
    if error is not None:
        raise rpc_error(error, f"the stream of task {task_id!r} at {url}", task_id, url)
    result = answer.get("result")
    if not isinstance(result, dict):
        raise _malformed(task_id, url, "has no result object")
    return _item(result, task_id, url)


def task_item(task: dict[str, Any], *, task_id: str, url: str) -> StreamItem:
    """The stored form of a task an agent answered ``GetTask`` with (decoded already)."""
    return _item({TASK: task}, task_id, url)


def _item(result: dict[str, Any], task_id: str, url: str) -> StreamItem:
    if len(result) == 1 and next(iter(result)) in AGENT_KINDS:  # 1.0: {"statusUpdate": {...}}
        kind = next(iter(result))
        payload = result[kind]
    elif isinstance(result.get("kind"), str) and result["kind"] in _V03_KINDS:  # 0.3
        kind = _V03_KINDS[result["kind"]]
        payload = result
    else:
        raise _malformed(task_id, url, "holds none of task, message, statusUpdate, artifactUpdate")
    if not isinstance(payload, dict):
        raise _malformed(task_id, url, f"has a {kind} that is not an object")
    state = None
    if kind == TASK:
        owner = payload.get("id")
        state = _status_state(payload, task_id, url)
    elif kind == MESSAGE:
        owner = payload.get("taskId", task_id)
    else:
        owner = payload.get("taskId")
        if kind == STATUS_UPDATE:
            state = _status_state(payload, task_id, url)
    if owner != task_id:
        raise MalformedPageError(
            f"the stream of task {task_id!r} at {url} carries a {kind} of task "
            f"{scrub(repr(owner))[:80]}",
            reason=MalformedPageReason.TASK_MISMATCH,
            task_id=task_id,
            url=url,
        )
    return StreamItem(kind, {kind: payload}, state)


def _status_state(payload: Mapping[str, Any], task_id: str, url: str) -> str:
    status = payload.get("status")
    raw = status.get("state") if isinstance(status, Mapping) else None
    state = a2a_state(raw)
    if state is None:
        raise MalformedPageError(
            f"the stream of task {task_id!r} at {url} reports state {scrub(repr(raw))[:60]}",
            reason=MalformedPageReason.UNKNOWN_STATE,
            task_id=task_id,
            url=url,
        )
    return state


def _malformed(task_id: str, url: str, what: str) -> MalformedPageError:
    return MalformedPageError(
        f"a stream event of task {task_id!r} at {url} {what}",
        reason=MalformedPageReason.BAD_FIELD,
        task_id=task_id,
        url=url,
    )
