"""An in-memory cursor-read agent on a virtual clock, and followers of it in one task group.

For the tests of how one event loop's followers share it (``tests/reading``):
each read suspends as one over a socket does, may spend loop time as CPU would
(``spend_loop_time``), and may wait for its answer as a slow agent's network
would; the agent notes when each task was read and how many reads were in flight.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
import anyio.lowlevel
import httpx

from follower._options import FollowOptions
from follower._reading import _admission
from follower._reading._follow import FollowProgress, follow_task
from follower.lowlevel import TrajectoryBatch

from .virtual_time import spend_loop_time, spent_loop_seconds

ENDPOINT = "http://agent.test/ext/trajectory"
POLL = 1.0


class Agent:
    """Every task running for ever, an event a read; notes when each task was read.

    A read suspends once, as one over a socket does; ``cost_seconds`` of loop time
    (CPU, as a loop busy with it would see) is spent in each. A task's first
    ``pages_with_more`` pages have more (``has_more``): a backlog its follower reads at once.
    """

    def __init__(
        self,
        cost_seconds: float = 0.0,
        hold: anyio.Event | None = None,
        answer_after_seconds: float = 0.0,
        pages_with_more: int = 0,
    ) -> None:
        self.cost_seconds = cost_seconds
        self.hold = hold  # reads answer once it is set
        self.answer_after_seconds = answer_after_seconds  # the network's wait, not the loop's
        self.pages_with_more = pages_with_more
        self.reads: dict[str, list[float]] = defaultdict(list)
        self.reading = anyio.Event()  # a read has begun
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        asked = json.loads(request.content)
        times = self.reads[asked["task_id"]]
        times.append(anyio.current_time())
        self.reading.set()
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.cost_seconds:
                spend_loop_time(self.cost_seconds)
            await anyio.lowlevel.checkpoint()
            if self.hold is not None:
                await self.hold.wait()
            if self.answer_after_seconds:
                await anyio.sleep(self.answer_after_seconds)
        finally:
            self.in_flight -= 1
        after = asked["after"]
        return httpx.Response(
            200,
            json={
                "context_id": "c",
                "task_id": asked["task_id"],
                "state": "running",
                "format": "test/v1",
                "events": [after],
                "next": after + 1,
                "has_more": len(times) <= self.pages_with_more,
            },
        )

    def first_reads(self) -> list[float]:
        return sorted(times[0] for times in self.reads.values())


Sink = Callable[[TrajectoryBatch], Awaitable[None]]


async def checkpoint_sink(batch: TrajectoryBatch) -> None:
    await anyio.lowlevel.checkpoint()


class Followers:
    """Followers of one in-memory agent, in one task group, each with its own progress.

    The loop's read admission asks whether its CPU is busy on the virtual CPU clock,
    which counts the loop time the agent spends: the process's own would call the
    loop idle, and let it catch up, while every read spends all of its time.
    """

    def __init__(self, tg: anyio.abc.TaskGroup, agent: Agent, sink: Sink = checkpoint_sink) -> None:
        self.tg = tg
        self.sink = sink
        admission = _admission.loop_admission()
        admission.cpu_clock = spent_loop_seconds
        self.options = FollowOptions(
            poll_interval_seconds=POLL,
            client=httpx.AsyncClient(transport=httpx.MockTransport(agent)),
        )
        self.progress: dict[str, FollowProgress] = {}

    def start(self, task_id: str, stop: anyio.Event | None = None) -> None:
        self.progress[task_id] = progress = FollowProgress()
        follow = functools.partial(
            follow_task,
            ENDPOINT,
            task_id,
            self.sink,
            stop=stop or anyio.Event(),
            options=self.options,
            progress=progress,
        )
        self.tg.start_soon(follow, name=f"follower of {task_id}")
