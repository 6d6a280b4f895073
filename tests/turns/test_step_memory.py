"""A step keeps, of an ended turn, only the values ``progress()`` and ``statistics()`` return.

Before, ``LiveTurns`` held every turn's block (its task group, events, sink and
follower record): about 4 KiB a turn, 40 MiB for a step of 10,000 turns. Now a
closed turn leaves two frozen snapshots. tracemalloc counts what the step holds
after its turns ended, against a floor measured in the same run: the memory of
those very values (its ids, a ``TurnProgress`` and a ``LiveTurnStatistics`` a
turn) built by hand. A step that kept more than twice that fails.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from typing import Any

import anyio
import httpx
import pytest

from follower import LiveTurns, LiveTurnStatistics, TurnProgress

from ..support.null_store import NullStore

pytestmark = pytest.mark.anyio

ENDPOINT = "http://agent.test/ext/trajectory"
TURNS = 300


def agent(request: httpx.Request) -> httpx.Response:
    """Every task: one event, then done."""
    asked = json.loads(request.content)
    after = asked["after"]
    return httpx.Response(
        200,
        json={
            "context_id": "c",
            "task_id": asked["task_id"],
            "state": "completed",
            "format": "test/v1",
            "events": [] if after else [after],
            "next": after if after else 1,
            "has_more": False,
        },
    )


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def floor_bytes_per_turn() -> float:
    """What the values a step must keep of a turn cost, built by hand."""
    before = traced()
    kept: list[Any] = []
    for n in range(TURNS):
        turn_id, task_id = f"turn-{n}", f"task-{n}"
        kept.append(
            (
                TurnProgress(turn_id, task_id, 1, True),
                LiveTurnStatistics(
                    turn_id=turn_id,
                    task_id=task_id,
                    reads=1,
                    failed_reads=0,
                    pool_waits=0,
                    pages_stored=1,
                    events_stored=1,
                    bytes_stored=2,
                    followers_alive=0,
                    lag_seconds=float(n) / 7,
                    complete=True,
                ),
            )
        )
    held = traced() - before
    del kept
    return held / TURNS


async def test_a_step_keeps_only_the_final_values_of_its_ended_turns() -> None:
    with anyio.fail_after(120):
        async with httpx.AsyncClient(transport=httpx.MockTransport(agent)) as client:
            tracemalloc.start(1)
            try:
                floor = floor_bytes_per_turn()
                async with LiveTurns(
                    ENDPOINT, NullStore(), "p/", poll_interval_seconds=0.01, client=client
                ) as turns:
                    before = traced()
                    for n in range(TURNS):
                        async with turns.following(f"turn-{n}") as turn:
                            turn.follow(f"task-{n}")
                            turn.ended("completed")
                    held = (traced() - before) / TURNS
                    progress = turns.progress()
            finally:
                tracemalloc.stop()
    assert [p.events_stored for p in progress] == [1] * TURNS  # each turn's record is kept
    assert all(p.complete for p in progress)
    assert held <= 2 * floor, f"{held:.0f} bytes held a turn; its values cost {floor:.0f}"
