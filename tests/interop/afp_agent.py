"""An agent built with the existing framework (agentenv-framework-protocol), for interop tests.

Run by the interop venv's python (tools/interop-venv), never imported by the test venvs:

    python afp_agent.py [--port 0] [--events N] [--interval S]

It serves the framework's A2A agent on 127.0.0.1 with the live trajectory extension
(``enable(TRAJECTORY_V1, live=True)``) and prints ``listening on <url>`` once its socket
listens. Each task appends ``events`` events, one every ``interval`` seconds, then
completes. A message may override that per task, in its metadata under ``"interop"``
or as its text, a JSON object:

- ``events``, ``interval``: as the command line's;
- ``pad_bytes``: each event carries a string of that many bytes (large pages);
- ``lockstep``: append event ``i`` (i >= 1) only once a cursor read of the task with
  ``after >= i`` has reached the agent, so every event is read while the task runs;
- ``fail``: end the task as failed instead of completed.

The framework cancels ``run()`` on ``tasks/cancel``. The agent exits when its standard
input closes (so it never outlives the test session that started it) or on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import threading
from typing import Any

import uvicorn
from agentenv_protocol.a2a_agent import (
    TRAJECTORY_V1,
    AgentConfig,
    AgentEnvAgent,
    AgentIdentity,
    TaskRequest,
    TaskResult,
    a2a_agent,
    enable,
)

FORMAT = "interop-events/1"
LOCKSTEP_WAIT_SECONDS = 20.0


class CursorReads:
    """The highest ``after`` each task's cursor reads asked for, seen as the reads arrive."""

    def __init__(self) -> None:
        self._after: dict[str, int] = {}
        self._changed = asyncio.Condition()

    async def saw(self, task_id: str, after: int) -> None:
        async with self._changed:
            if after > self._after.get(task_id, -1):
                self._after[task_id] = after
                self._changed.notify_all()

    async def wait(self, task_id: str, after: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self._after.get(task_id, -1) >= after)


class WatchCursorReads:
    """ASGI middleware: note each cursor read's ``task_id`` and ``after``, then pass it on."""

    def __init__(self, app: Any, reads: CursorReads, path: str) -> None:
        self.app = app
        self.reads = reads
        self.path = path

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            fields = json.loads(body)
            task_id, after = fields["task_id"], fields["after"]
        except (ValueError, TypeError, KeyError):
            pass
        else:
            if isinstance(task_id, str) and isinstance(after, int):
                await self.reads.saw(task_id, after)
        replayed = _replay([{"type": "http.request", "body": body}], receive)
        await self.app(scope, replayed, send)


def _replay(messages: list[Any], receive: Any) -> Any:
    """A receive that hands out ``messages`` first, then the connection's own."""
    pending = list(messages)

    async def replayed() -> Any:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def build_agent(events: int, interval: float, reads: CursorReads) -> AgentEnvAgent:
    @a2a_agent(
        identity=AgentIdentity(
            name="follower-interop-agent",
            description="Appends a scripted number of trajectory events, then completes.",
            version="1.0.0",
        ),
        extensions=(enable(TRAJECTORY_V1, live=True),),
    )
    class ScriptedAgent(AgentEnvAgent):
        async def run(self, request: TaskRequest[AgentConfig]) -> TaskResult:
            script = _script(request)
            count = int(script.get("events", events))
            every = float(script.get("interval", interval))
            pad = "x" * int(script.get("pad_bytes", 0))
            lockstep = bool(script.get("lockstep", False))
            log = request.trajectory
            log.set_format(FORMAT)
            for index in range(count):
                if lockstep and index:
                    await asyncio.wait_for(
                        reads.wait(request.task_id, index), LOCKSTEP_WAIT_SECONDS
                    )
                event: dict[str, Any] = {"index": index, "task": request.task_id}
                if pad:
                    event["pad"] = pad
                log.append(event)
                # Yield even at interval 0, so reads and cancels get their turn.
                await asyncio.sleep(every)
            if script.get("fail"):
                return TaskResult.failure("interop.scripted_failure", "failed as scripted")
            return TaskResult.text(f"appended {count} events")

    return ScriptedAgent()


def _script(request: TaskRequest[AgentConfig]) -> dict[str, Any]:
    """The task's script: the message's ``interop`` metadata, or its text if that is JSON."""
    script = request.metadata.get("interop")
    if script is None:
        for part in request.parts:
            text = getattr(part, "text", None)
            if isinstance(text, str) and text.lstrip().startswith("{"):
                script = json.loads(text)
                break
    return dict(script or {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()

    reads = CursorReads()
    agent = build_agent(args.events, args.interval, reads)
    app = WatchCursorReads(agent.create_app(), reads, TRAJECTORY_V1.endpoint)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)
    host, port = sock.getsockname()[:2]

    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    print(f"listening on http://{host}:{port}", flush=True)
    asyncio.run(server.serve(sockets=[sock]))


def _exit_when_stdin_closes() -> None:
    try:
        sys.stdin.buffer.read()
    finally:
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    main()
