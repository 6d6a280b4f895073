"""The trajectory extension's cursor read, as the reference agent serves it.

A read names a task and a cursor (``after``, the number of events already
read); the answer is a page of the events that follow. The page's state and
the trajectory's length come from one reading of the clock, so a terminal
state means every event is there to be read (the cursor read, docs/protocol.md).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from .._format._wire import TRAJECTORY_EXTENSION_URI
from ._json import dumps, is_int

if TYPE_CHECKING:
    from ._tasks import ScriptedTask

TRAJECTORY_PATH = "/ext/trajectory"
MAX_EVENTS_PER_READ = 1000
MAX_BYTES_PER_READ = 4 * 1024 * 1024

CURSOR_READ_SCHEMA = {
    "oneOf": [
        {"required": ["task_id"]},
        {"required": ["task_id", "after"], "optional": ["limit"]},
    ]
}
TRAJECTORY_EXTENSION = {
    "uri": TRAJECTORY_EXTENSION_URI,
    "description": "The events a task appends while it runs, read by cursor.",
    "required": False,
    "params": {
        "endpoint": TRAJECTORY_PATH,
        "methods": {"get": {"method": "POST", "request": CURSOR_READ_SCHEMA}},
    },
}


class BadRead(Exception):
    """A trajectory read the agent answers with a plain-text 4xx."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


@attrs.frozen
class CursorRead:
    """One read as asked: the task, the cursor, and at most how many events."""

    task_id: str
    after: int
    limit: int | None

    @classmethod
    def from_body(cls, body: bytes | None) -> CursorRead:
        """The read a request body asks for; :class:`BadRead` (400) if it asks it wrong."""
        if body is None:
            raise BadRead(400, "body too large")
        try:
            request = json.loads(body)
        except (ValueError, RecursionError):
            raise BadRead(400, "body is not JSON") from None
        if not isinstance(request, dict):
            raise BadRead(400, "body is not a JSON object")
        unknown = set(request) - {"task_id", "after", "limit"}
        if unknown:
            raise BadRead(400, f"unknown fields: {', '.join(sorted(unknown))}")
        task_id = request.get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise BadRead(400, "task_id must be a non-empty string")
        after = request.get("after", 0)
        if not is_int(after) or after < 0:
            raise BadRead(400, "after must be an integer >= 0")
        if "limit" in request and "after" not in request:
            raise BadRead(400, "limit goes with after")
        limit = request.get("limit")
        if limit is not None and (not is_int(limit) or not 1 <= limit <= MAX_EVENTS_PER_READ):
            raise BadRead(400, f"limit must be an integer in 1..{MAX_EVENTS_PER_READ}")
        return cls(task_id, after, limit)

    def page_of(
        self, task: ScriptedTask, *, now: float, max_events: int, max_bytes: int
    ) -> dict[str, Any]:
        """The page answering this read of ``task`` at ``now``, within the agent's caps."""
        state, visible = task.progress(now)  # the state before the length
        if self.after > visible:
            raise BadRead(400, f"after={self.after} is past the end ({visible} events)")
        count = min(visible - self.after, max_events, self.limit or MAX_EVENTS_PER_READ)
        events: list[Any] = []
        size = 0
        for index in range(self.after, self.after + count):
            event = task.script.event(index)
            size += len(dumps(event)) + 1
            if events and size > max_bytes:
                break  # always the first event, however large
            events.append(event)
        return {
            "context_id": task.context_id,
            "task_id": task.id,
            "state": state.value,
            "format": task.script.format,
            "events": events,
            "next": self.after + len(events),
            "has_more": self.after + len(events) < visible,
        }
