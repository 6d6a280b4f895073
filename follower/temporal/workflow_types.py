"""What a workflow passes to and gets back from follower's activities: stdlib dataclasses only.

Workflow code may import this module as it is: it imports neither ``follower``
nor anyio, so it passes the workflow sandbox's validation. Call the activity by
its name, :data:`RUN_A2A_STEP`, so the workflow never imports the activity's
module (``follower.temporal``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import final

RUN_A2A_STEP = "follower.run_a2a_step"
"""The name of the ready-to-use activity, :func:`follower.temporal.run_a2a_step`."""

TURN_OF_ANOTHER_RUN = "TurnOfAnotherRun"
"""The ``ApplicationError`` type of a step refused a turn another workflow run stored.

Non-retryable: each workflow run needs a prefix of its own (docs/temporal.md).
"""


@final
@dataclass(frozen=True)
class StoreSpec:
    """Where a step stores its turns, as a workflow can pass it: a kind, a location, options.

    ``kind="filesystem"``: ``location`` is a folder on the worker.
    ``kind="s3"``: ``location`` is ``"bucket"`` or ``"bucket/prefix"``;
    ``options`` may name ``endpoint_url`` and ``region_name``. Credentials are
    never in a spec (it is in the workflow's history): the worker's boto3 finds
    them in the usual AWS environment. :meth:`from_url` reads the URL forms.
    """

    kind: str
    location: str
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def filesystem(cls, root: str) -> StoreSpec:
        return cls("filesystem", root)

    @classmethod
    def s3(
        cls,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
    ) -> StoreSpec:
        """An S3 bucket (or an S3-compatible service at ``endpoint_url``), under ``prefix``."""
        options = {"endpoint_url": endpoint_url, "region_name": region_name}
        location = f"{bucket}/{prefix}" if prefix else bucket
        return cls("s3", location, {k: v for k, v in options.items() if v is not None})

    @classmethod
    def from_url(
        cls, url: str, *, endpoint_url: str | None = None, region_name: str | None = None
    ) -> StoreSpec:
        """``file:///folder`` or a plain path; ``s3://bucket/prefix`` (with its options)."""
        scheme, sep, rest = url.partition("://")
        if not sep:
            return cls.filesystem(url)
        if scheme == "file":
            return cls.filesystem(rest)
        if scheme == "s3":
            bucket, _, prefix = rest.partition("/")
            return cls.s3(bucket, prefix, endpoint_url=endpoint_url, region_name=region_name)
        return cls(scheme, rest)


@final
@dataclass(frozen=True)
class StepTurn:
    """One turn of the step: its id in the store, and the user message that starts it."""

    turn_id: str
    text: str


@final
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
    via: str | None = None
    """How the turns' tasks are followed: ``"cursor"``, ``"stream"``, ``"poll"``, or None for
    the best way the agent's card offers (:func:`follower.connect_agent`)."""


@final
@dataclass(frozen=True)
class TurnResult:
    """How one turn ended: the A2A state of its task and what was stored of it."""

    turn_id: str
    task_id: str
    state: str
    events_stored: int
    complete: bool


@final
@dataclass(frozen=True)
class A2AStepResult:
    turns: list[TurnResult]
