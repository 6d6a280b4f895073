"""A2A's JSON-RPC wire, in the two versions agents speak, and the ways a task can be followed.

Sync and I/O-free. An agent that names a JSON-RPC interface of protocol 1.0 in
its card (``supportedInterfaces``) is spoken to in 1.0: its method names
(``SendMessage``, ``GetTask``, ``SubscribeToTask``...), its shapes
(``ROLE_USER``, ``TASK_STATE_*``) and the ``A2A-Version: 1.0`` header, without
which a 1.0 server takes the call for 0.3 and refuses it. Any other agent is
spoken to in 0.3 (``message/send``, ``tasks/get``, ``tasks/resubscribe``...),
which a 1.0 server with its compatibility layer serves too.

How a task is followed (:class:`Via`) comes from the card, and a caller may
choose another: the live-trajectory extension's cursor reads, else the
agent's stream (``capabilities.streaming``), else polls of ``GetTask``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from typing import Any, final

import attrs

from .._errors import A2AProtocolError, FollowerError, TaskNotFoundError
from .._redact import scrub
from ._discovery import live_trajectory_endpoint

# A2A task states in 0.3's spelling, which the library uses (1.0's are mapped to it).
TERMINAL_STATES = frozenset({"completed", "canceled", "failed", "rejected"})
INTERRUPTED_STATES = frozenset({"input-required", "auth-required"})
KNOWN_STATES = TERMINAL_STATES | INTERRUPTED_STATES | {"submitted", "working", "unknown"}
VERSION_HEADER = "A2A-Version"
JSONRPC_TASK_NOT_FOUND = -32001
# What a 1.0 agent answers a subscription to a task that has ended (UnsupportedOperation).
JSONRPC_UNSUPPORTED_OPERATION = -32004
_V1_STATE_PREFIX = "task_state_"


class Via(enum.StrEnum):
    """A way of following a task; values are the command line's ``--via`` words."""

    CURSOR = "cursor"
    """The live-trajectory extension's cursor reads (docs/protocol.md)."""
    STREAM = "stream"
    """The agent's own stream of the task: ``SubscribeToTask`` over server-sent events."""
    POLL = "poll"
    """Polls of ``GetTask``, storing each change of the task."""


def a2a_state(raw: object) -> str | None:
    """An A2A task state in 0.3's spelling (``TASK_STATE_INPUT_REQUIRED`` is ``input-required``).

    None for what is no known state.
    """
    if not isinstance(raw, str):
        return None
    word = raw.strip().lower()
    if word.startswith(_V1_STATE_PREFIX):
        word = word[len(_V1_STATE_PREFIX) :].replace("_", "-")
    if word == "cancelled":
        word = "canceled"
    return word if word in KNOWN_STATES else None


def ends_turn(state: str | None) -> bool:
    """Whether a task in ``state`` is done with this turn: ended, or waiting on the user."""
    return state in TERMINAL_STATES or state in INTERRUPTED_STATES


def rpc_error(error: object, what: str, task_id: str | None, url: str) -> FollowerError:
    """The library's error for a JSON-RPC ``error`` member."""
    code = error.get("code") if isinstance(error, Mapping) else None
    text = error.get("message") if isinstance(error, Mapping) else error
    text = scrub(str(text))[:200]  # scrubbed before it is cut (follower._redact)
    if code == JSONRPC_TASK_NOT_FOUND:
        return TaskNotFoundError(
            f"{what}: the agent does not know the task: {text}", task_id=task_id, url=url
        )
    return A2AProtocolError(
        f"{what} failed: {text} (code {scrub(repr(code))[:40]})",
        code=code,
        task_id=task_id,
        url=url,
    )


@final
@attrs.frozen
class A2AWire:
    """The JSON-RPC calls of one A2A protocol version: their methods, params and headers.

    ``version`` is ``"1.0"`` or None (0.3, which names no version).
    """

    version: str | None = None

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        return () if self.version is None else ((VERSION_HEADER, self.version),)

    def send_message(self, text: str, context_id: str | None) -> tuple[str, dict[str, Any]]:
        """A user message that starts a task and answers at once with it."""
        message: dict[str, Any] = {"messageId": uuid.uuid4().hex}
        if self.version is None:
            message.update(role="user", parts=[{"kind": "text", "text": text}], kind="message")
            configuration: dict[str, Any] = {"blocking": False}
        else:
            message.update(role="ROLE_USER", parts=[{"text": text}])
            configuration = {"returnImmediately": True}
        if context_id is not None:
            message["contextId"] = context_id
        name = "message/send" if self.version is None else "SendMessage"
        return name, {"message": message, "configuration": configuration}

    def get_task(self, task_id: str, *, history: bool = False) -> tuple[str, dict[str, Any]]:
        """The task's state; with ``history``, its whole history and artifacts too."""
        params: dict[str, Any] = {"id": task_id}
        if not history:
            params["historyLength"] = 0
        return ("tasks/get" if self.version is None else "GetTask"), params

    def cancel_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        return ("tasks/cancel" if self.version is None else "CancelTask"), {"id": task_id}

    def subscribe(self, task_id: str) -> tuple[str, dict[str, Any]]:
        """A stream of the task's events from now on, starting with its snapshot."""
        return ("tasks/resubscribe" if self.version is None else "SubscribeToTask"), {"id": task_id}

    @staticmethod
    def request(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}


@final
@attrs.frozen
class TaskSource:
    """Where and how a task is followed: ``url`` is the cursor read's endpoint, or the JSON-RPC URL.

    Made from an agent's card by :attr:`~follower.A2AAgent.task_source`; given to
    :class:`~follower.LiveTurns` in place of an endpoint. ``a2a_version`` is the
    A2A version its stream and polls speak (``"1.0"``, or None for 0.3).
    """

    via: Via = attrs.field(converter=Via)
    url: str
    a2a_version: str | None = None

    @property
    def wire(self) -> A2AWire:
        return A2AWire(self.a2a_version)


def jsonrpc_interface(card: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The card's JSON-RPC interface: its URL and protocol version, each None if unnamed.

    A 1.0 card lists ``supportedInterfaces``; the first whose binding is
    ``JSONRPC`` is taken. A 0.3 card names its URL at the top level.
    """
    interfaces = card.get("supportedInterfaces")
    if isinstance(interfaces, list):
        for interface in interfaces:
            if not isinstance(interface, Mapping):
                continue
            binding = interface.get("protocolBinding")
            if isinstance(binding, str) and binding.upper() == "JSONRPC":
                url, version = interface.get("url"), interface.get("protocolVersion")
                return (
                    url if isinstance(url, str) and url else None,
                    "1.0" if isinstance(version, str) and version.startswith("1.") else None,
                )
    url = card.get("url")
    return (url if isinstance(url, str) and url else None), None


def offers_streaming(card: Mapping[str, Any]) -> bool:
    capabilities = card.get("capabilities")
    return isinstance(capabilities, Mapping) and capabilities.get("streaming") is True


def task_source(
    card: Mapping[str, Any], rpc_url: str, wire: A2AWire, via: Via | str | None = None
) -> TaskSource | None:
    """How to follow the agent's tasks: ``via`` if given, else the best way its card offers.

    Cursor reads need the live-trajectory extension (None without it, when asked
    for); a stream is taken when the card says ``capabilities.streaming`` (or
    when asked for); polls always work.
    """
    chosen = None if via is None else Via(via)
    if chosen in (None, Via.CURSOR):
        endpoint = live_trajectory_endpoint(card, rpc_url)
        if endpoint is not None:
            return TaskSource(Via.CURSOR, endpoint, wire.version)
        if chosen is Via.CURSOR:
            return None
    if chosen is Via.STREAM or (chosen is None and offers_streaming(card)):
        return TaskSource(Via.STREAM, rpc_url, wire.version)
    return TaskSource(Via.POLL, rpc_url, wire.version)
