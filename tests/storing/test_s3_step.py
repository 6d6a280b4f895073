"""A step stored in S3 whose store fails or stalls mid-step: the step is never the store's.

moto's S3 server on a loopback port, real time, both backends. botocore's event
hooks make chosen puts fail (an answer of the test's in place of S3's) or hold a
put's worker thread on a ``threading.Event``, as a stalled network would; the
server itself is the real one, so what lands is what S3 would hold.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from botocore.awsrequest import AWSResponse

import follower._turns._block
import follower._turns._endings
import follower._turns._step
from follower import (
    LiveTurns,
    StoredEvent,
    TrajectoryState,
    TurnEnd,
    read_live_trajectory,
)
from follower.s3 import S3Store

from ..stores.test_s3_store import AWSResponseRaw, S3Server, new_bucket, raw_keys, running_s3_server
from ..support.agents import ENDPOINT, ScriptedAgent

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"
LIVE = f"{PREFIX}turn-1/live/"
POLL = 0.05
DRAIN_SECONDS = 0.3
WRITE_BOUND_SECONDS = 0.3
CLEANUP_BOUND_SECONDS = 0.6
# What the block may take on top of its bounds: scheduling, a read, a listing.
SLACK_SECONDS = 2.0


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    with running_s3_server() as server:
        yield server


@pytest.fixture
def client(s3_server: S3Server) -> Iterator[Any]:
    """A client of the test's own, for the hooks it registers."""
    client = s3_server.client(max_pool_connections=20)
    yield client
    client.close()


@pytest.fixture
def bucket(client: Any) -> str:
    return new_bucket(client)


@pytest.fixture
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follower._turns._endings, "CLEANUP_WRITE_SECONDS", WRITE_BOUND_SECONDS)
    monkeypatch.setattr(follower._turns._endings, "CLEANUP_SECONDS", CLEANUP_BOUND_SECONDS)


def live_names(client: Any, bucket: str) -> list[str]:
    """The names of the turn's objects in its live folder (its heartbeats are stored beside)."""
    return [key.removeprefix(LIVE) for key in raw_keys(client, bucket) if key.startswith(LIVE)]


def is_chunk(request: Any) -> bool:
    return str(request.url).split("?")[0].endswith(".jsonl")


def chunk_name(request: Any) -> str:
    return str(request.url).split("?")[0].rsplit("/", 1)[1]


def refusal(request: Any) -> AWSResponse:
    body = (
        b"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>AccessDenied</Code>"
        b"<Message>injected by the test</Message></Error>"
    )
    return AWSResponse(request.url, 403, {"Content-Type": "application/xml"}, AWSResponseRaw(body))


async def read_step(store: S3Store) -> list[StoredEvent | TurnEnd]:
    with anyio.fail_after(10):
        return [
            item
            async for item in read_live_trajectory(
                store, PREFIX, "turn-1", poll_interval_seconds=POLL, turn_ends=True
            )
        ]


def assert_whole(client: Any, bucket: str) -> None:
    """Every chunk in the bucket holds exactly the events its name says: none half there."""
    for key in raw_keys(client, bucket):
        if key.endswith(".jsonl"):
            name = key.rsplit("/", 1)[1]
            first, end = int(name[:8]), int(name[9:17])
            body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            lines = body.decode().splitlines()
            assert len(lines) == end - first, key
            for line in lines:
                json.loads(line)


# --- a store that fails in the middle of a step -------------------------------------------


@pytest.mark.parametrize("ending", ["returns", "raises"])
async def test_a_store_that_fails_mid_step_leaves_the_step_its_outcome_and_what_was_stored(
    client: Any, bucket: str, ending: str
) -> None:
    # The agent has six events, two a page: chunks 0-2 and 2-4 land, then every chunk
    # put is refused. The other objects (task.json, meta.json, the marks) still land.
    agent = ScriptedAgent(page_limit=2)
    agent.add_task("t1")
    agent.publish("t1", *range(6))
    chunks = 0
    refused = threading.Event()

    def refuse_after_two_chunks(request: Any, **_: Any) -> AWSResponse | None:
        nonlocal chunks
        if not is_chunk(request):
            return None
        chunks += 1
        if chunks <= 2:
            return None
        refused.set()
        return refusal(request)

    client.meta.events.register("before-send.s3.PutObject", refuse_after_two_chunks)
    store = S3Store(bucket, client=client)
    failure = RuntimeError("the step's own failure")

    async def step() -> str:
        async with (
            LiveTurns(
                ENDPOINT, store, PREFIX, poll_interval_seconds=POLL, client=agent.client()
            ) as turns,
            turns.following("turn-1") as turn,
        ):
            turn.follow("t1")
            assert await anyio.to_thread.run_sync(refused.wait, 10)
            agent.finish("t1", TrajectoryState.COMPLETED)
            turn.ended("completed")
            if ending == "raises":
                raise failure
            return "the step's result"

    with anyio.fail_after(20):
        if ending == "raises":
            with pytest.raises(RuntimeError) as caught:
                await step()
            assert caught.value is failure
        else:
            assert await step() == "the step's result"
    names = live_names(client, bucket)
    assert names == [
        "00000000-00000002.jsonl",
        "00000002-00000004.jsonl",
        "end.json",
        "meta.json",
        "next.json",
        "task.json",
    ]
    assert_whole(client, bucket)
    items = await read_step(store)
    assert [(i.index, i.event) for i in items if isinstance(i, StoredEvent)] == [
        (n, n) for n in range(4)
    ]
    # Marked with what is known stored, and not complete: the rest never landed.
    assert items[-1] == TurnEnd("turn-1", TrajectoryState.COMPLETED, 4, False, None)


# --- a cancelled step, a put that stalls past its bound -------------------------------------


@pytest.mark.usefixtures("short_bounds")
@pytest.mark.parametrize("resumed_page_limit", [2, 3], ids=["same-chunks", "overlapping"])
async def test_a_stalled_put_past_its_bound_and_a_resumed_attempt_store_every_event_once(
    s3_server: S3Server, client: Any, bucket: str, resumed_page_limit: int
) -> None:
    # The first attempt stores chunk 0-2; its put of chunk 2-4 stalls in its thread.
    # The step is cancelled (a worker shutting down: it hands off), and the block exits
    # within its bounds. The retried attempt resumes from what S3 holds; the stalled put
    # is released after it and lands on the same key (412: the same bytes, done) or,
    # when the retry chunked otherwise, beside an overlapping chunk that agrees.
    agent = ScriptedAgent(page_limit=2)
    agent.add_task("t1")
    agent.publish("t1", *range(6))
    stalling = threading.Event()
    release = threading.Event()
    late_put_done = threading.Event()
    stalled: list[str] = []

    def stall_the_second_chunk(request: Any, **_: Any) -> None:
        if is_chunk(request) and chunk_name(request) == "00000002-00000004.jsonl":
            stalled.append(chunk_name(request))
            stalling.set()
            release.wait(20)

    def late_put_answered(**_: Any) -> None:
        if release.is_set():
            late_put_done.set()

    client.meta.events.register("before-send.s3.PutObject", stall_the_second_chunk)
    client.meta.events.register("after-call.s3.PutObject", late_put_answered)
    client.meta.events.register("after-call-error.s3.PutObject", late_put_answered)
    client.meta.events.register("after-call.s3.GetObject", late_put_answered)
    first = S3Store(bucket, client=client)
    bound = DRAIN_SECONDS + CLEANUP_BOUND_SECONDS + WRITE_BOUND_SECONDS + SLACK_SECONDS
    try:
        with anyio.fail_after(20):
            started = anyio.current_time()
            with anyio.CancelScope() as scope:
                async with (
                    LiveTurns(
                        ENDPOINT,
                        first,
                        PREFIX,
                        poll_interval_seconds=POLL,
                        drain_seconds=DRAIN_SECONDS,
                        client=agent.client(),
                    ) as turns,
                    turns.following("turn-1") as turn,
                ):
                    turn.follow("t1")
                    assert await anyio.to_thread.run_sync(stalling.wait, 10)
                    turns.hand_off()
                    scope.cancel()
                    await anyio.sleep_forever()
            took = anyio.current_time() - started
            assert took < bound, f"the block took {took:.1f} s, its bounds {bound:.1f} s"
            assert not release.is_set()
            assert stalled == ["00000002-00000004.jsonl"]
            held = live_names(client, bucket)
            assert held == ["00000000-00000002.jsonl", "meta.json", "task.json"]
            assert_whole(client, bucket)

            # The retry, on a client with no hooks: another worker.
            agent.page_limit = resumed_page_limit
            agent.finish("t1", TrajectoryState.COMPLETED)
            other = s3_server.client()
            second = S3Store(bucket, client=other)
            async with (
                LiveTurns(
                    ENDPOINT,
                    second,
                    PREFIX,
                    poll_interval_seconds=POLL,
                    client=agent.client(),
                    resume=True,
                ) as turns,
                turns.following("turn-1") as turn,
            ):
                turn.follow("t1")
                turn.ended("completed")

            release.set()
            assert await anyio.to_thread.run_sync(late_put_done.wait, 10)
            assert_whole(client, bucket)
            items = await read_step(second)
            other.close()
    finally:
        release.set()
    assert [(i.index, i.event) for i in items if isinstance(i, StoredEvent)] == [
        (n, n) for n in range(6)
    ]
    assert items[-1] == TurnEnd("turn-1", TrajectoryState.COMPLETED, 6, True, None)
    names = live_names(client, bucket)
    assert "00000002-00000004.jsonl" in names
