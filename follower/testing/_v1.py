"""A2A v1.0 shapes for the reference agent: its tasks, messages and stream results.

The agent keeps its tasks in A2A 0.3's shapes (``_tasks``); this module writes them as
a2a-sdk 1.x does for the 1.0 methods: no ``kind`` fields, ``TASK_STATE_*`` states,
``ROLE_*`` roles, parts that are ``{"text": ...}`` or ``{"data": ...}``. A 1.0 task also
tells its trajectory: each event visible so far is an agent message holding the event as a
data part, the latest one the status's message while the task works, the others (all of
them once it has ended) in its history, after the user's messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._jsonrpc import INVALID_PARAMS, RpcError

if TYPE_CHECKING:
    from ._tasks import ScriptedTask

# a2a-sdk 1.x's answer to a 1.0 method sent without the ``A2A-Version: 1.0`` header.
VERSION_NOT_SUPPORTED = (
    -32009,
    "A2A version '0.3' is not supported by this handler. Expected version '1.0'.",
)
_ROLES = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLES_0_3 = {v1: v03 for v03, v1 in _ROLES.items()}
_ACTIVE = ("submitted", "working")


def state_v1(state: str) -> str:
    """A 0.3 task state (``input-required``) as 1.0 writes it (``TASK_STATE_INPUT_REQUIRED``)."""
    return "TASK_STATE_" + state.upper().replace("-", "_")


def message_v1(message: dict[str, Any]) -> dict[str, Any]:
    """A stored (0.3) message as 1.0 writes it."""
    written: dict[str, Any] = {"messageId": message["messageId"]}
    for name in ("contextId", "taskId"):
        if message.get(name) is not None:
            written[name] = message[name]
    written["role"] = _ROLES.get(message["role"], message["role"])
    written["parts"] = [_part_v1(part) for part in message["parts"]]
    for name in ("metadata", "extensions", "referenceTaskIds"):
        if name in message:
            written[name] = message[name]
    return written


def message_from_v1(message: Any) -> Any:
    """``params.message`` of a 1.0 ``SendMessage``, in the 0.3 shape the agent checks and keeps."""
    if not isinstance(message, dict):
        raise RpcError(INVALID_PARAMS, "params.message must be an object")
    if message.get("role") not in _ROLES_0_3:
        raise RpcError(INVALID_PARAMS, "params.message.role must be ROLE_USER or ROLE_AGENT")
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise RpcError(INVALID_PARAMS, "params.message.parts must be a list")
    return {**message, "role": _ROLES_0_3[message["role"]], "parts": [_part_0_3(p) for p in parts]}


def event_message(task: ScriptedTask, index: int) -> dict[str, Any]:
    """Event ``index`` of ``task`` as the 1.0 agent message that carries it."""
    return {
        "messageId": f"{task.id}-event-{index}",
        "contextId": task.context_id,
        "taskId": task.id,
        "role": "ROLE_AGENT",
        "parts": [{"data": task.script.event(index)}],
    }


def task_v1(
    task: ScriptedTask,
    now: float,
    *,
    events: int | None = None,
    state: str | None = None,
    history_length: int | None = None,
) -> dict[str, Any]:
    """``task`` at ``now`` as a 1.0 ``Task``; ``events``/``state`` show it earlier than that.

    ``events`` caps the events shown (a stream that sends the rest as updates); ``state``
    overrides the state (``submitted``, a task as it was created).
    """
    task_0_3 = task.to_json(now)
    visible = task.progress(now)[1]
    shown = visible if events is None else min(events, visible)
    status_0_3 = task_0_3["status"]
    shown_state = state or status_0_3["state"]
    status: dict[str, Any] = {"state": state_v1(shown_state), "timestamp": status_0_3["timestamp"]}
    history = [message_v1(message) for message in task_0_3["history"]]
    messages = [event_message(task, index) for index in range(shown)]
    if shown_state in _ACTIVE:
        if messages:
            status["message"] = messages.pop()
    elif "message" in status_0_3:
        status["message"] = message_v1(status_0_3["message"])
    history.extend(messages)
    if history_length is not None:
        history = history[-history_length:] if history_length > 0 else []
    written: dict[str, Any] = {"id": task.id, "contextId": task.context_id, "status": status}
    if "artifacts" in task_0_3 and shown_state not in _ACTIVE:
        written["artifacts"] = [artifact_v1(a) for a in task_0_3["artifacts"]]
    written["history"] = history
    return written


def artifact_v1(artifact: dict[str, Any]) -> dict[str, Any]:
    """A 0.3 artifact as 1.0 writes it."""
    return {**artifact, "parts": [_part_v1(part) for part in artifact["parts"]]}


def _part_v1(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("kind")
    written = {name: value for name, value in part.items() if name != "kind"}
    if kind == "file":
        file = written.pop("file", {})
        if "uri" in file:
            written["url"] = file["uri"]
        elif "bytes" in file:
            written["raw"] = file["bytes"]
        for name, as_v1 in (("mimeType", "mediaType"), ("name", "filename")):
            if name in file:
                written[as_v1] = file[name]
    return written


def _part_0_3(part: Any) -> Any:
    if not isinstance(part, dict):
        return part  # refused by the check of the 0.3 message
    if "text" in part:
        return {**part, "kind": "text"}
    if "data" in part:
        return {**part, "kind": "data"}
    if "url" in part or "raw" in part:
        file = {"uri": part["url"]} if "url" in part else {"bytes": part["raw"]}
        if "mediaType" in part:
            file["mimeType"] = part["mediaType"]
        if "filename" in part:
            file["name"] = part["filename"]
        return {"kind": "file", "file": file}
    return part
