"""A read cut short for its turn's heartbeat, on the library's own transport, over a socket.

``test_writer_beats.py`` proves the rules on virtual time through an in-memory
transport, where the cut is a cancel scope around the exchange. On the library's
own transport the cut is the exchange's own deadline, when it comes first (no
scope more for each read): here a real agent on loopback holds reads, and the
held read must be cut short, sent again and answered, with no failure counted.
Nothing is ordered by time: each step waits for what the agent has seen.
"""

from __future__ import annotations

import anyio
import pytest

from follower import LiveTurns, MemoryStore, connect_agent
from follower.testing import Fault, ReferenceAgent, TaskScript, serve_agent

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"
TURN = "turn-1"
BEAT = 0.4
# Far longer than a beat may be late (a quarter interval): only a cut read is sent again
# before the agent answers it.
HELD_SECONDS = 8 * BEAT
HEARTBEAT_TASK = f"heartbeat {TURN}"
# A task with no event for far longer than the test runs: each read is an empty page.
SILENT = TaskScript(events=1, start_delay_seconds=100_000.0)


def heartbeat_task_runs() -> bool:
    return any(task.name == HEARTBEAT_TASK for task in anyio.get_running_tasks())


async def test_a_read_the_agent_holds_is_cut_for_the_beat_and_sent_again() -> None:
    agent = ReferenceAgent(script=SILENT, log_requests=True)
    store = MemoryStore()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            url = await tg.start(serve_agent, agent)
            async with connect_agent(url) as a2a:
                task = await a2a.send_message("hello")
                async with (
                    LiveTurns(
                        a2a.trajectory_endpoint,
                        store,
                        PREFIX,
                        poll_interval_seconds=BEAT / 4,
                        writer_heartbeat_seconds=BEAT,
                        read_timeout_seconds=10 * HELD_SECONDS,
                        drain_seconds=BEAT,  # the task never ends: the drain does
                    ) as turns,
                    turns.following(TURN) as turn,
                ):
                    turn.follow(task.id)
                    await agent.wait_reads(2)  # the follower reads, and writes its beats
                    assert not heartbeat_task_runs()
                    agent.fault = Fault.slow(HELD_SECONDS)
                    held = agent.statistics().reads + 1  # the next read is held
                    await agent.wait_reads(held)
                    agent.fault = None  # the held read stays held; the next are answered
                    # Sent again long before the held one could have been answered:
                    # it was cut short, and the beats went to a task.
                    await agent.wait_reads(held + 1)
                    assert heartbeat_task_runs()
                    await agent.wait_reads(held + 2)  # the one sent again was answered
                    stats = turn.statistics()
                    turn.ended("completed")
            tg.cancel_scope.cancel()
    assert stats.failed_reads == 0
    reads = [request for request in agent.request_log() if request.path == "/ext/trajectory"]
    # The held read was never answered; every read before and after it was.
    assert [request.status for request in reads[: held + 1]] == [200] * (held - 1) + [None, 200]
