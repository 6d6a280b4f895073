"""``teardown.py``, the old follower's side: its steps, driven one by one over stdin and stdout.

Runs in the venv ``tools/old-follower-venv`` makes (agentenv-framework 0.9.1364,
asyncio only), where ``follower`` is not installed; ``teardown.py`` serves the
reference agent from its own venv and counts the reads in the agent's request
log. Both processes stamp times with ``time.monotonic()`` (the asyncio loop's
clock, the agent's too), so the agent's log and this side's times compare.

Per run, ``teardown.py`` sends one ``RUN {json}`` line (endpoint, task, outcome,
agent, turn id); the step here follows the task; once the agent has turned bad
and the follower's next read reached it, ``teardown.py`` sends ``BAD``. Against
an agent that closes or answers 5xx the body also waits until the follower has
logged the failed read (it is then in its backoff, as in ``follower validate``).
Then the body ends: cancelled by its runner (the task running the step is
cancelled), raising, or returning after ``turn.ended("completed")``. The block's
exit is awaited for at most ``--cap`` seconds (the old follower can retry for
60 s after a return, or forever after a lost cancel); past it the run is
reported capped and its step is cancelled again until it ends. One line of
JSON answers: when the body ended, when the block exited (null if capped), and
the turn's ``end.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from typing import Any

from _old_throughput import memory_store

PREFIX = "teardown/"
FAILED_READ = "Live trajectory read failed"


class StepFailed(RuntimeError):
    """The body's own failure, as ``raises`` asks."""


class FailedReads(logging.Handler):
    """Wakes the step once its follower has logged a failed read (and counts them)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = asyncio.Event()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(FAILED_READ):
            self.count += 1
            self.seen.set()


async def read_line() -> str:
    return (await asyncio.to_thread(sys.stdin.readline)).strip()


async def one_run(order: dict[str, Any], cap: float, poll: float) -> dict[str, Any]:
    from agent_env.task_step.snapshot_utils.live_trajectory import following_live_trajectory

    failures = FailedReads()
    logger = logging.getLogger("agent_env")
    logger.addHandler(failures)
    store = memory_store()
    go = asyncio.Event()
    exited: list[float] = []

    async def step() -> None:
        async with following_live_trajectory(
            order["endpoint"], store, PREFIX, order["turn_id"], poll_interval_seconds=poll
        ) as turn:
            turn.follow(order["task_id"])
            await go.wait()
            if order["outcome"] == "raises":
                raise StepFailed("the step failed (as the benchmark asked)")
            if order["outcome"] == "returns":
                turn.ended("completed")
                return
            await asyncio.Event().wait()  # until its runner cancels it

    running = asyncio.create_task(step())
    running.add_done_callback(lambda _: exited.append(time.monotonic()))
    try:
        if await read_line() != "BAD":
            raise RuntimeError("expected BAD")
        if order["agent"] in ("close", "5xx"):
            await asyncio.wait({asyncio.ensure_future(failures.seen.wait())}, timeout=10)
        body_ended = time.monotonic()
        if order["outcome"] == "cancelled":
            running.cancel()
        else:
            go.set()
        await asyncio.wait({running}, timeout=cap)
        capped = not running.done()
        for _ in range(100):  # a lost cancel is lost once in a while, not every time
            if running.done():
                break
            running.cancel()
            await asyncio.wait({running}, timeout=0.05)
        if running.done() and not running.cancelled():
            running.exception()  # retrieved: the raising step's own error is expected
    finally:
        logger.removeHandler(failures)
    end_key = f"{PREFIX}{order['turn_id']}/live/end.json"
    end = None
    if end_key in store.list(PREFIX):
        end = json.loads(store.get(store.object_url(end_key)))
    return {
        "body_ended": body_ended,
        "exited": None if capped else exited[0],
        "capped": capped,
        "leaked": not running.done(),
        "failed_reads_logged": failures.count,
        "end": end,
    }


async def main_async(args: argparse.Namespace) -> None:
    logger = logging.getLogger("agent_env")
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # counted, not printed
    print("READY", flush=True)
    while True:
        line = await read_line()
        if not line.startswith("RUN "):
            return
        result = await one_run(json.loads(line[4:]), args.cap, args.poll)
        print(json.dumps(result), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--poll", type=float, required=True)
    parser.add_argument("--cap", type=float, required=True)
    asyncio.run(main_async(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
