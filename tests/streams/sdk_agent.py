"""A streaming A2A v1.0 agent built with the official SDK (a2a-sdk 1.x), the peer of tests/streams.

Run by the test venv's python as a program of its own, never imported by the tests (the SDK's
server side is asyncio-only, and the tests run under trio too):

    python sdk_agent.py [--host 127.0.0.1] [--port 0]

It serves the agent on 127.0.0.1 (port 0: any free port; the socket is bound before uvicorn
starts, so the port is known) and prints ``listening on <url>`` once uvicorn has started. The
card (``/.well-known/agent-card.json``) offers streaming; JSON-RPC is served at ``/a2a``, in
A2A 1.0 (with the ``A2A-Version: 1.0`` header) and in 0.3 (the SDK's compat layer).

Each task runs the script its message's text holds, a JSON object (a text that is not one runs
the defaults):

- ``updates`` (default 3): working status updates, the message text of update ``i`` is
  ``"update i"``;
- ``chunks`` (default 0): chunks of one artifact (``result``), the text of chunk ``i`` is
  ``"chunk i"``; update ``i`` comes before chunk ``i``, chunk ``i`` before update ``i + 1``;
- ``interval`` (default 0.05): seconds before each update and each chunk;
- ``gate`` (default false): once working, emit nothing until ``POST /test/gates/<task id>``
  opens the task's gate (so a test can subscribe before any scripted event, without timing);
- ``hold`` (default 0): seconds of staying working, emitting nothing, after the last event;
- ``end`` (default ``completed``): ``completed``, ``failed``, ``input-required``, or ``none``
  (the executor returns with no terminal event: the stream ends without a final state).

``CancelTask`` / ``tasks/cancel`` cancel a running task (its script stops where it is). The agent
exits when its standard input closes (so it never outlives the session that started it) or on
SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import threading
from typing import Any

import uvicorn
from a2a.helpers import get_message_text, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

RPC_PATH = "/a2a"
ARTIFACT_ID = "result"
ENDS = ("completed", "failed", "input-required", "none")
DEFAULTS: dict[str, Any] = {
    "updates": 3,
    "chunks": 0,
    "interval": 0.05,
    "gate": False,
    "hold": 0.0,
    "end": "completed",
}
START_SECONDS = 30.0


class TaskControl:
    """What the outside can do to one task while it runs: open its gate, cancel it."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.canceled = asyncio.Event()

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds``; True if the task was canceled meanwhile (stop at once)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.canceled.wait(), seconds)
        return self.canceled.is_set()

    async def pass_gate(self) -> bool:
        """Wait for the gate; True if the task was canceled first."""
        gate = asyncio.ensure_future(self.gate.wait())
        canceled = asyncio.ensure_future(self.canceled.wait())
        try:
            await asyncio.wait((gate, canceled), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gate.cancel()
            canceled.cancel()
        return self.canceled.is_set()


class Controls:
    """Every task's control, made by whichever side asks first (the gate may open early)."""

    def __init__(self) -> None:
        self._controls: dict[str, TaskControl] = {}

    def of(self, task_id: str) -> TaskControl:
        return self._controls.setdefault(task_id, TaskControl())


def read_script(text: str) -> dict[str, Any]:
    """The script a message's text holds, over the defaults; raises ValueError when bad."""
    try:
        given = json.loads(text)
    except ValueError:
        given = {}
    if not isinstance(given, dict):
        given = {}
    unknown = set(given) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown script fields: {sorted(unknown)}")
    script = {**DEFAULTS, **given}
    if script["end"] not in ENDS:
        raise ValueError(f"end must be one of {ENDS}, not {script['end']!r}")
    return script


class ScriptedExecutor(AgentExecutor):
    """Runs each task's script through the SDK's TaskUpdater."""

    def __init__(self, controls: Controls) -> None:
        self._controls = controls

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        assert context.task_id is not None
        assert context.context_id is not None
        if context.current_task is None:
            # The SDK wants the task itself before any status update of it.
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        try:
            script = read_script(get_message_text(context.message))
        except ValueError as exc:
            await updater.failed(updater.new_agent_message([Part(text=f"bad script: {exc}")]))
            return
        control = self._controls.of(context.task_id)
        await updater.start_work()
        if script["gate"] and await control.pass_gate():
            return
        chunks = script["chunks"]
        for index in range(max(script["updates"], chunks)):
            if index < script["updates"]:
                if await control.pause(script["interval"]):
                    return
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    message=updater.new_agent_message([Part(text=f"update {index}")]),
                )
            if index < chunks:
                if await control.pause(script["interval"]):
                    return
                await updater.add_artifact(
                    [Part(text=f"chunk {index}")],
                    artifact_id=ARTIFACT_ID,
                    name=ARTIFACT_ID,
                    # The SDK refuses a first chunk that appends.
                    append=index > 0,
                    last_chunk=index == chunks - 1,
                )
        if script["hold"] and await control.pause(script["hold"]):
            return
        end = script["end"]
        done = updater.new_agent_message([Part(text=f"end {end}")])
        if end == "completed":
            await updater.complete(done)
        elif end == "failed":
            await updater.failed(done)
        elif end == "input-required":
            await updater.requires_input(done)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        self._controls.of(context.task_id).canceled.set()
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def build_app(url: str) -> Starlette:
    """The agent's Starlette app, its card naming ``url`` (its base URL)."""
    card = AgentCard(
        name="sdk streaming peer",
        description="A scripted A2A 1.0 agent built with a2a-sdk, for the stream follower's tests.",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True),
        supported_interfaces=[
            AgentInterface(url=url + RPC_PATH, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="scripted-task",
                name="Scripted task",
                description="Runs the script its message holds.",
                tags=["testing"],
            )
        ],
    )
    controls = Controls()
    handler = DefaultRequestHandler(
        agent_executor=ScriptedExecutor(controls),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )

    async def open_gate(request: Request) -> JSONResponse:
        controls.of(request.path_params["task_id"]).gate.set()
        return JSONResponse({"opened": request.path_params["task_id"]})

    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, RPC_PATH, enable_v0_3_compat=True),
        Route("/test/gates/{task_id}", open_gate, methods=["POST"]),
    ]
    return Starlette(routes=routes)


async def serve(sock: socket.socket, url: str) -> None:
    config = uvicorn.Config(
        build_app(url),
        log_level="warning",
        access_log=False,
        lifespan="on",
        # SIGTERM cuts open streams after this long rather than waiting for them.
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_SECONDS
    while not server.started:
        if serving.done() or loop.time() > deadline:
            break
        await asyncio.sleep(0.01)
    if server.started:
        print(f"listening on {url}", flush=True)
    await serving


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)
    host, port = sock.getsockname()[:2]
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    asyncio.run(serve(sock, f"http://{host}:{port}"))


def _exit_when_stdin_closes() -> None:
    try:
        sys.stdin.buffer.read()
    finally:
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    main()
