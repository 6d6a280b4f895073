"""A step that writes one turn of a silent task, then waits to be killed: the test's writer.

Run as ``python writer_step.py BACKEND HEARTBEAT_SECONDS folder PATH`` or ``... s3
ENDPOINT_URL BUCKET``. It follows a task of the reference agent (in-process) that
stays silent, prints ``ready`` once its first heartbeat is stored, and then runs
until the test kills it (SIGKILL: no cleanup, no end mark).
"""

from __future__ import annotations

import sys

import anyio

from follower import FilesystemStore, LiveTurns, ObjectStore, connect_agent
from follower.s3 import S3Store
from follower.testing import ReferenceAgent, TaskScript

PREFIX = "steps/s1/"
TURN = "turn-1"
# The task's one event comes long after any test has ended: a task that is silent.
SILENT = TaskScript(events=1, start_delay_seconds=100_000.0)


def open_store(kind: str, where: list[str]) -> ObjectStore:
    if kind == "folder":
        return FilesystemStore(where[0])
    from tests.support.s3 import s3_client

    endpoint_url, bucket = where
    return S3Store(bucket, client=s3_client(endpoint_url))


async def main(heartbeat_seconds: float, store: ObjectStore) -> None:
    agent = ReferenceAgent(script=SILENT)
    async with agent.client() as client, connect_agent("http://agent.test/", client=client) as a2a:
        task = await a2a.send_message("hello")
        async with (
            LiveTurns(
                a2a.trajectory_endpoint,
                store,
                PREFIX,
                poll_interval_seconds=0.05,
                client=client,
                writer_heartbeat_seconds=heartbeat_seconds,
            ) as turns,
            turns.following(TURN) as turn,
        ):
            turn.follow(task.id)
            # Ready once the store shows the writer's first sign of life: a condition,
            # polled, since a store has nothing to wait on.
            while True:
                if await store.list(f"{PREFIX}{TURN}/alive/"):
                    break
                await anyio.sleep(0.01)
            print("ready", flush=True)
            await anyio.sleep_forever()


if __name__ == "__main__":
    backend, seconds, kind, *where = sys.argv[1:]
    anyio.run(main, float(seconds), open_store(kind, where), backend=backend)
