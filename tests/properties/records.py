"""What one example recorded: reads, writes, followers and turns, stamped in one order."""

from __future__ import annotations

from typing import Any

import anyio
import attrs

from follower import StoreError
from follower.lowlevel import TrajectoryBatch

from .scripts import PutOp, TurnScript


@attrs.frozen
class Stamp:
    """When something happened: a total order (``seq``) and the virtual time (``at``)."""

    seq: int
    at: float


@attrs.define
class ReadRecord:
    task_id: str
    after: int
    start: Stamp
    end: Stamp | None = None
    # page, last (the last page), 404, 4xx, 5xx, transport, timeout, cancelled
    outcome: str = "pending"
    next: int | None = None

    @property
    def failed(self) -> bool:
        """A failed read of the agent: the ones the follower retries before stop."""
        return self.outcome in ("5xx", "transport", "timeout")


@attrs.define
class PutRecord:
    key: str
    kind: str
    op: PutOp
    body: bytes
    start: Stamp
    end: Stamp | None = None
    outcome: str = "pending"  # stored, exists, failed, cancelled


@attrs.define
class FollowerRecord:
    task_id: str
    starts: int = 0
    alive: int = 0
    accepted: list[TrajectoryBatch] = attrs.field(factory=list)
    ended: Stamp | None = None


class _NotRun:
    def __repr__(self) -> str:
        return "NOT_RUN"


NOT_RUN: Any = _NotRun()


@attrs.define
class TurnRecord:
    index: int
    script: TurnScript
    error: BaseException
    started: bool = False
    scope: anyio.CancelScope | None = None
    entered: Stamp | None = None
    followed: bool = False
    reported: str | None = None
    body_exit: BaseException | None = NOT_RUN
    body_end: Stamp | None = None
    block_exit: BaseException | None = NOT_RUN
    exited: Stamp | None = None
    alive_at_exit: int = 0
    # The step went on after this turn (it returned, or the step caught its end).
    went_on: bool = False
    # The body handed the turn off (HandOff): its attempt does not end it for good.
    handed_off: bool = False


@attrs.define
class Outcome:
    how: str  # returned, raised, cancelled
    value: Any = None

    def __str__(self) -> str:
        if self.how == "returned":
            return "returned its value"
        return f"{self.how}: {short(self.value)}"


class StepError(Exception):
    """An error of the step's own."""


class StepAborted(BaseException):
    """A BaseException of the step's own (not a cancel)."""


def make_error(kind: str, k: int) -> BaseException:
    match kind:
        case "value":
            return ValueError(f"turn {k + 1} failed")
        case "custom":
            return StepError(f"turn {k + 1} failed")
        case "group":
            return ExceptionGroup(f"turn {k + 1}'s own group", [ValueError("a"), KeyError("b")])
        case "base":
            return StepAborted(f"turn {k + 1} aborted")
        case "library":
            return StoreError(f"turn {k + 1}'s own store failed")
    raise AssertionError(kind)


def short(exc: BaseException | None) -> str:
    """How a block or body ended, for a timeline: the backend's cancel named as such."""
    if exc is None:
        return "normally"
    if isinstance(exc, BaseException) and type(exc).__name__ in ("Cancelled", "CancelledError"):
        return f"{type(exc).__name__} (the backend's cancel)"
    return repr(exc)
