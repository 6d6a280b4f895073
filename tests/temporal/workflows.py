"""The tests' workflows, in a module of their own that the workflow sandbox validates.

Importing ``follower.temporal.workflow_types`` imports the ``follower`` package
(anyio with it), which the sandbox refuses: the import is passed through, as a
user's workflow module would do. The activity is called by its name.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from follower.temporal.workflow_types import RUN_A2A_STEP, A2AStepParams, A2AStepResult

HEARTBEAT_TIMEOUT = timedelta(seconds=2)


@workflow.defn
class StepWorkflow:
    """Runs one step as the ready activity; a cancel waits for the activity's cleanup."""

    @workflow.run
    async def run(self, params: A2AStepParams) -> A2AStepResult:
        return await workflow.execute_activity(
            RUN_A2A_STEP,
            params,
            result_type=A2AStepResult,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=100), maximum_attempts=5
            ),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
