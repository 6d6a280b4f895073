"""Large pages decode in worker threads, at most PAGE_DECODER_THREADS at a time (docs/security.md).

A decoded page can take several times its body in memory, so the threads that decode
them are bounded on an event loop, however many followers read a large page at once.
Each decode here is held at a gate until the test has seen the others wait for a thread.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import anyio.from_thread
import httpx
import pytest

import follower._http._exchange as _exchange
from follower._format._wire import LARGE_PAGE_BYTES, Page
from follower._http._exchange import PAGE_DECODER_THREADS, read_page

pytestmark = pytest.mark.anyio

TASK = "t1"
ENDPOINT = "http://agent.test/ext/trajectory"
READERS = 2 * PAGE_DECODER_THREADS
EVENTS = ["x" * 200] * 1000
BODY = httpx.Response(
    200,
    json={
        "task_id": TASK,
        "state": "running",
        "format": None,
        "events": EVENTS,
        "next": len(EVENTS),
        "has_more": False,
    },
).content


class DecoderGate:
    """Page.from_json, held in its thread until released, counting the decodes under way."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = anyio.Event()
        self._lock = threading.Lock()
        self._active = 0
        self.peak = 0

    def from_json(self, body: bytes, **kwargs: Any) -> Page:
        with self._lock:
            self._active += 1
            self.peak = max(self.peak, self._active)
            enough = self._active == PAGE_DECODER_THREADS
        if enough:
            anyio.from_thread.run_sync(self.entered.set)
        try:
            assert self.release.wait(30), "the test never released the decoders"
            return Page.from_json(body, **kwargs)
        finally:
            with self._lock:
                self._active -= 1


async def test_at_most_four_large_pages_decode_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(BODY) > LARGE_PAGE_BYTES  # a page for a worker thread
    gate = DecoderGate()
    monkeypatch.setattr(_exchange, "Page", gate)
    pages: list[Page] = []

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=BODY)

    async def read(client: httpx.AsyncClient) -> None:
        pages.append(await read_page(client, ENDPOINT, TASK, 0))

    try:
        with anyio.fail_after(20):
            async with (
                httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
                anyio.create_task_group() as tg,
            ):
                for _ in range(READERS):
                    tg.start_soon(read, client)
                await gate.entered.wait()
                await anyio.wait_all_tasks_blocked()
                # Every reader is blocked: four in a decode, the rest waiting for a thread.
                waiting = _exchange._decoder_limiter().statistics().tasks_waiting
                assert waiting == READERS - PAGE_DECODER_THREADS
                gate.release.set()
    finally:
        gate.release.set()  # never leave a thread at the gate
    assert gate.peak == PAGE_DECODER_THREADS == 4
    assert len(pages) == READERS
    assert all(len(page.events) == len(EVENTS) for page in pages)
