"""The read path's options: refused where the caller names them, before anything runs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import anyio
import attrs
import httpx
import pytest

from follower import (
    InvalidArgumentError,
    LiveTurns,
    MemoryStore,
    following_live_trajectory,
    read_live_trajectory,
)
from follower._options import FollowOptions
from follower.lowlevel import TrajectoryBatch, follow_trajectory

ENDPOINT = "http://agent.test/ext/trajectory"

BAD_SECONDS = [0, -1, -0.5, math.nan, math.inf, -math.inf, True, "1", None]
BAD_DRAIN = [-1, -0.001, math.nan, math.inf, True, "0", None]
BAD_BYTES = [0, -1, 1.5, math.nan, True, "1024", None]
BAD_AFTER = [-1, 1.5, True, False, "3", None, math.nan]

# (option, bad value) for every read-path option.
BAD_OPTIONS = [
    *[("poll_interval_seconds", v) for v in BAD_SECONDS],
    *[("read_timeout_seconds", v) for v in BAD_SECONDS],
    *[("max_page_bytes", v) for v in BAD_BYTES],
]


def _untouched_client(requests: list[httpx.Request]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(500)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def _block(**options: Any) -> object:
    return following_live_trajectory(
        ENDPOINT, MemoryStore(), "steps/", "turn-1", **{"poll_interval_seconds": 1.0, **options}
    )


def _turns(**options: Any) -> object:
    return LiveTurns(ENDPOINT, MemoryStore(), "steps/", **{"poll_interval_seconds": 1.0, **options})


BUILDERS: list[Callable[..., object]] = [_block, _turns]


@pytest.mark.parametrize("build", BUILDERS, ids=["following_live_trajectory", "LiveTurns"])
@pytest.mark.parametrize(
    ("option", "value"),
    [
        *BAD_OPTIONS,
        *[("drain_seconds", v) for v in BAD_DRAIN],
        *[("writer_heartbeat_seconds", v) for v in BAD_SECONDS],
    ],
)
def test_a_bad_option_is_refused_at_the_call(
    build: Callable[..., object], option: str, value: Any
) -> None:
    with pytest.raises(InvalidArgumentError, match=option):
        build(**{option: value})


@pytest.mark.anyio
@pytest.mark.parametrize(("option", "value"), [*BAD_OPTIONS, *[("after", v) for v in BAD_AFTER]])
async def test_follow_trajectory_refuses_a_bad_option_before_any_read(
    option: str, value: Any
) -> None:
    requests: list[httpx.Request] = []
    stored: list[TrajectoryBatch] = []

    async def sink(batch: TrajectoryBatch) -> None:
        stored.append(batch)

    options = {"poll_interval_seconds": 1.0, option: value}
    async with _untouched_client(requests) as client:
        with anyio.fail_after(5), pytest.raises(InvalidArgumentError, match=option):
            await follow_trajectory(
                ENDPOINT, "task-1", sink, stop=anyio.Event(), client=client, **options
            )
    assert requests == []
    assert stored == []


@pytest.mark.anyio
@pytest.mark.parametrize("task_id", ["", None, 3])
async def test_follow_trajectory_refuses_a_task_id_that_is_no_string(task_id: Any) -> None:
    requests: list[httpx.Request] = []

    async def sink(batch: TrajectoryBatch) -> None:
        raise AssertionError("nothing is read")

    async with _untouched_client(requests) as client:
        with anyio.fail_after(5), pytest.raises(InvalidArgumentError, match="task_id"):
            await follow_trajectory(
                ENDPOINT,
                task_id,
                sink,
                poll_interval_seconds=1.0,
                stop=anyio.Event(),
                client=client,
            )
    assert requests == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("option", "value"),
    [("poll_interval_seconds", v) for v in BAD_SECONDS]
    + [("idle_timeout_seconds", v) for v in [0, -1, math.nan, True, "5"]],
)
async def test_the_reader_refuses_a_bad_option(option: str, value: Any) -> None:
    with anyio.fail_after(5), pytest.raises(InvalidArgumentError, match=option):
        async for _ in read_live_trajectory(MemoryStore(), "steps/", "turn-1", **{option: value}):
            raise AssertionError("an empty store yields nothing")


def test_good_options_are_kept_as_given() -> None:
    options = FollowOptions(
        poll_interval_seconds=2, read_timeout_seconds=0.5, max_page_bytes=1, drain_seconds=0
    )
    assert options.poll_interval_seconds == 2.0
    assert options.read_timeout_seconds == 0.5
    assert options.max_page_bytes == 1
    assert options.drain_seconds == 0.0
    assert options.client is None


def test_options_are_frozen() -> None:
    options = FollowOptions(poll_interval_seconds=1.0)
    with pytest.raises(AttributeError):
        options.poll_interval_seconds = 0  # type: ignore[misc]


def test_options_are_a_final_attrs_value() -> None:
    # A value: equal by its fields; final: a subclass could not keep its validators' promise.
    assert attrs.has(FollowOptions)
    assert getattr(FollowOptions, "__final__", False)
    assert FollowOptions(poll_interval_seconds=1.0) == FollowOptions(poll_interval_seconds=1.0)
