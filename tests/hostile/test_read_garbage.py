"""A read leaves no reference cycle behind: refcounting frees it, not the cyclic GC.

With thousands of followers, objects left in cycles by every read made the
garbage collector's full passes most of a process's CPU and its worst loop
blocks (benchmarks/scale.py reports the time spent in it). httpx binds a
response's stream back to the response; ``exchange()`` breaks that cycle once
the response is closed. This test fails if any read leaves a cycle again.
"""

from __future__ import annotations

import gc
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import anyio
import anyio.abc
import pytest

from follower._http._clients import leased_client
from follower._http._exchange import read_page

pytestmark = pytest.mark.anyio

PAGE = json.dumps(
    {
        "task_id": "t1",
        "after": 0,
        "next": 1,
        "events": [{"i": 0}],
        "state": "running",
        "has_more": False,
    }
).encode()
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    b"content-length: " + str(len(PAGE)).encode() + b"\r\n\r\n" + PAGE
)


async def _answer_every_request(stream: anyio.abc.SocketStream) -> None:
    buffer = b""
    async with stream:
        while True:
            while b"\r\n\r\n" in buffer:
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                if len(rest) < length:
                    break
                buffer = rest[length:]
                await stream.send(ANSWER)
            try:
                buffer += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return


@pytest.fixture
async def endpoint() -> AsyncIterator[str]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _answer_every_request)
        yield f"http://127.0.0.1:{port}/ext/trajectory"
        tg.cancel_scope.cancel()


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    """What the cyclic collector would free, kept instead (it does not run meanwhile)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def test_reads_on_the_default_client_leave_no_cycle(
    endpoint: str, saved_garbage: list[object]
) -> None:
    with anyio.fail_after(30):
        async with leased_client(None) as client:
            await read_page(client, endpoint, "t1", 0)  # the connection is made and kept
            gc.collect()
            saved_garbage.clear()
            for _ in range(50):
                page = await read_page(client, endpoint, "t1", 0)
                assert page.next == 1
            gc.collect()
            left = Counter(type(o).__name__ for o in saved_garbage)
    assert not left, f"50 reads left objects only the cyclic collector frees: {left}"
