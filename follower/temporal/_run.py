"""Which workflow run a stored turn belongs to, so a new run is told from a retried attempt.

Every attempt opens its turns with ``resume=True``: a retried attempt must
continue what an earlier attempt of the same run stored. Without more, a *new*
workflow run given a prefix an earlier run stored under would take that run's
turns for its own: it resumes them, finds them ended, sends nothing and returns
the old run's results. So each turn names its run in a small object beside its
live trajectory, ``<prefix><turn_id>/temporal-run.json``, written once before the
turn is entered; a run whose name differs is refused with a non-retryable
``ApplicationError`` of type :data:`TURN_OF_ANOTHER_RUN`. A run is the
namespace, the workflow id, the workflow's run id and the activity id, which
every attempt of one activity execution shares (``activity.info()``; an
activity started without a workflow is named by its own run id).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import attrs
from temporalio.exceptions import ApplicationError

from .._errors import ObjectConflictError, ObjectNotFoundError
from .._format._layout import JSON, TurnKeys
from .._storing._chunks import put_once
from .._turns._block import STORED_TURN_READ_SECONDS
from .workflow_types import TURN_OF_ANOTHER_RUN

if TYPE_CHECKING:
    from temporalio import activity

    from .._stores import ObjectStore

RUN_MARKER = "temporal-run.json"
"""The name of a turn's run marker, in the turn's folder beside ``live/``."""


@attrs.frozen
class StepRun:
    """One activity execution of a workflow run: what every attempt of it shares."""

    namespace: str
    workflow_id: str
    run_id: str
    activity_id: str

    @classmethod
    def of(cls, info: activity.Info) -> StepRun:
        # An activity started on its own (no workflow) is named by its own run id.
        run_id = info.workflow_run_id or info.activity_run_id or ""
        return cls(info.namespace, info.workflow_id or "", run_id, info.activity_id)

    def encode(self) -> bytes:
        return json.dumps(attrs.asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> StepRun | None:
        """The run a marker names, or None when it names none this version can read."""
        try:
            fields: Any = json.loads(body)
            return cls(**{name: str(fields[name]) for name in attrs.fields_dict(cls)})
        except (ValueError, TypeError, KeyError):
            return None

    def __str__(self) -> str:
        return (
            f"workflow {self.workflow_id!r} run {self.run_id!r} (activity {self.activity_id!r}, "
            f"namespace {self.namespace!r})"
        )


def run_marker_key(keys: TurnKeys) -> str:
    return f"{keys.prefix_key}{keys.turn_id}/{RUN_MARKER}"


async def claim_turn(store: ObjectStore, keys: TurnKeys, run: StepRun, *, retried: bool) -> None:
    """Make the turn this run's, or refuse it: another run's turn is never resumed.

    A turn with no marker is claimed, unless it already holds objects and this
    is a first attempt: those were stored by something that names no run (an
    older version of this activity, or a step outside Temporal), and only a
    retried attempt (``retried``) may take them as its own run's.
    """
    key = run_marker_key(keys)
    with anyio.fail_after(STORED_TURN_READ_SECONDS):
        try:
            body: bytes | None = await store.get(key)
        except ObjectNotFoundError:
            body = None
        if body is None:
            if not retried and await store.list(keys.live):
                raise _refused(keys, run, None)
            try:
                await put_once(store, key, run.encode(), content_type=JSON)
                return
            except ObjectConflictError:
                body = await store.get(key)  # another run claimed it first
    owner = StepRun.decode(body)
    if owner != run:
        raise _refused(keys, run, owner)


def _refused(keys: TurnKeys, run: StepRun, owner: StepRun | None) -> ApplicationError:
    whose = f"by {owner}" if owner is not None else "by no run this activity can name"
    return ApplicationError(
        f"turn {keys.turn_id!r} under {keys.prefix_key!r} was stored {whose}; this is {run}, "
        "which does not resume another run's turns (nothing was sent or written): give each "
        "workflow run a prefix of its own, for example from workflow.info().workflow_id",
        type=TURN_OF_ANOTHER_RUN,
        non_retryable=True,
    )
