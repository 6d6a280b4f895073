"""A lean agent for the scale benchmark: the trajectory cursor read, and nothing else.

The reference agent (hypercorn, ASGI) cannot answer 5,000 reads a second on a
2-core machine, so the followers would be measured waiting for it. This one is a
plain asyncio HTTP/1.1 keep-alive server (an ``asyncio.Protocol``, no framework)
that answers ``POST /ext/trajectory`` with ``{"task_id", "after"}`` as
docs/protocol.md says, for any task id:

- a task's events begin at its first read: event ``k`` becomes visible
  ``k * --interval`` seconds later, so a follower polling every second stores a
  page at every read; the task runs on (``running``) until the agent stops;
- at most 1,000 events a page, ``has_more`` when more are visible;
- 400 for a bad body or ``after`` past the end, 404 for other paths, 405 for
  other methods; ``Connection: close`` is honoured.

One A2A route, for the stream benchmark (benchmarks/streams.py): ``POST /a2a`` with
``SubscribeToTask {"id"}`` (A2A 1.0) answers a chunked ``text/event-stream``: the task's
snapshot, then event ``k`` as a ``statusUpdate`` (its message's data part holds the index)
at the moment it becomes visible, on the same timeline as the cursor read; the stream
never ends by itself. The followers are given the read's endpoint or this URL. Two routes of its own
tell the benchmark what it saw: ``GET /bench/stats`` (reads answered, tasks) and
``GET /bench/starts`` (each task's first read, as a wall-clock time, for lag).

Usage: ``python benchmarks/lean_agent.py [--port 0] [--interval 0.1]
[--event-bytes 64]``; it prints ``lean agent serving on http://127.0.0.1:PORT/``
and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import sys
import time

from _measure import raise_open_files_limit

ENDPOINT = "/ext/trajectory"
STREAM_ENDPOINT = "/a2a"
WORKING = "TASK_STATE_WORKING"
MAX_EVENTS_PER_PAGE = 1000
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024
FORMAT = "bench/v1"
SERVING = "lean agent serving on "

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


class Timeline:
    """Every task's events: when each became visible, and their encoded bytes (shared by all)."""

    def __init__(self, interval_seconds: float, event_bytes: int) -> None:
        self.interval = interval_seconds
        self._pad = "x" * event_bytes
        self._encoded: list[bytes] = []
        self.starts: dict[str, float] = {}
        self.reads = 0
        self.empty_reads = 0
        self.refused = 0
        self.streams = 0
        self.frames = 0

    def event(self, index: int) -> bytes:
        while len(self._encoded) <= index:
            k = len(self._encoded)
            event = {"kind": "bench", "index": k, "pad": self._pad}
            self._encoded.append(json.dumps(event, separators=(",", ":")).encode())
        return self._encoded[index]

    def read(self, body: bytes) -> tuple[int, bytes]:
        """One cursor read: its status and body."""
        try:
            asked = json.loads(body)
            task_id = asked["task_id"]
            after = asked["after"]
            limit = asked.get("limit", MAX_EVENTS_PER_PAGE)
        except (ValueError, KeyError, TypeError, AttributeError):
            return self._refuse(b"the body must be a JSON object with task_id and after")
        if not isinstance(task_id, str) or not task_id:
            return self._refuse(b"task_id must be a non-empty string")
        if type(after) is not int or after < 0:
            return self._refuse(b"after must be an integer >= 0")
        if type(limit) is not int or not 1 <= limit <= MAX_EVENTS_PER_PAGE:
            return self._refuse(b"limit must be an integer in 1..1000")
        now = time.time()
        start = self.starts.setdefault(task_id, now)
        visible = math.floor((now - start) / self.interval) + 1
        if after > visible:
            return self._refuse(b"after is past the end of the log")
        end = min(visible, after + limit)
        events = b",".join(self.event(index) for index in range(after, end))
        self.reads += 1
        self.empty_reads += end == after
        page = b"".join(
            (
                b'{"context_id":"bench","task_id":',
                json.dumps(task_id).encode(),
                b',"state":"running","format":"' + FORMAT.encode() + b'","events":[',
                events,
                b'],"next":%d,"has_more":%s}' % (end, b"true" if end < visible else b"false"),
            )
        )
        return 200, page

    def _refuse(self, why: bytes) -> tuple[int, bytes]:
        self.refused += 1
        return 400, why


class Connection(asyncio.Protocol):
    """One keep-alive connection: requests parsed off a buffer, answered in order."""

    def __init__(self, timeline: Timeline) -> None:
        self._timeline = timeline
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        # A stream's task, its start and its next event's index; the timer of that event.
        self._stream: tuple[str, float, int] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while self._transport is not None and not self._transport.is_closing():
            head_end = self._buffer.find(b"\r\n\r\n")
            if head_end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    self._answer(400, b"headers too large", keep_alive=False)
                return
            request_line, *header_lines = (
                bytes(self._buffer[:head_end]).decode("latin-1").split("\r\n")
            )
            headers = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            method, _, rest = request_line.partition(" ")
            target, _, version = rest.partition(" ")
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._answer(400, b"chunked bodies are not read here", keep_alive=False)
                return
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY_BYTES:
                self._answer(400, b"bad content-length", keep_alive=False)
                return
            if len(self._buffer) < head_end + 4 + length:
                return
            body = bytes(self._buffer[head_end + 4 : head_end + 4 + length])
            del self._buffer[: head_end + 4 + length]
            connection = headers.get("connection", "").lower()
            if version == "HTTP/1.1":
                keep_alive = connection != "close"
            else:
                keep_alive = connection == "keep-alive"
            status, payload, content_type = self._route(method, target, body)
            if status == 0:
                return  # a stream: it holds the connection from now on
            self._answer(status, payload, keep_alive=keep_alive, content_type=content_type)

    def _route(self, method: str, target: str, body: bytes) -> tuple[int, bytes, str]:
        path = target.split("?", 1)[0]
        if path == STREAM_ENDPOINT and method == "POST":
            return self._subscribe(body)
        if path == ENDPOINT:
            if method != "POST":
                return 405, b"the trajectory read is a POST", "text/plain"
            status, payload = self._timeline.read(body)
            return status, payload, "application/json" if status == 200 else "text/plain"
        if path == "/bench/stats" and method == "GET":
            stats = {
                "reads": self._timeline.reads,
                "empty_reads": self._timeline.empty_reads,
                "refused": self._timeline.refused,
                "tasks": len(self._timeline.starts),
                "streams": self._timeline.streams,
                "frames": self._timeline.frames,
            }
            return 200, json.dumps(stats).encode(), "application/json"
        if path == "/bench/starts" and method == "GET":
            return 200, json.dumps({"starts": self._timeline.starts}).encode(), "application/json"
        return 404, b"no such route", "text/plain"

    def _answer(
        self,
        status: int,
        payload: bytes,
        *,
        keep_alive: bool,
        content_type: str = "text/plain",
    ) -> None:
        assert self._transport is not None
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(payload)}\r\n"
            f"connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        ).encode("latin-1")
        self._transport.write(head + payload)
        if not keep_alive:
            self._transport.close()

    def _subscribe(self, body: bytes) -> tuple[int, bytes, str]:
        """Start a task's stream on this connection; answered by its frames, never by a body."""
        try:
            task_id = json.loads(body)["params"]["id"]
        except (ValueError, KeyError, TypeError):
            return 400, b"SubscribeToTask with params.id", "text/plain"
        assert self._transport is not None
        self._transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        timeline = self._timeline
        start = timeline.starts.setdefault(task_id, time.time())
        timeline.streams += 1
        snapshot = {"task": {"id": task_id, "contextId": "bench", "status": {"state": WORKING}}}
        self._frame(snapshot)
        loop = asyncio.get_running_loop()
        self._stream = (task_id, start, 0)
        self._next_frame(loop)
        return 0, b"", ""

    def _next_frame(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._stream is None or self._transport is None or self._transport.is_closing():
            return
        task_id, start, index = self._stream
        due = start + index * self._timeline.interval
        delay = due - time.time()
        if delay > 0:
            self._timer = loop.call_later(delay, self._next_frame, loop)
            return
        message = {
            "messageId": f"m{index}",
            "role": "ROLE_AGENT",
            "parts": [{"data": {"index": index}}],
        }
        status = {"state": WORKING, "message": message}
        self._frame({"statusUpdate": {"taskId": task_id, "contextId": "bench", "status": status}})
        self._timeline.frames += 1
        self._stream = (task_id, start, index + 1)
        self._next_frame(loop)

    def _frame(self, result: dict[str, object]) -> None:
        assert self._transport is not None
        data = (
            b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode() + b"\n\n"
        )
        self._transport.write(b"%x\r\n%s\r\n" % (len(data), data))

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._stream = None
        if self._timer is not None:
            self._timer.cancel()


async def serve(args: argparse.Namespace) -> None:
    raise_open_files_limit()
    timeline = Timeline(args.interval, args.event_bytes)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(timeline), args.host, args.port, backlog=8192, reuse_address=True
    )
    port = server.sockets[0].getsockname()[1]
    print(f"{SERVING}http://{args.host}:{port}/", flush=True)
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    async with server:
        await stopping.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (default)")
    parser.add_argument(
        "--interval", type=float, default=0.1, help="seconds between a task's events (0.1)"
    )
    parser.add_argument("--event-bytes", type=int, default=64, help="padding bytes per event (64)")
    args = parser.parse_args(argv)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
