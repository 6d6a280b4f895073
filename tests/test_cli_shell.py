"""The command line is a thin shell over the A2A turn.

``follow_a2a_task`` follows a task someone else started the way ``run_a2a_turn``
follows its own: it asks the agent to cancel the task it gives up on.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import pytest

from follower import LiveTurns, MemoryStore, TaskTimeoutError, connect_agent
from follower._a2a import follow_a2a_task
from follower.testing import ReferenceAgent, TaskScript

from .support.virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

# About 100 s: it outlives every test here, so only a cancel ends it early.
LONG = TaskScript(events=10_000, interval_seconds=0.01)


# --- follow_a2a_task: the one piece both turns share -------------------------------------


@pytest.mark.parametrize("anyio_backend", virtual_time_backends())
@pytest.mark.parametrize("ends", ["by-itself", "past-the-deadline"])
async def test_following_a_started_task_cancels_it_only_when_giving_up(
    anyio_backend: Any, ends: str
) -> None:
    script = TaskScript(events=5, interval_seconds=1.0) if ends == "by-itself" else LONG
    agent, store = ReferenceAgent(script=script), MemoryStore()
    with anyio.fail_after(600):  # virtual
        async with (
            agent.client() as client,
            connect_agent("http://agent.test/", client=client) as a2a,
        ):
            assert a2a.trajectory_endpoint is not None
            started = await a2a.send_message("started elsewhere")
            async with LiveTurns(
                a2a.trajectory_endpoint, store, "s/", poll_interval_seconds=1, client=client
            ) as turns:
                follow = partial(
                    follow_a2a_task, a2a, turns, "t", started.id, task_deadline_seconds=60
                )
                if ends == "by-itself":
                    assert (await follow()).state == "completed"
                else:
                    with pytest.raises(TaskTimeoutError):  # as itself, not in a group
                        await follow()
    assert agent.statistics().tasks == 1  # followed, never sent again
    assert agent.statistics().canceled_tasks == (ends == "past-the-deadline")
    assert "s/t/live/end.json" in await store.list("s/t/live/")
