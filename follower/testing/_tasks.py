"""A task of the reference agent, and what it computes from the clock.

A task has no background task behind it: its state, its events and its A2A
status are all worked out from the time it was sent and the time of the asking
(see ``_script``), so one reading of the clock gives a consistent answer.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import attrs

from .._format._wire import TrajectoryState

if TYPE_CHECKING:
    from datetime import datetime

    from ._script import TaskScript

# The A2A states a task has not ended in.
_ACTIVE_STATES = ("submitted", "working")


@attrs.define(eq=False)
class ScriptedTask:
    """One task the agent runs: its script, when it started, its history, any cancel."""

    id: str
    context_id: str
    script: TaskScript
    started_at: float
    wall_start: datetime
    history: list[dict[str, Any]]
    canceled_at: float | None = None
    sealed: int | None = None

    def progress(self, now: float) -> tuple[TrajectoryState, int]:
        """The trajectory's state and length at ``now``, from one reading of the clock."""
        if self.sealed is not None:
            return TrajectoryState.CANCELED, self.sealed
        elapsed = now - self.started_at
        if self.script.finished_by(elapsed):
            return self.script.final_state, self.script.events
        visible = self.script.visible_at(elapsed)
        return (TrajectoryState.RUNNING if visible else TrajectoryState.PENDING), visible

    def status(self, now: float) -> tuple[str, float]:
        """The A2A task state at ``now``, and when the task entered it."""
        if self.canceled_at is not None:
            return "canceled", self.canceled_at
        elapsed = now - self.started_at
        if self.script.finished_by(elapsed):
            return self.script.outcome, self.started_at + self.script.duration_seconds
        if elapsed + 1e-9 >= self.script.start_delay_seconds:
            return "working", self.started_at + self.script.start_delay_seconds
        return "submitted", self.started_at

    def is_terminal(self, now: float) -> bool:
        """Whether the task has ended (in any way) by ``now``."""
        return self.status(now)[0] not in _ACTIVE_STATES

    def cancel(self, now: float) -> None:
        """Cancel the task at ``now``, keeping the events visible then and no more."""
        # Sealed at what is visible now, before the canceled state can be seen.
        self.sealed = self.progress(now)[1]
        self.canceled_at = now

    def gone_at(self, after_events: int) -> float | None:
        """When this task makes event ``after_events`` (or ends first); None if it never will."""
        at = self.started_at + self.script.event_offset_seconds(
            min(after_events, self.script.events)
        )
        if self.canceled_at is not None and self.canceled_at < at:
            return None
        return at

    def to_json(self, now: float, history_length: int | None = None) -> dict[str, Any]:
        """The A2A ``Task`` object at ``now``, with the last ``history_length`` messages."""
        state, since = self.status(now)
        timestamp = self.wall_start + timedelta(seconds=since - self.started_at)
        status: dict[str, Any] = {"state": state, "timestamp": timestamp.isoformat()}
        task: dict[str, Any] = {
            "id": self.id,
            "contextId": self.context_id,
            "status": status,
            "kind": "task",
        }
        history = self.history
        if history_length is not None:
            history = history[-history_length:] if history_length > 0 else []
        task["history"] = history
        if state in ("failed", "rejected"):
            status["message"] = self._agent_message(f"the script {state} the task")
        if state == "completed":
            text = f"{self.script.events} events"
            task["artifacts"] = [
                {
                    "artifactId": f"{self.id}-result",
                    "name": "result",
                    "parts": [{"kind": "text", "text": text}],
                }
            ]
        return task

    def _agent_message(self, text: str) -> dict[str, Any]:
        return {
            "role": "agent",
            "parts": [{"kind": "text", "text": text}],
            "messageId": f"{self.id}-status",
            "taskId": self.id,
            "contextId": self.context_id,
            "kind": "message",
        }
