"""The reference agent: an ASGI app that a test can make misbehave, and its statistics.

It serves an A2A agent card, A2A JSON-RPC 2.0 (0.3, and 1.0's names with the
``A2A-Version: 1.0`` header), its tasks streamed as server-sent events, and the
trajectory extension's cursor read (docs/protocol.md). This module routes
requests and keeps the agent's state: its tasks, its fault and its counts. The
rules of each part sit in the modules below it: ``_tasks``, ``_jsonrpc``,
``_v1``, ``_streams``, ``_cursor_read``, ``_fault_pages``, ``_asgi`` and
``_transport``.

Tasks have no background task behind them: each answer computes the task's
progress from the clock (see ``_script``), so the state and the number of events
come from one reading of the clock, and the log is always sealed before the
terminal state shows. A stream has no task either: whatever carries it iterates
its frames, which wait for the clock (or a change of the agent) between them.
Connection-level faults (``close``, ``gone``) are played by whatever carries the
requests: :meth:`ReferenceAgent.transport` in-process, and the TCP front of
:func:`~follower.testing.serve_agent` on a loopback socket; they cut open streams
too, as does ``restart``.
"""

from __future__ import annotations

import json
import selectors
import uuid
from contextlib import aclosing, contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.lowlevel
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
    UNSUPPORTED_OPERATION,
    RpcError,
    answer_rpc,
    check_message,
    history_length_param,
    task_id_param,
)
from ._script import TaskScript
from ._streams import EVENT_STREAM, StreamCut, TaskStream, Version
from ._tasks import ScriptedTask
from ._transport import InProcessTransport
from ._v1 import VERSION_NOT_SUPPORTED, message_from_v1, task_v1

if TYPE_CHECKING:
    import socket
    from collections.abc import AsyncGenerator, Callable, Iterable, Iterator

    from ._asgi import Message, Receive, Scope, Send
    from ._faults import Fault
    from ._jsonrpc import Handler, StreamAnswer

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
RPC_PATH = "/"
VERSION_HEADER = "a2a-version"
# The methods whose answer is a stream, in 1.0 and in 0.3.
STREAM_METHODS = frozenset(
    {"SubscribeToTask", "SendStreamingMessage", "tasks/resubscribe", "message/stream"}
)
_STREAM_HEADERS = [(b"content-type", EVENT_STREAM), (b"cache-control", b"no-cache")]


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
    """Tasks canceled by ``tasks/cancel`` (or ``CancelTask``)."""
    streams: int = 0
    """Event streams opened (``SubscribeToTask``, ``tasks/resubscribe``, and the streamed sends)."""


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
    traceparent: str | None = None
    """Its W3C ``traceparent`` header, if it had one: the trace the request is part of."""
    tracestate: str | None = None
    """Its W3C ``tracestate`` header, if it had one."""


@attrs.define(eq=False)
class _Arrival:
    at: float
    path: str | None
    status: int | None = None
    traceparent: str | None = None
    tracestate: str | None = None

    def frozen(self) -> AgentRequest:
        return AgentRequest(self.at, self.path, self.status, self.traceparent, self.tracestate)


@attrs.define(eq=False)
class _FaultState:
    """What a fault has done so far; reset whenever the fault is set."""

    reads: int = 0
    since: float | None = None
    gone: bool = False


@attrs.define(eq=False)
class ReferenceAgent:
    """A scripted A2A agent serving the live trajectory extension; an ASGI app.

    Every ``message/send`` (1.0: ``SendMessage``) starts a task that runs
    :attr:`script` (read when the message arrives, so it can change between tasks)
    and answers at once with the task, whatever ``configuration.blocking`` (1.0:
    ``returnImmediately``) says; a message naming a running task's ``taskId``
    joins its history. Tasks stream as server-sent events: ``SubscribeToTask``
    and ``SendStreamingMessage`` in 1.0's shapes (with the ``A2A-Version: 1.0``
    header), ``tasks/resubscribe`` and ``message/stream`` in 0.3's: a ``task``
    snapshot, a status update per event, the terminal status, then the stream
    ends. :attr:`fault` makes the agent misbehave until it is set back to
    ``None``. Use it in-process with :meth:`client` (or :meth:`transport`, which
    streams too), or on a loopback socket with :func:`~follower.testing.serve_agent`.
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
    _streams: int = attrs.field(default=0, init=False)
    _changed: anyio.Event | None = attrs.field(default=None, init=False)
    _read_seen: anyio.Event | None = attrs.field(default=None, init=False)
    _arrivals: list[_Arrival] = attrs.field(factory=list, init=False)
    _arrival_seen: anyio.Event | None = attrs.field(default=None, init=False)
    # Connections and chunks the carriers passed on (each asks ``drops_connection``).
    _carried: int = attrs.field(default=0, init=False)
    _carrier_sockets: set[socket.socket] = attrs.field(factory=set, init=False)

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
        self._note_change()

    def statistics(self) -> AgentStatistics:
        """What the agent has seen so far."""
        return AgentStatistics(
            tasks=len(self._tasks),
            reads=self._reads,
            rpc_calls=self._rpc_calls,
            dropped_connections=self._dropped,
            canceled_tasks=self._canceled,
            streams=self._streams,
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

    async def wait_quiet(self) -> None:
        """Return once every request sent to the agent so far has reached it, and every task waits.

        A test that asserts what a client did *not* send after some moment needs
        this on a socket (:func:`~follower.testing.serve_agent`), where
        :func:`anyio.wait_all_tasks_blocked` is not enough: on asyncio a task
        waiting on a socket whose bytes the loop has not polled yet counts as
        blocked, so a request just sent can still be on its way through the
        serving front. Here the loop also polls its sockets, and it returns only
        once the front's sockets hold nothing unread and nothing reached the
        agent meanwhile. A client that sends without pause keeps the agent from
        ever being quiet: bound the wait.
        """
        while True:
            await anyio.wait_all_tasks_blocked()
            seen = self._progress()
            # The first turn of the loop polls its sockets; the second runs what found bytes.
            await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()
            await anyio.wait_all_tasks_blocked()
            # After a sleep of its own, anyio's wait looks behind tasks that the same turn
            # woke, and one may just have sent: the front's sockets say so.
            if self._progress() == seen and not self._carrier_bytes_waiting():
                return

    def _progress(self) -> tuple[int, int, int, int]:
        return (self._carried, len(self._arrivals), self._reads, self._rpc_calls)

    def _carrier_bytes_waiting(self) -> bool:
        """Whether a carrier's socket holds a connection or bytes not read yet."""
        sockets = [sock for sock in self._carrier_sockets if sock.fileno() != -1]
        if not sockets:
            return False
        with selectors.DefaultSelector() as selector:
            for sock in sockets:
                selector.register(sock, selectors.EVENT_READ)
            return bool(selector.select(0))

    def _check_logging(self) -> None:
        if not self.log_requests:
            raise ValueError("the request log needs ReferenceAgent(log_requests=True)")

    def _note_arrival(
        self, path: str | None, headers: Callable[[], Iterable[tuple[str, str]]] | None = None
    ) -> _Arrival | None:
        if not self.log_requests:
            return None
        arrival = _Arrival(anyio.current_time(), path)
        for name, value in headers() if headers is not None else ():
            if name.lower() == "traceparent":
                arrival.traceparent = value
            elif name.lower() == "tracestate":
                arrival.tracestate = value
        self._arrivals.append(arrival)
        if self._arrival_seen is not None:
            self._arrival_seen.set()
            self._arrival_seen = None
        return arrival

    def card(self, base_url: str) -> dict[str, Any]:
        """The agent card, as served at ``base_url``: A2A 0.3's fields and 1.0's."""
        url = self.card_url or base_url
        return {
            "name": self.name,
            "description": "A scripted agent that serves the live trajectory extension, for tests.",
            "url": url,
            "version": "1.0.0",
            "protocolVersion": "0.3.0",
            "preferredTransport": "JSONRPC",
            "supportedInterfaces": [
                {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {
                "streaming": True,
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
        return InProcessTransport(self, self.drops_connection, self._in_process_stream)

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
        self._carried += 1
        if not self._drops():
            return False
        self._note_arrival(None)
        return True

    @contextmanager
    def carrying(self, sock: socket.socket) -> Iterator[None]:
        """For carriers on sockets: while in it, ``sock`` may hold requests on their way here.

        The serving front of :func:`~follower.testing.serve_agent` names its
        listening sockets and each client's connection, so that :meth:`wait_quiet`
        can see a request that is sent but not read yet. Tests have no need of it.
        """
        self._carrier_sockets.add(sock)
        try:
            yield
        finally:
            self._carrier_sockets.discard(sock)

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
        version = _version(scope)
        body = await read_body(receive)
        arrival = self._note_arrival(path, lambda: _fields(scope))
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
            answer = self._rpc(body, version)
            if isinstance(answer, TaskStream):
                await self._send_stream(answer, receive, send)
                return
            await respond(send, 200, dumps(answer), JSON)
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

    def _rpc(self, body: bytes | None, version: str | None) -> dict[str, Any] | StreamAnswer:
        handlers: dict[str, Handler] = {
            "message/send": self._send_message,
            "tasks/get": self._get_task,
            "tasks/cancel": self._cancel_task,
            "tasks/resubscribe": lambda params: self._subscribe(params, "0.3"),
            "message/stream": lambda params: self._send_streaming(params, "0.3"),
        }
        v1: dict[str, Handler] = {
            "SendMessage": self._send_message_v1,
            "GetTask": self._get_task_v1,
            "CancelTask": self._cancel_task_v1,
            "SubscribeToTask": lambda params: self._subscribe(params, "1.0"),
            "SendStreamingMessage": lambda params: self._send_streaming(params, "1.0"),
        }
        for name, handler in v1.items():
            # As a2a-sdk 1.x: without the header, a call is taken as 0.3's, which
            # has no method of that name.
            handlers[name] = handler if version == "1.0" else _version_not_supported
        return answer_rpc(body, handlers)

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        now, task = self._start_task(params)
        return task.to_json(now, history_length_param(params.get("configuration") or {}))

    def _send_message_v1(self, params: dict[str, Any]) -> dict[str, Any]:
        params = {**params, "message": message_from_v1(params.get("message"))}
        now, task = self._start_task(params)
        history_length = history_length_param(params.get("configuration") or {})
        return {"task": task_v1(task, now, history_length=history_length)}

    def _get_task_v1(self, params: dict[str, Any]) -> dict[str, Any]:
        task = self._known_task(task_id_param(params))
        return task_v1(task, anyio.current_time(), history_length=history_length_param(params))

    def _cancel_task_v1(self, params: dict[str, Any]) -> dict[str, Any]:
        self._cancel_task(params)
        return task_v1(self._known_task(task_id_param(params)), anyio.current_time())

    def _subscribe(self, params: dict[str, Any], version: Version) -> TaskStream:
        task = self._known_task(task_id_param(params))
        now = anyio.current_time()
        if task.is_terminal(now):
            state = task.status(now)[0]
            raise RpcError(UNSUPPORTED_OPERATION, f"Task {task.id} is in terminal state: {state}")
        events = task.progress(now)[1]
        snapshot = task_v1(task, now) if version == "1.0" else task.to_json(now)
        return TaskStream(task, version, snapshot, next_event=events)

    def _send_streaming(self, params: dict[str, Any], version: Version) -> TaskStream:
        if version == "1.0":
            params = {**params, "message": message_from_v1(params.get("message"))}
        now, task = self._start_task(params)
        # The task as it was created: every event comes as an update.
        if version == "1.0":
            snapshot = task_v1(task, now, events=0, state="submitted")
        else:
            snapshot = task.to_json(now)
            snapshot["status"] = {**snapshot["status"], "state": "submitted"}
            snapshot.pop("artifacts", None)
            snapshot["status"].pop("message", None)
        return TaskStream(task, version, snapshot, next_event=0)

    def _start_task(self, params: dict[str, Any]) -> tuple[float, ScriptedTask]:
        """Start the task ``params.message`` asks for (or join its running task)."""
        message = check_message(params.get("message"))
        configuration = params.get("configuration")
        if configuration is not None and not isinstance(configuration, dict):
            raise RpcError(INVALID_PARAMS, "configuration must be an object")
        history_length_param(configuration or {})
        now = anyio.current_time()
        task_id = message.get("taskId")
        if task_id is not None:
            task = self._known_task(task_id)
            if task.is_terminal(now):
                raise RpcError(INVALID_PARAMS, f"Task {task_id} is in terminal state")
            task.history.append({**message, "contextId": task.context_id})
            return now, task
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
        return now, task

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
        self._note_change()
        return task.to_json(now)

    def _known_task(self, task_id: str) -> ScriptedTask:
        task = self._tasks.get(task_id)
        if task is None:
            raise RpcError(TASK_NOT_FOUND)
        return task

    # --- streams ------------------------------------------------------------------

    def cuts(self, task: ScriptedTask) -> bool:
        """Whether a stream of ``task`` is dropped now: a connection fault, or a restart."""
        return self._tasks.get(task.id) is not task or self._drops()

    def silent(self) -> bool:
        """Whether the agent sends nothing now (the ``silent`` fault)."""
        return self._fault is not None and self._fault.kind is FaultKind.SILENT

    async def wait_for_change(self, deadline: float) -> None:
        """Return at ``deadline``, when the agent changes, or when it goes away (``gone``)."""
        fault = self._fault
        if fault is not None and fault.kind is FaultKind.GONE and fault.after_events is not None:
            times = (task.gone_at(fault.after_events) for task in self._tasks.values())
            deadline = min([deadline, *(at for at in times if at is not None)])
        if self._changed is None:
            self._changed = anyio.Event()
        with anyio.CancelScope(deadline=deadline):
            await self._changed.wait()

    def _note_change(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _open_stream(self, stream: TaskStream) -> AsyncGenerator[bytes]:
        self._streams += 1
        return stream.frames(self)

    async def _send_stream(self, stream: TaskStream, receive: Receive, send: Send) -> None:
        """Send ``stream`` over ASGI until it ends or the client goes away."""
        await send({"type": "http.response.start", "status": 200, "headers": _STREAM_HEADERS})
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when_disconnected, receive, tg.cancel_scope)
            try:
                async with aclosing(self._open_stream(stream)) as frames:
                    async for frame in frames:
                        await send({"type": "http.response.body", "body": frame, "more_body": True})
            except StreamCut:
                # Returning with the body unfinished: the server closes the connection
                # (hypercorn quietly), and the client sees the stream cut short.
                pass
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()

    async def _in_process_stream(self, request: httpx.Request) -> httpx.Response | None:
        """A stream's answer for :meth:`transport`, or None for a request that is no stream.

        ``httpx.ASGITransport`` sends a response only once the app has finished
        it; a stream must reach the client frame by frame, so the transport
        takes streams here, where its response body iterates the frames.
        """
        if request.method != "POST" or request.url.path != RPC_PATH:
            return None
        body = await request.aread()
        if not _is_stream_request(body):
            return None
        arrival = self._note_arrival(RPC_PATH, request.headers.multi_items)
        self._rpc_calls += 1
        if self._fault is not None and self._fault.kind is FaultKind.SILENT:
            await anyio.sleep_forever()
        answer = self._rpc(body, request.headers.get(VERSION_HEADER))
        if arrival is not None:
            arrival.status = 200
        if not isinstance(answer, TaskStream):
            headers = {"content-type": JSON.decode()}
            return httpx.Response(200, headers=headers, content=dumps(answer), request=request)
        stream = _InProcessFrames(lambda: self._open_stream(answer), self._note_drop)
        headers = {name.decode(): value.decode() for name, value in _STREAM_HEADERS}
        return httpx.Response(200, headers=headers, stream=stream, request=request)

    def _note_drop(self) -> None:
        self._note_arrival(None)


class _InProcessFrames(httpx.AsyncByteStream):
    """A stream's frames as an httpx response body; a cut fails it as a closed socket does.

    An iterator, not an async generator, so that closing the response closes the frames
    at once, in the reader's task.
    """

    def __init__(
        self, open_frames: Callable[[], AsyncGenerator[bytes]], note_drop: Callable[[], None]
    ) -> None:
        self._open_frames = open_frames
        self._note_drop = note_drop
        self._frames: AsyncGenerator[bytes] | None = None

    def __aiter__(self) -> _InProcessFrames:
        if self._frames is None:
            self._frames = self._open_frames()
        return self

    async def __anext__(self) -> bytes:
        assert self._frames is not None
        try:
            return await anext(self._frames)
        except StreamCut:
            self._note_drop()
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            ) from None

    async def aclose(self) -> None:
        if self._frames is not None:
            await self._frames.aclose()


async def _cancel_when_disconnected(receive: Receive, scope: anyio.CancelScope) -> None:
    await until_disconnected(receive)
    scope.cancel()


def _fields(scope: Scope) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in scope["headers"]]


def _version(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == VERSION_HEADER.encode():
            return str(value.decode("latin-1")).strip()
    return None


def _is_stream_request(body: bytes) -> bool:
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(request, dict) and request.get("method") in STREAM_METHODS


def _version_not_supported(params: dict[str, Any]) -> dict[str, Any]:
    raise RpcError(VERSION_NOT_SUPPORTED)


def _noting_status(send: Send, arrival: _Arrival) -> Send:
    async def send_noting_status(message: Message) -> None:
        if message["type"] == "http.response.start":
            arrival.status = message["status"]
        await send(message)

    return send_noting_status
