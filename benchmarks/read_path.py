"""The read path alone: CPU per read of one follower, from the raw floor to ``read_page``.

One client reads a small page in a loop from a lean HTTP/1.1 server in another
process (so the server's CPU is not counted), over loopback, keep-alive. CPU is
``time.process_time()`` over the timed reads (after a warm-up), per read. Each
way of reading runs on asyncio and on trio:

- ``raw``: a canned request and a hand-split response over anyio streams (the floor);
- ``raw + deadline``: the same, each read under a cancel scope with a deadline
  (what bounding a whole exchange costs, as every transport must);
- ``h11``: h11 over the same anyio streams;
- ``lean codec``: the library's own HTTP/1.1 codec (``follower._http._request``,
  ``follower._http._response``) over them;
- ``httpx default``: ``httpx.AsyncClient().post`` on httpx's default transport (httpcore);
- ``httpx + ours``: ``httpx.AsyncClient(transport=AgentTransport(...)).post``;
- ``read_page default``: the library's ``read_page`` on httpx's default transport;
- ``read_page + ours``: ``read_page`` on a client of the library's pool (its transport);
- ``read_page + otel``: the same with OpenTelemetry's SDK configured (a tracer provider
  and a meter provider of the benchmark's own, as a step would be given): a follower's
  span current, so each read carries a ``traceparent``, and each read timed into the
  read-latency histogram, as a measured follower's are. Its ratio to ``read_page +
  ours`` is the cost of tracing a read (docs/operating.md).

Ratios are against ``httpx default`` on the same backend, in the same run. The
ways alternate over ``--rounds`` rounds and each figure is the median of its
rounds (the minimum is shown too): on a shared machine one round can be a
quarter off. Figures, never assertions: they belong to the machine they were
measured on.

Usage: ``python benchmarks/read_path.py [--reads 5000] [--rounds 3]
[--backend asyncio,trio] [--ways raw,...] [--quick] [--json PATH] [--profile]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import anyio
import anyio.abc
import h11
import httpx
from _measure import run_about

from follower._http._clients import ClientPool, _shared_ssl_context
from follower._http._exchange import read_page
from follower._http._request import KnownHeads, RequestWriter
from follower._http._response import END, NEED_DATA, ResponseParser
from follower._http._transport import AgentTransport

TASK_ID = "t1"
PAGE = json.dumps(
    {
        "context_id": "ctx",
        "task_id": TASK_ID,
        "state": "running",
        "format": "bench/v1",
        "events": [{"n": i, "text": "event"} for i in range(3)],
        "next": 3,
        "has_more": False,
    },
    separators=(",", ":"),
).encode()
REQUEST_BODY = json.dumps({"task_id": TASK_ID, "after": 0}, separators=(",", ":")).encode()
PATH = "/ext/trajectory"
WAYS = (
    "raw",
    "raw + deadline",
    "h11",
    "lean codec",
    "httpx default",
    "httpx + ours",
    "read_page default",
    "read_page + ours",
    "read_page + otel",
)


# --- the lean server (a child process, plain asyncio) ---------------------------------


class _PageServer(asyncio.Protocol):
    """Answers every request with PAGE, keep-alive; enough HTTP for this benchmark."""

    response = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(PAGE)).encode() + b"\r\n\r\n" + PAGE
    )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            length = 0
            at = head.find(b"content-length:")
            if at >= 0:
                length = int(head[at + 15 :].split(b"\r\n", 1)[0])
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.transport.write(self.response)  # type: ignore[attr-defined]


def serve() -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_PageServer, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())


# --- the ways of reading ----------------------------------------------------------------


class _Raw:
    """The floor: one canned request, the response split by hand."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.request = (
            f"POST {PATH} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(REQUEST_BODY)}\r\n\r\n"
        ).encode() + REQUEST_BODY

    async def __aenter__(self) -> _Raw:
        self.stream = await anyio.connect_tcp("127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stream.aclose()

    async def read(self) -> bytes:
        await self.stream.send(self.request)
        data = b""
        while True:
            data += await self.stream.receive()
            end = data.find(b"\r\n\r\n")
            if end < 0:
                continue
            at = data.find(b"content-length: ", 0, end)
            length = int(data[at + 16 : data.find(b"\r\n", at)])
            if len(data) >= end + 4 + length:
                return data[end + 4 : end + 4 + length]


class _RawWithDeadline(_Raw):
    """The floor, each read bounded by a deadline as a transport's exchange is."""

    async def read(self) -> bytes:
        with anyio.CancelScope(deadline=anyio.current_time() + 30):
            return await super().read()


class _H11(_Raw):
    """h11 over the same streams: what parsing HTTP properly costs."""

    async def __aenter__(self) -> _H11:
        await super().__aenter__()
        self.connection = h11.Connection(h11.CLIENT)
        return self

    async def read(self) -> bytes:
        connection = self.connection
        headers = [
            ("host", f"127.0.0.1:{self.port}"),
            ("content-type", "application/json"),
            ("content-length", str(len(REQUEST_BODY))),
        ]
        await self.stream.send(
            connection.send(h11.Request(method="POST", target=PATH, headers=headers))
            + connection.send(h11.Data(data=REQUEST_BODY))  # type: ignore[operator]
            + connection.send(h11.EndOfMessage())
        )
        parts = []
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await self.stream.receive())
            elif isinstance(event, h11.Data):
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                connection.start_next_cycle()
                return b"".join(parts)


class _LeanCodec(_Raw):
    """The library's codec over the same streams: what its transport parses with."""

    known_heads = KnownHeads()  # as the transport keeps them

    async def read(self) -> bytes:
        headers = [
            (b"host", f"127.0.0.1:{self.port}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(REQUEST_BODY)).encode()),
        ]
        writer = RequestWriter(b"POST", PATH.encode(), headers, known_heads=self.known_heads)
        await self.stream.send(writer.whole(REQUEST_BODY))
        parser = ResponseParser()
        while parser.next_head() is None:
            parser.feed(await self.stream.receive())
        parts = []
        while True:
            piece = parser.next_body()
            if piece is NEED_DATA:
                parser.feed(await self.stream.receive())
            elif piece is END:
                assert parser.reusable
                return b"".join(parts)
            else:
                parts.append(piece)


class _Httpx:
    """``client.post``, on httpx's default transport or on ours."""

    def __init__(self, port: int, transport: httpx.AsyncBaseTransport | None) -> None:
        self.url = f"http://127.0.0.1:{port}{PATH}"
        self.transport = transport

    async def __aenter__(self) -> _Httpx:
        self.client = httpx.AsyncClient(transport=self.transport)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def read(self) -> bytes:
        response = await self.client.post(self.url, json={"task_id": TASK_ID, "after": 0})
        return response.content


class _ReadPageDefault(_Httpx):
    async def read(self) -> bytes:
        page = await read_page(self.client, self.url, TASK_ID, 0)
        return b"x" * page.next


class _ReadPageOurs(_ReadPageDefault):
    """``read_page`` on a client leased from the library's pool, as a follower reads."""

    async def __aenter__(self) -> _ReadPageOurs:
        self.pool = ClientPool()
        self.lease = self.pool.lease()
        self.client = await self.lease.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.lease.__aexit__(None, None, None)


class _ReadPageTraced(_ReadPageOurs):
    """``read_page + ours`` inside a follower's span, each read timed, on the SDK's providers."""

    async def __aenter__(self) -> _ReadPageTraced:
        # Imported here: the other ways run without the SDK installed.
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from follower._telemetry import FOLLOWER_SPAN, telemetry_for

        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        self.meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        telemetry = telemetry_for(self.tracer_provider, self.meter_provider)
        assert telemetry._meters is not None
        self.observer = telemetry._meters.observer("cursor")
        self.span = telemetry.span(FOLLOWER_SPAN, {"follower.via": "cursor"})
        await super().__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await super().__aexit__(*exc)
        self.span.end(None)
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    async def read(self) -> bytes:
        started = anyio.current_time()
        page = await read_page(self.client, self.url, TASK_ID, 0)
        self.observer.read_took(anyio.current_time() - started)
        return b"x" * page.next


def _way(name: str, port: int) -> Any:
    if name == "raw":
        return _Raw(port)
    if name == "raw + deadline":
        return _RawWithDeadline(port)
    if name == "h11":
        return _H11(port)
    if name == "lean codec":
        return _LeanCodec(port)
    if name == "httpx default":
        return _Httpx(port, None)
    if name == "httpx + ours":
        return _Httpx(port, AgentTransport(ssl_context=_shared_ssl_context()))
    if name == "read_page default":
        return _ReadPageDefault(port, None)
    if name == "read_page + otel":
        return _ReadPageTraced(port, None)
    return _ReadPageOurs(port, None)


async def _measure(name: str, port: int, reads: int, profile: bool) -> float:
    async with _way(name, port) as way:
        for _ in range(max(50, reads // 10)):  # warm up: connections, caches
            await way.read()
        profiler = None
        if profile:
            import pyinstrument  # optional, for --profile only

            profiler = pyinstrument.Profiler(interval=0.0001, async_mode="disabled")
            profiler.start()
        start = time.process_time()
        for _ in range(reads):
            await way.read()
        elapsed = time.process_time() - start
        if profiler is not None:
            profiler.stop()
            print(profiler.output_text(unicode=False, color=False, show_all=False))
    return elapsed / reads * 1e6


# --- running and reporting ----------------------------------------------------------


def _machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "system": platform.platform(),
        "cpus": os.cpu_count(),
        "anyio": anyio.__version__ if hasattr(anyio, "__version__") else None,
        "httpx": httpx.__version__,
        "h11": h11.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=5000, help="timed reads per way")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of every way, alternating; the median is shown",
    )
    parser.add_argument("--backend", default="asyncio,trio", help="comma-separated backends")
    parser.add_argument("--ways", default=",".join(WAYS), help="comma-separated ways to run")
    parser.add_argument("--quick", action="store_true", help="a few hundred reads: seconds")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    parser.add_argument("--profile", action="store_true", help="profile each way (pyinstrument)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve()
        return 0
    reads = 200 if args.quick else args.reads
    rounds = 1 if args.quick or args.profile else max(1, args.rounds)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = set(ways) - set(WAYS)
    if unknown:
        parser.error(f"unknown ways: {', '.join(sorted(unknown))}; known: {', '.join(WAYS)}")
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]

    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        # Ways alternate, round after round, so a change in the machine's load
        # falls on all of them alike; the median of the rounds is the figure.
        samples: dict[tuple[str, str], list[float]] = {}
        for _ in range(rounds):
            for backend in backends:
                for name in ways:
                    cpu = anyio.run(_measure, name, port, reads, args.profile, backend=backend)
                    samples.setdefault((backend, name), []).append(cpu)
        results = [
            {
                "backend": backend,
                "way": name,
                "cpu_us_per_read": statistics.median(cpus),
                "cpu_us_per_read_min": min(cpus),
                "rounds": cpus,
            }
            for (backend, name), cpus in samples.items()
        ]
    finally:
        server.terminate()
        server.wait(timeout=10)

    baseline = {r["backend"]: r["cpu_us_per_read"] for r in results if r["way"] == "httpx default"}
    for r in results:
        base = baseline.get(r["backend"])
        r["vs_httpx_default"] = r["cpu_us_per_read"] / base if base else None
    print(
        f"CPU per read of a {len(PAGE)}-byte page, {reads} reads per way and round, "
        f"median of {rounds} round(s), loopback keep-alive"
    )
    print(f"{'backend':<8} {'way':<18} {'µs/read':>8} {'min':>8} {'vs httpx default':>17}")
    for r in results:
        ratio = f"{r['vs_httpx_default']:.2f}x" if r["vs_httpx_default"] else "-"
        print(
            f"{r['backend']:<8} {r['way']:<18} {r['cpu_us_per_read']:>8.1f} "
            f"{r['cpu_us_per_read_min']:>8.1f} {ratio:>17}"
        )
    for backend in backends:
        plain = next(
            (r for r in results if (r["backend"], r["way"]) == (backend, "read_page + ours")), None
        )
        traced = next(
            (r for r in results if (r["backend"], r["way"]) == (backend, "read_page + otel")), None
        )
        if plain is not None and traced is not None:
            ratio = traced["cpu_us_per_read"] / plain["cpu_us_per_read"]
            print(
                f"{backend}: tracing costs {ratio:.3f}x CPU per read "
                "(read_page + otel / read_page + ours)"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "benchmark": "read_path",
                    "reads": reads,
                    "rounds": rounds,
                    "page_bytes": len(PAGE),
                    "machine": _machine(),
                    "about": run_about(),
                    "results": results,
                    "targets": targets(results),
                },
                out,
                indent=2,
            )
            out.write("\n")
    return 0


# One read's CPU, on each backend: issue 21's bound (issue 10's was 150 µs, asyncio only).
READ_CPU_US = 120.0


def targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 21's targets for this benchmark (for summary.py): one read, <= 120 µs a backend."""
    found = []
    for backend in ("asyncio", "trio"):
        ours = next(
            (r for r in results if r["backend"] == backend and r["way"] == "read_page + ours"),
            None,
        )
        measured = None if ours is None else ours["cpu_us_per_read"]
        ratio = None if ours is None else ours["vs_httpx_default"]
        shown = "not measured" if measured is None else f"{measured:.0f} µs"
        if ratio is not None:
            shown += f" ({ratio:.2f}x httpx's default, the old follower's read)"
        found.append(
            {
                "id": f"read_path.cpu_per_read_{backend}",
                "what": f"one follower's read, CPU, {backend}",
                "bound": f"<= {READ_CPU_US:.0f} µs",
                "measured": measured,
                "shown": shown,
                "met": None if measured is None else measured <= READ_CPU_US,
            }
        )
    return found


if __name__ == "__main__":
    sys.exit(main())
