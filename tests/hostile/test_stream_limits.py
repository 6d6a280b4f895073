"""Streams an agent sends: lines, events and chatter past their bounds, and frames that lie.

Each ends following with a typed :class:`~follower.MalformedPageError` (or the JSON-RPC error
the agent sent), after what came before it is stored; none grows memory without a bound, and
none is retried: a stream that broke a rule is no busy agent. The agent is httpx's
``MockTransport``, streaming the bytes a test writes, in pieces as a network would.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from follower import (
    A2AProtocolError,
    MalformedPageError,
    MalformedPageReason,
    TaskSource,
    Via,
)
from follower._options import FollowOptions
from follower._reading._follow import FollowProgress
from follower._reading._stream import follow_stream
from follower.lowlevel import TrajectoryBatch

pytestmark = pytest.mark.anyio

TASK = "t1"
URL = "http://agent.test/a2a"
SOURCE = TaskSource(Via.STREAM, URL, "1.0")
MAX_EVENT_BYTES = 4096


def frame(result: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode() + b"\n\n"


def status(state: str, text: str | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {"taskId": TASK, "contextId": "c", "status": {"state": state}}
    if text is not None:
        update["status"]["message"] = {
            "messageId": text,
            "role": "ROLE_AGENT",
            "parts": [{"text": text}],
        }
    return {"statusUpdate": update}


SNAPSHOT = frame(
    {"task": {"id": TASK, "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}
)
GOOD = [
    SNAPSHOT,
    frame(status("TASK_STATE_WORKING", "one")),
    frame(status("TASK_STATE_WORKING", "two")),
]


class Pieces(httpx.AsyncByteStream):
    """A body of ``pieces``, one receive each: an iterator, not a generator left to the GC."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self._pieces:
            raise StopAsyncIteration
        return self._pieces.pop(0)


def streaming(*pieces: bytes, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """A client whose every request is answered with ``pieces``, one receive each."""

    def answer(request: httpx.Request) -> httpx.Response:
        fields = {"content-type": "text/event-stream", **(headers or {})}
        return httpx.Response(200, headers=fields, stream=Pieces(list(pieces)))

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


async def follow(client: httpx.AsyncClient) -> tuple[list[Any], BaseException | None]:
    """Follow the task through ``client``; the events handed over, and what ended it."""
    handed: list[Any] = []

    async def sink(batch: TrajectoryBatch) -> None:
        handed.extend(batch.events)

    options = FollowOptions(
        poll_interval_seconds=0.01, client=client, max_event_bytes=MAX_EVENT_BYTES
    )
    with anyio.fail_after(10):
        try:
            await follow_stream(
                SOURCE, TASK, sink, stop=anyio.Event(), options=options, progress=FollowProgress()
            )
        except Exception as exc:
            return handed, exc
    return handed, None


def texts(events: list[Any]) -> list[str]:
    return [
        e["statusUpdate"]["status"]["message"]["parts"][0]["text"]
        for e in events
        if "statusUpdate" in e and "message" in e["statusUpdate"]["status"]
    ]


async def test_a_line_past_its_bound_ends_following_after_what_came_before() -> None:
    endless = b"data: " + b"x" * 1024
    client = streaming(*GOOD, *[endless] * 200)  # 200 KiB with no line end
    handed, ended = await follow(client)
    assert texts(handed) == ["one", "two"]
    assert isinstance(ended, MalformedPageError)
    assert ended.task_id == TASK


async def test_endless_comments_with_no_event_end_following() -> None:
    chatter = b": keep-alive\n" * 10_000
    handed, ended = await follow(streaming(*GOOD, *[chatter] * 20))  # 2.6 MB of comments
    assert texts(handed) == ["one", "two"]
    assert isinstance(ended, MalformedPageError)


async def test_keep_alives_between_events_are_no_fault() -> None:
    ping = b": ping\n\n"
    pieces = [SNAPSHOT]
    for index in range(200):
        pieces += [ping * 50, frame(status("TASK_STATE_WORKING", f"u{index}"))]
    pieces.append(frame(status("TASK_STATE_COMPLETED")))
    handed, ended = await follow(streaming(*pieces))
    assert ended is None
    assert texts(handed) == [f"u{index}" for index in range(200)]


async def test_an_event_past_max_event_bytes_is_refused_and_not_handed_over() -> None:
    big = frame(status("TASK_STATE_WORKING", "x" * MAX_EVENT_BYTES))
    handed, ended = await follow(streaming(*GOOD, big, frame(status("TASK_STATE_COMPLETED"))))
    assert texts(handed) == ["one", "two"]
    assert isinstance(ended, MalformedPageError)
    assert ended.reason is MalformedPageReason.EVENT_TOO_LARGE


async def test_a_frame_of_another_task_is_refused() -> None:
    other = frame(
        {"statusUpdate": {**status("TASK_STATE_WORKING")["statusUpdate"], "taskId": "t2"}}
    )
    handed, ended = await follow(streaming(*GOOD, other))
    assert texts(handed) == ["one", "two"]
    assert isinstance(ended, MalformedPageError)
    assert ended.reason is MalformedPageReason.TASK_MISMATCH


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"data: not json\n\n", MalformedPageReason.NOT_AN_OBJECT),
        (
            b'data: {"jsonrpc": "2.0", "id": 1, "result": {"nothing": {}}}\n\n',
            MalformedPageReason.BAD_FIELD,
        ),
        (frame(status("TASK_STATE_DREAMING")), MalformedPageReason.UNKNOWN_STATE),
        (
            b'data: {"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t1", "n": NaN}}}\n\n',
            MalformedPageReason.BAD_NUMBER,
        ),
        (b"data: " + b"[" * 200 + b"]" * 200 + b"\n\n", MalformedPageReason.TOO_DEEP),
    ],
    ids=["not-json", "no-kind", "unknown-state", "nan", "too-deep"],
)
async def test_a_malformed_frame_is_refused_with_its_reason(
    data: bytes, reason: MalformedPageReason
) -> None:
    handed, ended = await follow(streaming(*GOOD, data))
    assert texts(handed) == ["one", "two"]
    assert isinstance(ended, MalformedPageError)
    assert ended.reason is reason


async def test_frames_before_a_bad_one_in_the_same_read_are_stored() -> None:
    bad = frame(status("TASK_STATE_DREAMING"))
    handed, ended = await follow(streaming(b"".join([*GOOD, bad])))  # one read
    assert texts(handed) == ["one", "two"]
    assert isinstance(ended, MalformedPageError)


async def test_a_json_rpc_error_in_a_frame_ends_following_with_it() -> None:
    error = b'data: {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom"}}\n\n'
    handed, ended = await follow(streaming(*GOOD, error))
    assert texts(handed) == ["one", "two"]
    assert isinstance(ended, A2AProtocolError)
    assert ended.code == -32603


async def test_a_compressed_stream_is_refused_unread() -> None:
    handed, ended = await follow(streaming(*GOOD, headers={"content-encoding": "gzip"}))
    assert handed == []
    assert isinstance(ended, MalformedPageError)


async def test_an_answer_that_is_no_stream_is_refused() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": {"task": {}}})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    handed, ended = await follow(client)
    assert handed == []
    assert isinstance(ended, MalformedPageError)
