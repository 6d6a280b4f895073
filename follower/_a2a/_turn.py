"""A whole A2A turn: send a message (or take a running task), follow its task, wait for it to end.

One orchestration for every turn the library runs: :func:`run_a2a_turn`,
:func:`follow_a2a_task` and the Temporal activity's turns all call
:func:`a2a_turn`, above the JSON-RPC client (``_a2a``) and the turn's block
(``_turns._block``). When a step is cancelled or fails once the task is the turn's,
the agent is told to cancel it too, shielded and bounded, so it does not work
for a step that is gone; a caller that hands its turn to a retry keeps the task
running instead.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import attrs

from .._format._a2a import Via
from ._client import DEFAULT_TASK_DEADLINE_SECONDS, cancel_task_quietly

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractAsyncContextManager

    from .._turns._block import LiveTurn
    from .._turns._step import LiveTurns
    from ._client import A2AAgent, A2ATask


@attrs.frozen(kw_only=True)
class TaskWait:
    """How a turn waits for its task to end: :meth:`A2AAgent.wait_for_task`'s options."""

    deadline_seconds: float = DEFAULT_TASK_DEADLINE_SECONDS
    poll_interval_seconds: float = 1.0
    max_failures: int | None = None

    async def until_ended(self, agent: A2AAgent, task_id: str) -> A2ATask:
        return await agent.wait_for_task(
            task_id,
            deadline_seconds=self.deadline_seconds,
            poll_interval_seconds=self.poll_interval_seconds,
            max_failures=self.max_failures,
        )


@attrs.frozen(kw_only=True)
class Message:
    """The user message that starts a turn's task, in a conversation if ``context_id`` names one."""

    text: str
    context_id: str | None = None


def _never(exc: BaseException) -> bool:
    return False


async def a2a_turn(
    agent: A2AAgent,
    block: AbstractAsyncContextManager[LiveTurn | None],
    task: Message | str,
    wait: TaskWait,
    *,
    cancel_if_entry_fails: bool = False,
    keeps_task: Callable[[BaseException], bool] = _never,
    sent: Callable[[A2ATask], object] | None = None,
) -> A2ATask:
    """Run one turn in ``block``: start or take the task, follow it, wait for it to end.

    ``block`` is the turn's block (None inside: nothing is followed). ``task``
    is a :class:`Message` the turn sends inside the block (``sent`` then gets the
    task the agent started), or the id of a task the agent already runs. Once
    the task is the turn's, a failure or cancel asks the agent to cancel it,
    unless ``keeps_task(exc)`` says a retry follows it on; a task id given with
    ``cancel_if_entry_fails`` is the turn's from the start, so a block that
    cannot be entered (a store that refuses the turn) cancels it too. The
    step's own exception or cancel then goes on unchanged.
    """
    entered = False
    try:
        async with block as turn:
            entered = True
            if isinstance(task, Message):
                started = await agent.send_message(task.text, context_id=task.context_id)
                task_id = started.id
                if sent is not None:
                    sent(started)
            else:
                task_id = task
            # No await between the send and follow(): a heartbeat of the turn's progress
            # names the task as soon as the agent does.
            try:
                if turn is not None:
                    turn.follow(task_id)
                final = await wait.until_ended(agent, task_id)
                if turn is not None:
                    turn.ended(final.state)
            except BaseException as exc:
                if not keeps_task(exc):
                    await cancel_task_quietly(agent, task_id)
                raise
            return final
    except BaseException as exc:
        if not entered and isinstance(task, str) and cancel_if_entry_fails and not keeps_task(exc):
            await cancel_task_quietly(agent, task)
        raise


async def run_a2a_turn(
    agent: A2AAgent,
    turns: LiveTurns | None,
    turn_id: str,
    text: str,
    *,
    context_id: str | None = None,
    task_deadline_seconds: float = DEFAULT_TASK_DEADLINE_SECONDS,
    task_poll_seconds: float = 1.0,
    task_max_failures: int | None = None,
) -> A2ATask:
    """Run one turn: send ``text``, follow the task's live trajectory, wait for it to end.

    The trajectory is stored through ``turns`` (skipped when ``turns`` is None or
    the agent offers no live read). If the step is cancelled or anything fails
    after the task started, the agent is asked to cancel it, shielded and bounded;
    the step's own exception or cancel then goes on unchanged.
    """
    wait = TaskWait(
        deadline_seconds=task_deadline_seconds,
        poll_interval_seconds=task_poll_seconds,
        max_failures=task_max_failures,
    )
    message = Message(text=text, context_id=context_id)
    return await a2a_turn(agent, _following(agent, turns, turn_id), message, wait)


async def follow_a2a_task(
    agent: A2AAgent,
    turns: LiveTurns | None,
    turn_id: str,
    task_id: str,
    *,
    task_deadline_seconds: float = DEFAULT_TASK_DEADLINE_SECONDS,
    task_poll_seconds: float = 1.0,
    task_max_failures: int | None = None,
) -> A2ATask:
    """Run one turn on a task the agent already runs: follow it, wait for it to end.

    For a task started elsewhere (another process, your own ``send_message``),
    or kept from an earlier attempt: with ``LiveTurns(..., resume=True)`` a
    stored turn of the same task goes on after its last chunk. The same turn
    as :func:`run_a2a_turn` without the message, down to the cancel: if the
    step is cancelled or anything fails (entering the turn too: a store that
    refuses it), the agent is asked to cancel the task, though someone else
    may have started it.
    """
    wait = TaskWait(
        deadline_seconds=task_deadline_seconds,
        poll_interval_seconds=task_poll_seconds,
        max_failures=task_max_failures,
    )
    block = _following(agent, turns, turn_id)
    return await a2a_turn(agent, block, task_id, wait, cancel_if_entry_fails=True)


@asynccontextmanager
async def _following(
    agent: A2AAgent, turns: LiveTurns | None, turn_id: str
) -> AsyncIterator[LiveTurn | None]:
    """The turn's block, or None when nothing is followed."""
    cursor_reads = turns is not None and turns.source.via is Via.CURSOR
    if turns is None or (cursor_reads and agent.trajectory_endpoint is None):
        yield None
        return
    async with turns.following(turn_id) as turn:
        yield turn
