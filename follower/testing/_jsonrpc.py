"""A2A over JSON-RPC 2.0 for the reference agent: decoding, checking, errors.

:func:`answer_rpc` turns a request body into the response object, calling one
handler per supported method; everything that can be wrong with a request
becomes an :class:`RpcError` with a2a-sdk 0.3's codes and messages, so a
client sees what it would see from a real agent. A handler that streams its
answer returns a :class:`StreamAnswer` instead of a result, which
:func:`answer_rpc` hands back with the request's id.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from ._json import is_int

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


class StreamAnswer(Protocol):
    """A handler's answer sent as a stream of results; it carries the request's id."""

    request_id: str | int | None


if TYPE_CHECKING:
    Handler = Callable[[dict[str, Any]], dict[str, Any] | StreamAnswer]

# JSON-RPC 2.0 and A2A error codes (a2a-sdk 0.3's messages).
PARSE_ERROR = (-32700, "Invalid JSON payload")
INVALID_REQUEST = (-32600, "Request payload validation error")
METHOD_NOT_FOUND = (-32601, "Method not found")
INVALID_PARAMS = (-32602, "Invalid parameters")
TASK_NOT_FOUND = (-32001, "Task not found")
TASK_NOT_CANCELABLE = (-32002, "Task cannot be canceled")
PUSH_NOT_SUPPORTED = (-32003, "Push Notification is not supported")
UNSUPPORTED_OPERATION = (-32004, "This operation is not supported")
# A2A methods the agent knows but does not offer: answered as a2a-sdk does.
_UNSUPPORTED_METHODS = {
    "agent/getAuthenticatedExtendedCard": UNSUPPORTED_OPERATION,
    "tasks/pushNotificationConfig/set": PUSH_NOT_SUPPORTED,
    "tasks/pushNotificationConfig/get": PUSH_NOT_SUPPORTED,
    "tasks/pushNotificationConfig/list": PUSH_NOT_SUPPORTED,
    "tasks/pushNotificationConfig/delete": PUSH_NOT_SUPPORTED,
}
_PART_KINDS = ("text", "file", "data")


class RpcError(Exception):
    """A request answered with a JSON-RPC error: one of the codes above, and a message."""

    def __init__(self, error: tuple[int, str], message: str | None = None) -> None:
        super().__init__(message or error[1])
        self.code, self.message = error[0], message or error[1]


def answer_rpc(
    body: bytes | None, handlers: Mapping[str, Handler]
) -> dict[str, Any] | StreamAnswer:
    """The JSON-RPC response to ``body``: its handler's result, or the error raised.

    A handler's :class:`StreamAnswer` comes back as it is, given the request's id.
    """
    request_id: str | int | None = None
    try:
        request = _decode(body)
        request_id = _request_id(request)
        method, params = _check_request(request)
        result = _call(handlers, method, params, request)
    except RpcError as error:
        answer: dict[str, Any] = {"error": {"code": error.code, "message": error.message}}
        if request_id is not None:
            answer["id"] = request_id
        answer["jsonrpc"] = "2.0"
        return answer
    if not isinstance(result, dict):
        result.request_id = request_id
        return result
    return {"id": request_id, "jsonrpc": "2.0", "result": result}


def check_message(message: Any) -> dict[str, Any]:
    """``params.message`` of ``message/send``, checked, with its ``kind`` filled in."""
    if not isinstance(message, dict):
        raise RpcError(INVALID_PARAMS, "params.message must be an object")
    if message.get("kind", "message") != "message":
        raise RpcError(INVALID_PARAMS, "params.message.kind must be 'message'")
    if message.get("role") not in ("user", "agent"):
        raise RpcError(INVALID_PARAMS, "params.message.role must be 'user' or 'agent'")
    if not isinstance(message.get("messageId"), str):
        raise RpcError(INVALID_PARAMS, "params.message.messageId must be a string")
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise RpcError(INVALID_PARAMS, "params.message.parts must be a list")
    for part in parts:
        if not isinstance(part, dict) or part.get("kind") not in _PART_KINDS:
            raise RpcError(INVALID_PARAMS, "each part needs a kind: text, file or data")
        if part["kind"] == "text" and not isinstance(part.get("text"), str):
            raise RpcError(INVALID_PARAMS, "a text part needs a text string")
    for name in ("taskId", "contextId"):
        if message.get(name) is not None and not isinstance(message[name], str):
            raise RpcError(INVALID_PARAMS, f"params.message.{name} must be a string")
    return {"kind": "message", **message}


def task_id_param(params: dict[str, Any]) -> str:
    """``params.id`` of ``tasks/get``, ``tasks/cancel`` and the streams (and their 1.0 names)."""
    task_id = params.get("id")
    if not isinstance(task_id, str):
        raise RpcError(INVALID_PARAMS, "params.id must be a string")
    return task_id


def history_length_param(params: dict[str, Any]) -> int | None:
    """``historyLength`` in ``params``, or None when not given."""
    value = params.get("historyLength")
    if value is not None and (not is_int(value) or value < 0):
        raise RpcError(INVALID_PARAMS, "historyLength must be an integer >= 0")
    return value


def _decode(body: bytes | None) -> Any:
    if body is None:
        raise RpcError(INVALID_REQUEST, "Payload too large")
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise RpcError(PARSE_ERROR, str(exc)) from None


def _request_id(request: Any) -> str | int | None:
    if not isinstance(request, dict):
        return None
    value = request.get("id")
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _check_request(request: Any) -> tuple[str, Any]:
    if (
        not isinstance(request, dict)
        or request.get("jsonrpc", "2.0") != "2.0"
        or not isinstance(request.get("method"), str)
        or not (request.get("id") is None or _request_id(request) is not None)
        or not (request.get("params") is None or isinstance(request["params"], dict))
    ):
        raise RpcError(INVALID_REQUEST)
    return request["method"], request.get("params")


def _call(
    handlers: Mapping[str, Handler], method: str, params: Any, request: dict[str, Any]
) -> dict[str, Any] | StreamAnswer:
    if method in _UNSUPPORTED_METHODS:
        raise RpcError(_UNSUPPORTED_METHODS[method])
    handler = handlers.get(method)
    if handler is None:
        raise RpcError(METHOD_NOT_FOUND)
    if not isinstance(request.get("id"), str | int) or isinstance(request["id"], bool):
        raise RpcError(INVALID_PARAMS, "a request needs an id")
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    return handler(params)
