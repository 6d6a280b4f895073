"""The trajectory extension's wire types: states, validated pages, batches.

Sync and free of I/O: the HTTP reader builds a :class:`Page` from the bytes it
read, and everything past it works with validated values only.
"""

from __future__ import annotations

import enum
import json
from typing import Any

import attrs

from ._errors import (
    CursorMismatchError,
    NoProgressError,
    PageFieldError,
    PageNotAnObjectError,
    TaskMismatchError,
    UnknownStateError,
)

TRAJECTORY_EXTENSION_URI = "urn:agentenv:trajectory/v1"


class TrajectoryState(enum.StrEnum):
    """The state of a task's trajectory; values are the wire strings."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @classmethod
    def from_task_state(cls, state: str | TrajectoryState) -> TrajectoryState:
        """Map the A2A state a task ended in to the end mark's state.

        Case-insensitive; ``completed``, ``canceled`` or ``cancelled``; anything
        else (``failed``, ``rejected``, ``auth-required``...) means failed.
        """
        if isinstance(state, TrajectoryState):
            return state if state.is_terminal else cls.FAILED
        word = str(state).strip().lower()
        if word == "completed":
            return cls.COMPLETED
        if word in ("canceled", "cancelled"):
            return cls.CANCELED
        return cls.FAILED


_TERMINAL = frozenset({TrajectoryState.COMPLETED, TrajectoryState.FAILED, TrajectoryState.CANCELED})


def _events_tuple(events: Any) -> tuple[Any, ...]:
    return tuple(events)


@attrs.frozen
class TrajectoryBatch:
    """One page of events handed to a sink: events ``after`` .. ``next - 1``.

    ``last`` is true on the final page: the state is terminal and the agent has
    no more events, so every event of the task has been read.
    """

    after: int = attrs.field(validator=attrs.validators.ge(0))
    next: int = attrs.field()
    events: tuple[Any, ...] = attrs.field(converter=_events_tuple)
    format: str | None
    state: TrajectoryState
    last: bool

    @next.validator
    def _check_next(self, _attribute: attrs.Attribute[int], value: int) -> None:
        if value != self.after + len(self.events):
            raise ValueError(f"next={value} but after={self.after} + {len(self.events)} events")


@attrs.frozen
class Page:
    """A validated answer to one cursor read."""

    task_id: str
    context_id: str | None
    state: TrajectoryState
    format: str | None
    after: int
    events: tuple[Any, ...]
    next: int
    has_more: bool

    @property
    def last(self) -> bool:
        """Terminal and nothing more to read: every event has been read."""
        return self.state.is_terminal and not self.has_more

    def to_batch(self) -> TrajectoryBatch:
        return TrajectoryBatch(
            after=self.after,
            next=self.next,
            events=self.events,
            format=self.format,
            state=self.state,
            last=self.last,
        )

    @classmethod
    def from_json(cls, body: bytes | str, *, task_id: str, after: int) -> Page:
        """Parse and validate the answer to a read of ``task_id`` from ``after``.

        Raises a :class:`~follower.MalformedPageError` subclass naming what is wrong.
        """
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            raise PageNotAnObjectError(f"page for task {task_id!r} is not JSON: {exc}") from exc
        return cls.from_object(data, task_id=task_id, after=after)

    @classmethod
    def from_object(cls, data: Any, *, task_id: str, after: int) -> Page:
        """Validate an already-decoded JSON value as a page."""
        if not isinstance(data, dict):
            raise PageNotAnObjectError(
                f"page for task {task_id!r} is a JSON {type(data).__name__}, not an object"
            )
        got_task = _field(data, "task_id", str)
        if got_task != task_id:
            raise TaskMismatchError(f"asked for task {task_id!r}, got a page of task {got_task!r}")
        context_id = _field(data, "context_id", str, nullable=True, required=False)
        raw_state = _field(data, "state", str)
        try:
            state = TrajectoryState(raw_state)
        except ValueError:
            raise UnknownStateError(
                f"page for task {task_id!r} has unknown state {raw_state!r}"
            ) from None
        fmt = _field(data, "format", str, nullable=True, required=False)
        events = _field(data, "events", list)
        nxt = _field(data, "next", int)
        has_more = _field(data, "has_more", bool)
        if nxt != after + len(events):
            raise CursorMismatchError(
                f"page for task {task_id!r} read after={after} with {len(events)} events "
                f"but says next={nxt}"
            )
        if has_more and not events:
            raise NoProgressError(
                f"page for task {task_id!r} at after={after} claims more events but has none"
            )
        return cls(
            task_id=got_task,
            context_id=context_id,
            state=state,
            format=fmt,
            after=after,
            events=tuple(events),
            next=nxt,
            has_more=has_more,
        )


def _field(
    data: dict[str, Any],
    name: str,
    kind: type,
    *,
    nullable: bool = False,
    required: bool = True,
) -> Any:
    if name not in data:
        if required:
            raise PageFieldError(f"page has no {name!r} field")
        return None
    value = data[name]
    if value is None and nullable:
        return None
    # JSON true/false decode to bool, a subclass of int: an int field must not take them.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PageFieldError(
            f"page field {name!r} is a {type(value).__name__}, expected {kind.__name__}"
        )
    if isinstance(value, int) and value < 0:
        raise PageFieldError(f"page field {name!r} is negative: {value}")
    return value
