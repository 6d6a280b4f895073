"""Agents to follow in tests: a scripted ASGI agent, and raw sockets that misbehave.

The scripted agent serves the trajectory extension's cursor read (docs/protocol.md)
for tasks whose events the test publishes step by step, and records every
read, so tests order themselves on what the agent saw, never on sleeps. The
property tests' agent (:class:`tests.properties.fakes.WorldAgent`) answers from
a script fixed before the run instead; both build their pages with
:func:`cursor_page`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import attrs
import httpx

from follower import TrajectoryState

ENDPOINT = "http://agent.test/ext/trajectory"

# A fault answers a read instead of the agent: (status, body) or an exception to raise.
Fault = tuple[int, bytes | str | dict[str, Any]] | BaseException


def cursor_page(
    task_id: str,
    state: TrajectoryState,
    format: str | None,
    events: Sequence[Any],
    after: int,
    page_limit: int,
) -> dict[str, Any]:
    """The page a cursor read from ``after`` gets, ``events`` being all there is to read.

    ``state`` is read before ``events``, as the extension requires: a terminal
    state then means every event is in ``events``.
    """
    page = list(events[after : after + page_limit])
    next_ = after + len(page)
    return {
        "context_id": "ctx",
        "task_id": task_id,
        "state": state.value,
        "format": format,
        "events": page,
        "next": next_,
        "has_more": next_ < len(events),
    }


@attrs.define
class ScriptedTask:
    task_id: str
    events: list[Any] = attrs.field(factory=list)
    visible: int = 0
    state: TrajectoryState = TrajectoryState.PENDING
    format: str | None = "test/v1"


@attrs.define
class Read:
    task_id: str
    after: int
    at: float
    answered: int | None = None


@attrs.define(eq=False)
class ScriptedAgent:
    """An ASGI agent whose tasks' trajectories the test drives, statement by statement."""

    page_limit: int = 1000
    tasks: dict[str, ScriptedTask] = attrs.field(factory=dict)
    reads: list[Read] = attrs.field(factory=list)
    faults: list[Fault] = attrs.field(factory=list)
    _read_seen: anyio.Event = attrs.field(factory=anyio.Event)

    # --- driving the script -------------------------------------------------------

    def add_task(self, task_id: str = "t1", *, format: str | None = "test/v1") -> ScriptedTask:
        task = ScriptedTask(task_id, format=format)
        self.tasks[task_id] = task
        return task

    def publish(self, task_id: str, *events: Any) -> None:
        task = self.tasks[task_id]
        task.events.extend(events)
        task.visible = len(task.events)
        if task.state is TrajectoryState.PENDING:
            task.state = TrajectoryState.RUNNING

    def finish(self, task_id: str, state: TrajectoryState = TrajectoryState.COMPLETED) -> None:
        # Sealed before the terminal state is published, as real agents do.
        self.tasks[task_id].state = state

    def forget(self) -> None:
        """Restart: every task is unknown from now on (404)."""
        self.tasks.clear()

    async def wait_reads(self, count: int) -> None:
        """Return once the agent has seen ``count`` reads in all."""
        while len(self.reads) < count:
            await self._read_seen.wait()

    # --- serving ----------------------------------------------------------------

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, answer = self._answer(scope["method"], body)
        payload = (
            answer
            if isinstance(answer, bytes)
            else (answer.encode() if isinstance(answer, str) else json.dumps(answer).encode())
        )
        ctype = b"application/json" if isinstance(answer, dict) else b"text/plain"
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", ctype)]}
        )
        await send({"type": "http.response.body", "body": payload})

    def _answer(self, method: str, body: bytes) -> tuple[int, bytes | str | dict[str, Any]]:
        if method != "POST":
            return 405, "method not allowed"
        try:
            request = json.loads(body)
            task_id, after = request["task_id"], request["after"]
        except (ValueError, KeyError, TypeError):
            return 400, "bad body"
        read = Read(task_id, after, anyio.current_time())
        self.reads.append(read)
        self._read_seen.set()
        self._read_seen = anyio.Event()
        if self.faults:
            fault = self.faults.pop(0)
            if isinstance(fault, BaseException):
                raise fault
            read.answered = fault[0]
            return fault
        task = self.tasks.get(task_id)
        if task is None:
            read.answered = 404
            return 404, f"unknown task {task_id}"
        if not isinstance(after, int) or after < 0 or after > task.visible:
            read.answered = 400
            return 400, f"after={after} is past the end"
        state = task.state  # read before the length, as the extension requires
        read.answered = 200
        return 200, cursor_page(
            task_id, state, task.format, task.events[: task.visible], after, self.page_limit
        )

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self), **kwargs)


# --- raw sockets that misbehave -------------------------------------------------------


@attrs.define(eq=False)
class BadServer:
    """A loopback TCP server that accepts connections and then misbehaves."""

    url: str
    accepted: int = 0
    _accepted_event: anyio.Event = attrs.field(factory=anyio.Event)

    async def wait_accepted(self, count: int) -> None:
        while self.accepted < count:
            await self._accepted_event.wait()

    def _note_accept(self) -> None:
        self.accepted += 1
        self._accepted_event.set()
        self._accepted_event = anyio.Event()


@asynccontextmanager
async def bad_server(behaviour: str) -> AsyncIterator[BadServer]:
    """``closing``: close every connection at once; ``silent``: accept, never answer."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    server = BadServer(f"http://127.0.0.1:{port}/ext/trajectory")

    async def handle(stream: anyio.abc.SocketStream) -> None:
        server._note_accept()
        async with stream:
            if behaviour == "silent":
                await anyio.sleep_forever()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


class RecordingSink:
    """A sink that keeps the batches it is given."""

    def __init__(self, on_batch: Callable[[Any], None] | None = None) -> None:
        self.batches: list[Any] = []
        self._on_batch = on_batch

    async def __call__(self, batch: Any) -> None:
        self.batches.append(batch)
        if self._on_batch is not None:
            self._on_batch(batch)

    @property
    def events(self) -> list[Any]:
        return [e for b in self.batches for e in b.events]
