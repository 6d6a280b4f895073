"""What a workflow passes to and gets back from follower's activities: stdlib dataclasses only.

Workflow code may import this module as it is: it imports neither ``follower``
nor anyio, so it passes the workflow sandbox's validation. Call the activity by
its name, :data:`RUN_A2A_STEP`, so the workflow never imports the activity's
module (``follower.temporal``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

RUN_A2A_STEP = "follower.run_a2a_step"
"""The name of the ready-to-use activity, :func:`follower.temporal.run_a2a_step`."""


@dataclass(frozen=True)
class StoreSpec:
    """Where a step stores its turns, as a workflow can pass it: a kind and a location.

    ``kind="filesystem"``: ``location`` is a folder on the worker. Other kinds
    (``"s3"``, with ``location="bucket/prefix"`` and the endpoint in
    ``options``) are added without changing this shape; :meth:`from_url` reads
    the URL form.
    """

    kind: str
    location: str
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def filesystem(cls, root: str) -> StoreSpec:
        return cls("filesystem", root)

    @classmethod
    def from_url(cls, url: str) -> StoreSpec:
        """``file:///folder`` or a plain path; ``s3://bucket/prefix`` once S3 is supported."""
        scheme, sep, rest = url.partition("://")
        if not sep:
            return cls.filesystem(url)
        if scheme == "file":
            return cls.filesystem(rest)
        return cls(scheme, rest)


@dataclass(frozen=True)
class StepTurn:
    """One turn of the step: its id in the store, and the user message that starts it."""

    turn_id: str
    text: str


@dataclass(frozen=True)
class A2AStepParams:
    """The ready activity's input: the agent, the store, and the turns to run in order."""

    agent_url: str
    store: StoreSpec
    prefix_key: str
    turns: list[StepTurn]
    poll_interval_seconds: float = 1.0
    task_poll_seconds: float = 1.0
    task_deadline_seconds: float = 600.0
    heartbeat_interval_seconds: float | None = None
    """None: a third of the activity's heartbeat timeout (or 10 s without one)."""


@dataclass(frozen=True)
class TurnResult:
    """How one turn ended: the A2A state of its task and what was stored of it."""

    turn_id: str
    task_id: str
    state: str
    events_stored: int
    complete: bool


@dataclass(frozen=True)
class A2AStepResult:
    turns: list[TurnResult]
