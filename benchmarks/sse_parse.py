"""CPU of parsing a task's event stream: the library's SSE decoder against httpx-sse's.

A stream of N frames (default 10,000) as a2a-sdk sends them (sse-starlette's
``data: ...`` lines ended with CR LF), each the JSON-RPC response of an A2A 1.0
``statusUpdate`` of about 600 bytes, with a keep-alive comment every 100
frames. The bytes arrive in reads of 64 KiB (a stream that fell behind), one
frame a read (a live stream), and 256 bytes (a slow link), and each way parses
them all:

- ``ours``: ``follower._format._sse.SSEDecoder.feed`` on each read;
- ``httpx-sse decoders``: what ``EventSource.aiter_sse`` runs on each read:
  httpx's UTF-8 ``TextDecoder``, then httpx-sse's ``SSELineDecoder`` and
  ``SSEDecoder`` line by line;
- ``httpx-sse EventSource``: ``EventSource.iter_sse`` over an ``httpx.Response``
  that yields the reads (httpx's byte and text chunkers on top).

Each figure is the best of ``--repeats`` passes (``time.process_time()``), per
event; ratios are against ``ours`` on the same reads, in the same run. Every way
must dispatch the same events, or the run stops. Figures, never assertions.

Usage: ``python benchmarks/sse_parse.py [--frames 10000] [--repeats 5] [--quick]
[--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from _measure import run_about
from httpx._decoders import TextDecoder
from httpx_sse import EventSource
from httpx_sse._decoders import SSEDecoder as HttpxSSEDecoder
from httpx_sse._decoders import SSELineDecoder

from follower._format._sse import SSEDecoder

FRAME_TARGET_BYTES = 600
KEEP_ALIVE_EVERY = 100


def frame(n: int) -> bytes:
    """One frame: a statusUpdate as a2a-sdk streams it, padded to about 600 bytes."""
    update = {
        "result": {
            "statusUpdate": {
                "taskId": "0b9d6a4e-3f0c-4c58-9f53-2c1c0f3e7a11",
                "contextId": "5e2f9c1d-8a47-4b1e-b2a9-7d64c3e0f852",
                "status": {
                    "state": "TASK_STATE_WORKING",
                    "message": {
                        "messageId": f"m-{n:08d}",
                        "role": "ROLE_AGENT",
                        "parts": [{"text": ""}],
                        "contextId": "5e2f9c1d-8a47-4b1e-b2a9-7d64c3e0f852",
                        "taskId": "0b9d6a4e-3f0c-4c58-9f53-2c1c0f3e7a11",
                    },
                    "timestamp": "2025-06-01T12:00:00.000000+00:00",
                },
            }
        },
        "id": 2,
        "jsonrpc": "2.0",
    }
    bare = len(json.dumps(update).encode())
    text = f"step {n}: " + "é thinking " * ((FRAME_TARGET_BYTES - bare) // 12)
    update["result"]["statusUpdate"]["status"]["message"]["parts"][0]["text"] = text
    return b"data: " + json.dumps(update, ensure_ascii=False).encode() + b"\r\n\r\n"


def stream(frames: int) -> tuple[bytes, list[bytes]]:
    """The whole stream, and each frame's bytes (with the keep-alives before it)."""
    pieces = []
    for n in range(frames):
        keep_alive = b": ping - 2025-06-01 12:00:00\r\n\r\n" if n % KEEP_ALIVE_EVERY == 0 else b""
        pieces.append(keep_alive + frame(n))
    return b"".join(pieces), pieces


def reads_of(whole: bytes, size: int) -> list[bytes]:
    return [whole[at : at + size] for at in range(0, len(whole), size)]


def ours(reads: list[bytes]) -> list[str]:
    decoder = SSEDecoder(max_line_bytes=1 << 20, max_data_bytes=1 << 20)
    return [event.data for read in reads for event in decoder.feed(read)]


def httpx_sse_decoders(reads: list[bytes]) -> list[str]:
    """What EventSource.aiter_sse does with each read, without the Response around it."""
    text_decoder, line_decoder, decoder = TextDecoder("utf-8"), SSELineDecoder(), HttpxSSEDecoder()
    found = []
    for read in reads:
        for line in line_decoder.decode(text_decoder.decode(read)):
            sse = decoder.decode(line.rstrip("\n"))
            if sse is not None:
                found.append(sse.data)
    for line in line_decoder.decode(text_decoder.flush()) + line_decoder.flush():
        sse = decoder.decode(line)
        if sse is not None:
            found.append(sse.data)
    return found


def httpx_sse_event_source(reads: list[bytes]) -> list[str]:
    def body() -> Iterator[bytes]:
        yield from reads

    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())
    return [sse.data for sse in EventSource(response).iter_sse()]


WAYS: dict[str, Callable[[list[bytes]], list[str]]] = {
    "ours": ours,
    "httpx-sse decoders": httpx_sse_decoders,
    "httpx-sse EventSource": httpx_sse_event_source,
}


def best_seconds(
    way: Callable[[list[bytes]], list[str]], reads: list[bytes], repeats: int
) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.process_time()
        way(reads)
        best = min(best, time.process_time() - began)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--frames", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 frames, 2 repeats")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    frames, repeats = (1000, 2) if args.quick else (args.frames, args.repeats)
    whole, per_frame = stream(frames)
    shapes = {
        "64 KiB reads": reads_of(whole, 64 * 1024),
        "a frame a read": per_frame,
        "256-byte reads": reads_of(whole, 256),
    }
    expected = [frame(n)[len(b"data: ") : -4].decode() for n in range(frames)]
    results: list[dict[str, Any]] = []
    for shape, reads in shapes.items():
        for name, way in WAYS.items():
            if way(reads) != expected:
                print(f"{name} on {shape}: not the events sent; stopping", file=sys.stderr)
                return 1
            seconds = best_seconds(way, reads, repeats)
            results.append(
                {
                    "reads": shape,
                    "way": name,
                    "us_per_event": seconds * 1e6 / frames,
                    "mb_per_s": len(whole) / seconds / 1e6,
                }
            )
    base = {r["reads"]: r["us_per_event"] for r in results if r["way"] == "ours"}
    for r in results:
        r["vs_ours"] = r["us_per_event"] / base[r["reads"]]
    print(f"Python {sys.version.split()[0]}")
    print(
        f"{frames} frames of about {len(whole) // frames} bytes ({len(whole) / 1e6:.1f} MB), "
        f"CPU of the best of {repeats} passes"
    )
    print(f"{'reads':<16} {'way':<22} {'µs/event':>9} {'MB/s':>7} {'vs ours':>8}")
    for r in results:
        print(
            f"{r['reads']:<16} {r['way']:<22} {r['us_per_event']:>9.2f} "
            f"{r['mb_per_s']:>7.1f} {r['vs_ours']:>7.2f}x"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "benchmark": "sse_parse",
                    "frames": frames,
                    "stream_bytes": len(whole),
                    "repeats": repeats,
                    "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
                    "about": run_about(),
                    "results": results,
                },
                out,
                indent=2,
            )
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
