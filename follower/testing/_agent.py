"""The reference agent: an ASGI app that a test can make misbehave, and its statistics.

It serves an A2A agent card, A2A JSON-RPC 2.0 and the trajectory extension's
cursor read (docs/protocol.md). This module routes requests and keeps the
agent's state: its tasks, its fault and its counts. The rules of each part sit
in the modules below it: ``_tasks``, ``_jsonrpc``, ``_cursor_read``,
``_fault_pages``, ``_asgi`` and ``_transport``.

Tasks have no background task behind them: each answer computes the task's
progress from the clock (see ``_script``), so the state and the number of events
come from one reading of the clock, and the log is always sealed before the
terminal state shows. Connection-level faults (``close``, ``gone``) are played by
whatever carries the requests: :meth:`ReferenceAgent.transport` in-process, and
the TCP front of :func:`~follower.testing.serve_agent` on a loopback socket.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, final

import anyio
import attrs
import httpx

from ._asgi import (
    JSON,
    TEXT,
    base_url,
    lifespan,
    read_body,
    respond,
    until_disconnected,
)
from ._cursor_read import (
    MAX_BYTES_PER_READ,
    MAX_EVENTS_PER_READ,
    TRAJECTORY_EXTENSION,
    TRAJECTORY_PATH,
    BadRead,
    CursorRead,
)
from ._fault_pages import send_page
from ._faults import FaultKind
from ._json import dumps
from ._jsonrpc import (
    INVALID_PARAMS,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    RpcError,
    answer_rpc,
    check_message,
    history_length_param,
    task_id_param,
)
from ._script import TaskScript
from ._tasks import ScriptedTask
from ._transport import InProcessTransport

if TYPE_CHECKING:
    from ._asgi import Message, Receive, Scope, Send
    from ._faults import Fault

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
RPC_PATH = "/"


@final
@attrs.frozen
class AgentStatistics:
    """What the agent has seen so far."""

    tasks: int
    """Tasks it knows now."""
    reads: int
    """Trajectory reads that reached it (answered or not)."""
    rpc_calls: int
    """A2A JSON-RPC requests that reached it."""
    dropped_connections: int
    """Requests answered by closing the connection (``close`` and ``gone``)."""
    canceled_tasks: int
    """Tasks canceled by ``tasks/cancel``."""


@final
@attrs.frozen
class AgentRequest:
    """One request as the agent saw it: when it arrived, where to, and its answer."""

    at: float
    """``anyio.current_time()`` when it reached the agent, or its connection was dropped."""
    path: str | None
    """Its path; ``None`` for a connection dropped before its request was read."""
    status: int | None
    """The status answered; ``None`` until then, and for one never answered."""


@attrs.define(eq=False)
class _Arrival:
    at: float
    path: str | None
    status: int | None = None

    def frozen(self) -> AgentRequest:
        return AgentRequest(self.at, self.path, self.status)


@attrs.define(eq=False)
class _FaultState:
    """What a fault has done so far; reset whenever the fault is set."""

    reads: int = 0
    since: float | None = None
    gone: bool = False


@attrs.define(eq=False)
class ReferenceAgent:
    """A scripted A2A agent serving the live trajectory extension; an ASGI app.

    Every ``message/send`` starts a task that runs :attr:`script` (read when the
    message arrives, so it can change between tasks) and answers at once with the
    task, whatever ``configuration.blocking`` says; a message naming a running
    task's ``taskId`` joins its history. :attr:`fault` makes the agent misbehave
    until it is set back to ``None``. Use it in-process with :meth:`client` (or
    :meth:`transport`), or on a loopback socket with
    :func:`~follower.testing.serve_agent`.
    """

    script: TaskScript = attrs.field(factory=TaskScript)
    _fault: Fault | None = attrs.field(default=None, alias="fault")
    card_url: str | None = None
    """The ``url`` the card names; by default the base URL the card is read at."""
    name: str = "reference agent"
    max_events_per_read: int = attrs.field(
        default=MAX_EVENTS_PER_READ, validator=attrs.validators.ge(1)
    )
    max_bytes_per_read: int = attrs.field(
        default=MAX_BYTES_PER_READ, validator=attrs.validators.ge(1)
    )
    log_requests: bool = False
    """Keep :meth:`request_log` (off by default: it grows with every request)."""
    _tasks: dict[str, ScriptedTask] = attrs.field(factory=dict, init=False)
    _fault_state: _FaultState = attrs.field(factory=_FaultState, init=False)
    _reads: int = attrs.field(default=0, init=False)
    _rpc_calls: int = attrs.field(default=0, init=False)
    _dropped: int = attrs.field(default=0, init=False)
    _canceled: int = attrs.field(default=0, init=False)
    _read_seen: anyio.Event | None = attrs.field(default=None, init=False)
    _arrivals: list[_Arrival] = attrs.field(factory=list, init=False)
    _arrival_seen: anyio.Event | None = attrs.field(default=None, init=False)

    # --- the test's controls ------------------------------------------------------

    @property
    def fault(self) -> Fault | None:
        """The fault in effect, or ``None``; settable at any time."""
        return self._fault

    @fault.setter
    def fault(self, fault: Fault | None) -> None:
        self._fault = fault
        self._fault_state = _FaultState()
        if fault is not None and fault.kind is FaultKind.RESTART:
            self._tasks.clear()

    def statistics(self) -> AgentStatistics:
        """What the agent has seen so far."""
        return AgentStatistics(
            tasks=len(self._tasks),
            reads=self._reads,
            rpc_calls=self._rpc_calls,
            dropped_connections=self._dropped,
            canceled_tasks=self._canceled,
        )

    async def wait_reads(self, count: int) -> None:
        """Return once ``count`` trajectory reads in all have reached the agent."""
        while self._reads < count:
            if self._read_seen is None:
                self._read_seen = anyio.Event()
            await self._read_seen.wait()

    def request_log(self) -> tuple[AgentRequest, ...]:
        """Every request that reached the agent so far, in order; needs ``log_requests``.

        Connections dropped by a fault (``close``, ``gone``) count as requests with
        no path: whatever was sent on them never reached the agent.
        """
        self._check_logging()
        return tuple(arrival.frozen() for arrival in self._arrivals)

    async def wait_requests(self, count: int) -> None:
        """Return once ``count`` requests in all are in :meth:`request_log`."""
        self._check_logging()
        while len(self._arrivals) < count:
            if self._arrival_seen is None:
                self._arrival_seen = anyio.Event()
            await self._arrival_seen.wait()

    def _check_logging(self) -> None:
        if not self.log_requests:
            raise ValueError("the request log needs ReferenceAgent(log_requests=True)")

    def _note_arrival(self, path: str | None) -> _Arrival | None:
        if not self.log_requests:
            return None
        arrival = _Arrival(anyio.current_time(), path)
        self._arrivals.append(arrival)
        if self._arrival_seen is not None:
            self._arrival_seen.set()
            self._arrival_seen = None
        return arrival

    def card(self, base_url: str) -> dict[str, Any]:
        """The agent card, as served at ``base_url``."""
        return {
            "name": self.name,
            "description": "A scripted agent that serves the live trajectory extension, for tests.",
            "url": self.card_url or base_url,
            "version": "1.0.0",
            "protocolVersion": "0.3.0",
            "preferredTransport": "JSONRPC",
            "capabilities": {
                "streaming": False,
                "pushNotifications": False,
                "stateTransitionHistory": False,
                "extensions": [TRAJECTORY_EXTENSION],
            },
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [
                {
                    "id": "scripted-task",
                    "name": "Scripted task",
                    "description": "Runs a scripted task whose events are read live.",
                    "tags": ["testing", "trajectory"],
                }
            ],
        }

    # --- in-process use -----------------------------------------------------------

    def transport(self) -> httpx.AsyncBaseTransport:
        """An in-process transport to this agent that plays connection-level faults."""
        return InProcessTransport(self, self.drops_connection)

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` on :meth:`transport`, based at ``http://agent.test/``."""
        kwargs.setdefault("base_url", "http://agent.test")
        return httpx.AsyncClient(transport=self.transport(), **kwargs)

    # --- for the carriers ---------------------------------------------------------

    def drops_connection(self) -> bool:
        """Whether the carrier closes, unanswered, the connection a request arrives on now.

        For what carries requests to the agent (:meth:`transport`, the serving
        front of :func:`~follower.testing.serve_agent`): they ask before passing
        on a request (or a chunk of one) and close the connection on a yes, and
        every yes counts in :attr:`AgentStatistics.dropped_connections`. Tests
        have no need of it.
        """
        if not self._drops():
            return False
        self._note_arrival(None)
        return True

    def _drops(self) -> bool:
        if not self._connections_fail_now():
            return False
        self._dropped += 1
        return True

    def _connections_fail_now(self) -> bool:
        fault = self._fault
        if fault is None:
            return False
        if fault.kind is FaultKind.CLOSE:
            return True
        if fault.kind is not FaultKind.GONE or fault.after_events is None:
            return False
        state = self._fault_state
        if not state.gone:
            now = anyio.current_time()
            times = (task.gone_at(fault.after_events) for task in self._tasks.values())
            state.gone = any(at is not None and now + 1e-9 >= at for at in times)
        return state.gone

    # --- ASGI ---------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        body = await read_body(receive)
        arrival = self._note_arrival(path)
        if arrival is not None:
            send = _noting_status(send, arrival)
        if path == TRAJECTORY_PATH:
            self._note_read()
        elif path == RPC_PATH and method == "POST":
            self._rpc_calls += 1
        if self._drops():
            # Reached only through a carrier that does not play the fault (another
            # server, a bare ASGITransport): fail the exchange as best we can.
            raise httpx.RemoteProtocolError("the reference agent dropped the connection")
        if self._fault is not None and self._fault.kind is FaultKind.SILENT:
            await until_disconnected(receive)
            return
        if path in CARD_PATHS:
            if method not in ("GET", "HEAD"):
                await respond(send, 405, b"method not allowed", TEXT, allow=b"GET")
                return
            await respond(send, 200, dumps(self.card(base_url(scope))), JSON)
        elif path == TRAJECTORY_PATH:
            await self._trajectory(method, body, receive, send)
        elif path == RPC_PATH:
            if method != "POST":
                await respond(send, 405, b"method not allowed", TEXT, allow=b"POST")
                return
            await respond(send, 200, dumps(self._rpc(body)), JSON)
        else:
            await respond(send, 404, b"not found", TEXT)

    def _note_read(self) -> None:
        self._reads += 1
        if self._read_seen is not None:
            self._read_seen.set()
            self._read_seen = None

    # --- the cursor read ----------------------------------------------------------

    async def _trajectory(
        self, method: str, body: bytes | None, receive: Receive, send: Send
    ) -> None:
        if method != "POST":
            await respond(send, 405, b"method not allowed: use POST", TEXT, allow=b"POST")
            return
        fault = self._fault
        if fault is not None and fault.kind is FaultKind.SLOW and fault.seconds is not None:
            with anyio.move_on_after(fault.seconds):
                await until_disconnected(receive)
                return  # the client gave up: nobody to answer
        if fault is not None and fault.kind is FaultKind.UNAVAILABLE and self._unavailable(fault):
            await respond(send, fault.status or 503, b"agent unavailable", TEXT)
            return
        try:
            page = self._read(body)
        except BadRead as bad:
            await respond(send, bad.status, bad.text.encode(), TEXT)
            return
        await send_page(send, page, fault)

    def _unavailable(self, fault: Fault) -> bool:
        state = self._fault_state
        state.reads += 1
        if fault.reads is not None:
            return state.reads <= fault.reads
        if fault.seconds is not None:
            now = anyio.current_time()
            if state.since is None:
                state.since = now
            return now < state.since + fault.seconds
        return True

    def _read(self, body: bytes | None) -> dict[str, Any]:
        read = CursorRead.from_body(body)
        task = self._tasks.get(read.task_id)
        if task is None:
            raise BadRead(404, f"unknown task {read.task_id}")
        return read.page_of(
            task,
            now=anyio.current_time(),
            max_events=self.max_events_per_read,
            max_bytes=self.max_bytes_per_read,
        )

    # --- A2A JSON-RPC -------------------------------------------------------------

    def _rpc(self, body: bytes | None) -> dict[str, Any]:
        handlers = {
            "message/send": self._send_message,
            "tasks/get": self._get_task,
            "tasks/cancel": self._cancel_task,
        }
        return answer_rpc(body, handlers)

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        message = check_message(params.get("message"))
        configuration = params.get("configuration")
        if configuration is not None and not isinstance(configuration, dict):
            raise RpcError(INVALID_PARAMS, "configuration must be an object")
        history_length = history_length_param(configuration or {})
        now = anyio.current_time()
        task_id = message.get("taskId")
        if task_id is not None:
            task = self._known_task(task_id)
            if task.is_terminal(now):
                raise RpcError(INVALID_PARAMS, f"Task {task_id} is in terminal state")
            task.history.append({**message, "contextId": task.context_id})
            return task.to_json(now, history_length)
        task = ScriptedTask(
            id=str(uuid.uuid4()),
            context_id=message.get("contextId") or str(uuid.uuid4()),
            script=self.script,
            started_at=now,
            wall_start=datetime.now(UTC),
            history=[],
        )
        task.history.append({**message, "taskId": task.id, "contextId": task.context_id})
        self._tasks[task.id] = task
        return task.to_json(now, history_length)

    def _get_task(self, params: dict[str, Any]) -> dict[str, Any]:
        task = self._known_task(task_id_param(params))
        return task.to_json(anyio.current_time(), history_length_param(params))

    def _cancel_task(self, params: dict[str, Any]) -> dict[str, Any]:
        task = self._known_task(task_id_param(params))
        now = anyio.current_time()
        if task.is_terminal(now):
            state = task.status(now)[0]
            raise RpcError(TASK_NOT_CANCELABLE, f"Task cannot be canceled - current state: {state}")
        task.cancel(now)
        self._canceled += 1
        return task.to_json(now)

    def _known_task(self, task_id: str) -> ScriptedTask:
        task = self._tasks.get(task_id)
        if task is None:
            raise RpcError(TASK_NOT_FOUND)
        return task


def _noting_status(send: Send, arrival: _Arrival) -> Send:
    async def send_noting_status(message: Message) -> None:
        if message["type"] == "http.response.start":
            arrival.status = message["status"]
        await send(message)

    return send_noting_status
