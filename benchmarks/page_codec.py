"""CPU of decoding a page and encoding its chunk, per page and per event.

A 1-event page and a 1,000-event page of small events (the reference agent's
shape). Prints the library's own path (``Page.from_json``, ``encode_events``)
beside the alternatives it was chosen over: the per-event ``JSONEncoder.encode``
it replaced and, when msgspec is installed, msgspec's decoder and encoder
(whose encoder writes other bytes: raw UTF-8, ``1e16`` for ``1e+16``, NaN as
``null``). Nothing is asserted.

    python benchmarks/page_codec.py
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable
from typing import Any

from follower._layout import encode_events
from follower._wire import Page

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


if __name__ == "__main__":
    main()
