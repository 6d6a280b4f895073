"""A worker process running the ready activity until it is killed: the tests' doomed worker.

    python tests/temporal/activity_worker.py TARGET_HOST NAMESPACE TASK_QUEUE

Polls activity tasks only (the test process runs the workflows), so nothing of
the workflow is left in this process when it is killed.
"""

from __future__ import annotations

import asyncio
import sys

from temporalio.client import Client
from temporalio.worker import Worker

from follower.temporal import run_a2a_step


async def main(target_host: str, namespace: str, queue: str) -> None:
    client = await Client.connect(target_host, namespace=namespace)
    await Worker(client, task_queue=queue, activities=[run_a2a_step]).run()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
