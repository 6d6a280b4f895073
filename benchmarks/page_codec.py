"""CPU of decoding a page and encoding its chunk, per page and per event.

A 1-event page and a 1,000-event page of small events (the reference agent's
shape). Prints the library's own path (``Page.from_json``, ``encode_events``)
beside the alternatives it was chosen over: the per-event ``JSONEncoder.encode``
it replaced and, when msgspec is installed, msgspec's decoder and encoder
(whose encoder writes other bytes: raw UTF-8, ``1e16`` for ``1e+16``, NaN as
``null``). Then large pages read through ``read_page`` on asyncio: how long the
read took, what it gave, and the longest the event loop went without running a
10 ms heartbeat task meanwhile. Nothing is asserted.

    python benchmarks/page_codec.py
"""

from __future__ import annotations

import json
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import anyio
import httpx

from follower._format._layout import encode_events
from follower._format._wire import Page
from follower._http._exchange import read_page
from follower._options import DEFAULT_MAX_PAGE_BYTES

_PER_EVENT_ENCODER = json.JSONEncoder(separators=(",", ":"))


def page_body(events: int) -> bytes:
    return json.dumps(
        {
            "context_id": "c",
            "task_id": "t",
            "state": "running",
            "format": None,
            "events": [{"index": i, "kind": "step", "text": f"step {i}"} for i in range(events)],
            "next": events,
            "has_more": True,
        }
    ).encode()


def per_event_encode(events: tuple[Any, ...]) -> bytes:
    """How chunks were encoded before: one JSONEncoder.encode a line."""
    return "".join(_PER_EVENT_ENCODER.encode(event) + "\n" for event in events).encode()


def best_seconds(call: Callable[[], object], events: int) -> float:
    number = max(10, 20_000 // events)
    return min(timeit.repeat(call, number=number, repeat=5)) / number


def main() -> None:
    rows: list[tuple[int, str, float]] = []
    for events in (1, 1000):
        body = page_body(events)
        page = Page.from_json(body, task_id="t", after=0)
        cases: dict[str, Callable[[], object]] = {
            "json.loads (stdlib)": lambda: json.loads(body),
            "Page.from_json": lambda: Page.from_json(body, task_id="t", after=0),
            "Page.to_batch": page.to_batch,
            "encode_events": lambda: encode_events(page.events),
            "per-event JSONEncoder.encode (before)": lambda: per_event_encode(page.events),
        }
        try:
            import msgspec
        except ImportError:
            pass
        else:
            decoder, encoder = msgspec.json.Decoder(), msgspec.json.Encoder()
            cases["msgspec decode"] = lambda: decoder.decode(body)
            cases["msgspec encode (other bytes)"] = lambda: b"\n".join(
                map(encoder.encode, page.events)
            )
        for name, call in cases.items():
            rows.append((events, name, best_seconds(call, events)))
    print(f"Python {sys.version.split()[0]}")
    print(f"{'events':>6}  {'step':<40} {'us/page':>10} {'us/event':>9}")
    for events, name, seconds in rows:
        print(f"{events:>6}  {name:<40} {seconds * 1e6:>10.2f} {seconds * 1e6 / events:>9.3f}")


def large_pages() -> dict[str, bytes]:
    head = b'{"task_id":"t","state":"running","events":['

    def page(events: bytes, count: int) -> bytes:
        return head + events + b'],"next":%d,"has_more":true}' % count

    # Tiny events ("0,") filling the default cap: the most events a page can hold, the
    # shape whose decoding held the loop longest (docs/security.md).
    tiny = DEFAULT_MAX_PAGE_BYTES // 2 - 64
    return {
        f"{DEFAULT_MAX_PAGE_BYTES >> 20} MiB of tiny events ({tiny / 1e6:.0f} M)": page(
            b"0," * tiny + b"0", tiny + 1
        ),
        "8 MB of small events (530 k)": page(b",".join([b'{"i":1,"k":"s"}'] * 530_000), 530_000),
        "11 MiB, 1000 events of 2000 floats": page(
            b",".join([b"[" + b",".join([b"%d.5" % i] * 2000) + b"]" for i in range(1000)]),
            1000,
        ),
    }


async def read_large(body: bytes) -> tuple[str, float, float]:
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _: httpx.Response(200, content=body))
    )
    longest = 0.0

    async def heartbeat() -> None:
        nonlocal longest
        last = anyio.current_time()
        while True:
            await anyio.sleep(0.01)
            now = anyio.current_time()
            longest, last = max(longest, now - last), now

    async with client, anyio.create_task_group() as tg:
        tg.start_soon(heartbeat)
        await anyio.sleep(0.05)
        started = time.perf_counter()
        try:
            page = await read_page(client, "http://agent.test/x", "t", 0)
            outcome = f"{len(page.events)} events"
        except Exception as exc:
            outcome = type(exc).__name__
        took = time.perf_counter() - started
        tg.cancel_scope.cancel()
    return outcome, took, longest


def main_large() -> None:
    print(f"\n{'large page':<36} {'MiB':>6}  {'outcome':<20} {'read s':>7} {'loop gap ms':>11}")
    for name, body in large_pages().items():
        outcome, took, gap = anyio.run(read_large, body)
        print(
            f"{name:<36} {len(body) / 2**20:>6.1f}  {outcome:<20} {took:>7.3f} {gap * 1e3:>11.1f}"
        )


if __name__ == "__main__":
    main()
    main_large()
