"""Without ``opentelemetry`` installed, a step runs as before: nothing imported, nothing sent."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import sys

    sys.modules["opentelemetry"] = None  # as if the otel extra were not installed

    import anyio

    from follower import LiveTurns, MemoryStore, connect_agent
    from follower._telemetry import OFF, available, telemetry_for, with_trace_context
    from follower.testing import ReferenceAgent, TaskScript


    async def main() -> None:
        script = TaskScript(events=3, interval_seconds=0.01)
        agent = ReferenceAgent(script=script, log_requests=True)
        url = "http://agent.test/"
        async with agent.client() as client, connect_agent(url, client=client) as a2a:
            async with LiveTurns(
                a2a.task_source, MemoryStore(), "s/", poll_interval_seconds=0.02, client=client
            ) as turns, turns.following("t1") as turn:
                task = await a2a.send_message("hi")
                turn.follow(task.id)
                turn.ended((await a2a.wait_for_task(task.id, poll_interval_seconds=0.02)).state)
        assert turns.statistics().complete
        assert all(r.traceparent is None for r in agent.request_log())


    assert not available()
    assert telemetry_for(None, None) is OFF
    fields = {"accept-encoding": "identity"}
    assert with_trace_context(fields) is fields
    anyio.run(main)
    assert not any(name.startswith("opentelemetry.") for name in sys.modules)
    print("ok")
    """
)


def test_a_step_runs_without_opentelemetry_installed() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
