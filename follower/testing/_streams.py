"""A task of the reference agent streamed as server-sent events, as its clock advances.

A :class:`TaskStream` is the answer to ``SubscribeToTask`` / ``SendStreamingMessage``
(A2A 1.0) or ``tasks/resubscribe`` / ``message/stream`` (0.3): a first ``task`` snapshot,
one status update per trajectory event (the event as the data part of the status's
message), and, once the task has ended, its artifact (when it completed) and a terminal
status update; then the stream ends. Each frame is ``data: <JSON-RPC response>`` and a blank
line.

The stream has no task of its own: :meth:`TaskStream.frames` is iterated by whatever carries
it (the ASGI app, or the in-process transport), and between frames it waits, with anyio,
until the next event is due or the agent changes (a cancel, a fault set). What the agent
does to open streams it decides through :class:`StreamHost`: a connection fault or a restart
cuts them (:class:`StreamCut`), a silent agent sends nothing until it speaks again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import attrs

from ._json import dumps
from ._v1 import artifact_v1, event_message, message_v1, state_v1

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from ._tasks import ScriptedTask

Version = Literal["1.0", "0.3"]
EVENT_STREAM = b"text/event-stream"


class StreamCut(Exception):
    """The agent drops the connection a stream runs on; its carrier closes it unfinished."""


class StreamHost(Protocol):
    """What a stream asks the agent that serves it."""

    def cuts(self, task: ScriptedTask) -> bool:
        """Whether the stream's connection is to be dropped now."""
        ...

    def silent(self) -> bool:
        """Whether the agent sends nothing now."""
        ...

    async def wait_for_change(self, deadline: float) -> None:
        """Return at ``deadline`` (``anyio.current_time()``'s clock) or once the agent changes."""
        ...


@attrs.define(eq=False)
class TaskStream:
    """The frames of one streamed task, from ``snapshot`` then event ``next_event`` on."""

    task: ScriptedTask
    version: Version
    snapshot: dict[str, Any]
    """The first frame's result: the task as the stream starts."""
    next_event: int
    """The first event sent as an update (those before it are in the snapshot)."""
    request_id: str | int | None = None

    async def frames(self, host: StreamHost) -> AsyncGenerator[bytes]:
        """Each frame as it is due, until the task's end; raises :class:`StreamCut`."""
        first = {"task": self.snapshot} if self.version == "1.0" else self.snapshot
        yield self._frame(first)
        task = self.task
        while True:
            if host.cuts(task):
                raise StreamCut
            now = anyio.current_time()
            if host.silent():
                await host.wait_for_change(float("inf"))
                continue
            visible = task.progress(now)[1]
            while self.next_event < visible:
                yield self._frame(self._event_update(self.next_event))
                self.next_event += 1
            if task.is_terminal(now):
                for result in self._ending(now):
                    yield self._frame(result)
                return
            await host.wait_for_change(self._next_due(now))

    def _next_due(self, now: float) -> float:
        script = self.task.script
        if self.next_event < script.events:
            due = script.event_offset_seconds(self.next_event)
        else:
            due = script.duration_seconds
        return max(now, self.task.started_at + due)

    def _frame(self, result: dict[str, Any]) -> bytes:
        response = {"id": self.request_id, "jsonrpc": "2.0", "result": result}
        return b"data: " + dumps(response) + b"\n\n"

    def _event_update(self, index: int) -> dict[str, Any]:
        task = self.task
        message = event_message(task, index)
        if self.version == "1.0":
            status = {"state": "TASK_STATE_WORKING", "message": message}
            return {"statusUpdate": self._ids({"status": status})}
        data = task.script.event(index)
        message_0_3 = {
            "kind": "message",
            "messageId": message["messageId"],
            "contextId": task.context_id,
            "taskId": task.id,
            "role": "agent",
            "parts": [{"kind": "data", "data": data}],
        }
        status = {"state": "working", "message": message_0_3}
        return self._ids({"kind": "status-update", "status": status, "final": False})

    def _ending(self, now: float) -> list[dict[str, Any]]:
        """The results after the last event: the artifact (if any), the terminal status."""
        task_0_3 = self.task.to_json(now)
        status_0_3 = task_0_3["status"]
        results = []
        for artifact in task_0_3.get("artifacts", []):
            if self.version == "1.0":
                update = {"artifact": artifact_v1(artifact), "lastChunk": True}
                results.append({"artifactUpdate": self._ids(update)})
            else:
                update = {"kind": "artifact-update", "artifact": artifact, "lastChunk": True}
                results.append(self._ids(update))
        if self.version == "1.0":
            status = {"state": state_v1(status_0_3["state"]), "timestamp": status_0_3["timestamp"]}
            if "message" in status_0_3:
                status["message"] = message_v1(status_0_3["message"])
            results.append({"statusUpdate": self._ids({"status": status})})
        else:
            results.append(
                self._ids({"kind": "status-update", "status": status_0_3, "final": True})
            )
        return results

    def _ids(self, update: dict[str, Any]) -> dict[str, Any]:
        return {"taskId": self.task.id, "contextId": self.task.context_id, **update}
