"""How a task of the reference agent runs: a pure function of the time since it was sent.

A task's progress is computed from the clock (``anyio.current_time()`` when the
message was sent, and now) instead of being driven by a background task. So the
agent needs no task group of its own: it runs in-process under
``httpx.ASGITransport``, behind a real server, and on virtual time alike, and
what a read returns depends only on when it is made.
"""

from __future__ import annotations

from typing import Any, final

import attrs

from .._format._wire import TrajectoryState

# Task outcomes a script may end in: A2A's terminal task states.
OUTCOMES = ("completed", "failed", "canceled", "rejected")
# Clocks add float sums; an event due at t is visible at a read made at t.
_EPSILON_SECONDS = 1e-9


@final
@attrs.frozen(kw_only=True)
class TaskScript:
    """How a task runs: its events, their pace and size, and how it ends.

    Event ``i`` becomes visible ``start_delay_seconds + i * interval_seconds``
    after the message was sent; the task ends in ``outcome`` one interval after
    its last event (at :attr:`duration_seconds`). Events are deterministic
    functions of their index (:meth:`event`), ``event_bytes`` of padding each.
    """

    events: int = attrs.field(default=10, validator=attrs.validators.ge(0))
    interval_seconds: float = attrs.field(default=0.1, validator=attrs.validators.ge(0))
    event_bytes: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    start_delay_seconds: float = attrs.field(default=0.0, validator=attrs.validators.ge(0))
    outcome: str = attrs.field(default="completed", validator=attrs.validators.in_(OUTCOMES))
    format: str | None = "agentenv.trajectory/v1"

    @property
    def duration_seconds(self) -> float:
        """When the task ends, counted from when the message was sent."""
        return self.event_offset_seconds(self.events)

    @property
    def final_state(self) -> TrajectoryState:
        """The trajectory state the task ends in (``rejected`` reads as failed)."""
        return TrajectoryState.from_task_state(self.outcome)

    def event_offset_seconds(self, index: int) -> float:
        """When event ``index`` becomes visible, counted from when the message was sent."""
        return self.start_delay_seconds + index * self.interval_seconds

    def finished_by(self, elapsed_seconds: float) -> bool:
        """Whether the task has ended ``elapsed_seconds`` after it was sent."""
        return elapsed_seconds + _EPSILON_SECONDS >= self.duration_seconds

    def visible_at(self, elapsed_seconds: float) -> int:
        """How many events are visible ``elapsed_seconds`` after the message was sent."""
        if self.finished_by(elapsed_seconds):
            return self.events
        since_first = elapsed_seconds - self.start_delay_seconds + _EPSILON_SECONDS
        if since_first < 0:
            return 0
        if self.interval_seconds == 0:
            return self.events
        return min(self.events, int(since_first // self.interval_seconds) + 1)

    def event(self, index: int) -> dict[str, Any]:
        """Event ``index`` of every task run by this script."""
        event: dict[str, Any] = {"index": index, "kind": "step", "text": f"step {index}"}
        if self.event_bytes:
            event["padding"] = "x" * self.event_bytes
        return event
