"""The ready-to-use activity: connect to an agent, run the step's turns, store their trajectories.

Each turn is the library's one A2A turn (``follower._a2a._turn``, as
:func:`~follower.run_a2a_turn` runs it), in the block of
:meth:`StepAttempt.following`, with one difference the retries need: the
agent's task is cancelled only when the turn ends for good. A handed-off turn's
task keeps running, and the next attempt follows the same task on from what the
store holds (its id from the turn's ``task.json``, or from the last heartbeat
when nothing was stored yet).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
from temporalio import activity
from temporalio.exceptions import ApplicationError

from .._a2a._client import connect_agent
from .._a2a._turn import Message, TaskWait, a2a_turn
from .._errors import FollowerError, InvalidArgumentError, InvalidKeyError
from .._format._layout import TurnKeys
from .._stores import FilesystemStore, ObjectStore
from .._storing._stored_turn import read_stored_turn
from .._turns._block import STORED_TURN_READ_SECONDS
from ._attempt import StepAttempt, run_activity_step
from .workflow_types import (
    RUN_A2A_STEP,
    A2AStepParams,
    A2AStepResult,
    StepTurn,
    StoreSpec,
    TurnResult,
)

if TYPE_CHECKING:
    from .._a2a._client import A2AAgent, A2ATask
    from .._turns._step import LiveTurns


S3_OPTIONS = frozenset({"endpoint_url", "region_name"})
"""The options an ``s3`` :class:`StoreSpec` may carry; credentials come from the AWS environment."""


logger = logging.getLogger("follower.temporal")


def open_store(spec: StoreSpec) -> ObjectStore:
    """The store a :class:`StoreSpec` describes; a spec no store can be made of is non-retryable.

    ``filesystem``: a :class:`~follower.FilesystemStore` at ``location``.
    ``s3``: a :class:`follower.s3.S3Store` of the bucket and prefix in
    ``location`` (``"bucket/prefix"``), with ``endpoint_url`` and
    ``region_name`` from ``options``; boto3 finds the credentials (the usual
    AWS environment variables, shared files, instance roles).
    """
    if spec.kind == "filesystem":
        return FilesystemStore(spec.location)
    if spec.kind == "s3":
        return _open_s3(spec)
    raise ApplicationError(
        f"unknown store kind {spec.kind!r} (this version knows 'filesystem' and 's3')",
        type="UnknownStoreKind",
        non_retryable=True,
    )


def _open_s3(spec: StoreSpec) -> ObjectStore:
    unknown = sorted(set(spec.options) - S3_OPTIONS)
    if unknown:
        raise ApplicationError(
            f"unknown s3 store options {unknown} (known: {sorted(S3_OPTIONS)})",
            type="InvalidStoreSpec",
            non_retryable=True,
        )
    bucket, _, prefix = spec.location.partition("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    try:
        from ..s3 import S3Store
    except ImportError as exc:
        raise ApplicationError(str(exc), type="MissingS3Extra", non_retryable=True) from exc
    try:
        return S3Store(
            bucket,
            prefix=prefix,
            endpoint_url=spec.options.get("endpoint_url"),
            region_name=spec.options.get("region_name"),
        )
    except (InvalidArgumentError, InvalidKeyError) as exc:
        raise ApplicationError(
            f"invalid s3 store {spec.location!r}: {exc}",
            type="InvalidStoreSpec",
            non_retryable=True,
        ) from exc


@activity.defn(name=RUN_A2A_STEP)
async def run_a2a_step(params: A2AStepParams) -> A2AStepResult:
    """Run the step's turns in order against the agent, storing each turn's live trajectory.

    A retried attempt resumes every unfinished turn; a turn an earlier attempt
    ended is not run again. Returns how each turn ended.
    """
    store = open_store(params.store)

    async def step(attempt: StepAttempt) -> A2AStepResult:
        known_tasks = attempt.previous_task_ids()
        async with connect_agent(params.agent_url, via=params.via) as agent:
            source = agent.task_source
            if source is None:  # cursor reads were asked for, and the card offers none
                raise ApplicationError(
                    f"the agent at {params.agent_url} offers no live trajectory",
                    type="NoLiveTrajectory",
                    non_retryable=True,
                )
            options = {"poll_interval_seconds": params.poll_interval_seconds}
            results: list[TurnResult] = []
            context_id: str | None = None
            async with attempt.live_turns(source, store, params.prefix_key, **options) as turns:
                for turn in params.turns:
                    result, context_id = await _run_turn(
                        attempt,
                        agent,
                        turns,
                        turn,
                        params,
                        known_tasks.get(turn.turn_id),
                        context_id,
                    )
                    results.append(result)
            return A2AStepResult(results)

    return await run_activity_step(
        step, heartbeat_interval_seconds=params.heartbeat_interval_seconds
    )


async def _run_turn(
    attempt: StepAttempt,
    agent: A2AAgent,
    turns: LiveTurns,
    turn: StepTurn,
    params: A2AStepParams,
    known_task_id: str | None,
    context_id: str | None,
) -> tuple[TurnResult, str | None]:
    with anyio.fail_after(STORED_TURN_READ_SECONDS):
        stored = await read_stored_turn(turns.store, TurnKeys(turns.prefix_key, turn.turn_id))
    if stored.task is not None and stored.end is not None:
        # An earlier attempt ended this turn: follow() only links it in the chain.
        ended_id = stored.task.task_id
        async with attempt.following(turn.turn_id) as live:
            live.follow(ended_id)
        end = stored.end
        done = TurnResult(turn.turn_id, ended_id, str(end.state), end.next, bool(end.complete))
        return done, await _context_of(agent, ended_id, context_id)
    known = stored.task.task_id if stored.task is not None else known_task_id
    sent: list[A2ATask] = []
    final = await a2a_turn(
        agent,
        attempt.following(turn.turn_id),
        known if known is not None else Message(text=turn.text, context_id=context_id),
        TaskWait(
            deadline_seconds=params.task_deadline_seconds,
            poll_interval_seconds=params.task_poll_seconds,
        ),
        # A handed-off turn's task goes on: the next attempt follows it on.
        keeps_task=attempt.hand_off_unless_final,
        sent=sent.append,
    )
    task_id = sent[0].id if sent else known
    assert task_id is not None  # sent, or known
    progress = attempt.exited_progress(turn.turn_id)
    result = TurnResult(
        turn.turn_id, task_id, final.state, progress.events_stored, progress.complete
    )
    started_in = sent[0].context_id if sent else None
    return result, final.context_id or started_in or context_id


async def _context_of(agent: A2AAgent, task_id: str, context_id: str | None) -> str | None:
    """The conversation an ended turn's task was in, so the next turn goes on in it."""
    if context_id is not None:
        return context_id
    try:
        return (await agent.get_task(task_id)).context_id
    except FollowerError as exc:
        logger.warning("task %s: its context could not be read again: %s", task_id, exc)
        return None
