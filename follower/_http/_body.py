"""A response body read straight off its connection, and the bound on its bytes on the wire.

:class:`ResponseBody` is the body httpx's ``Response`` streams; the library's
exchange reads it whole through :meth:`ResponseBody.read_within` (found under
the response extension :data:`BODY_EXTENSION`), with no httpx layer between.
At the body's end the connection is handed back to be parked for reuse, or
closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio.lowlevel
import attrs
import httpx

from ._response import END, PAUSE

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from ._connection import Connection

# A body may take twice its cap on the wire, and this much more, before its read
# is cut short: chunked framing costs an honest server a few bytes a chunk, but a
# 4 KiB chunk-size line before each byte would let an agent send 4,000 times the
# cap (and have it parsed) until the read's deadline.
WIRE_FACTOR = 2
WIRE_ALLOWANCE_BYTES = 1024 * 1024
# ... and each chunk counts this much more than its bytes, for the parsing it costs
# (a few microseconds): at most ~500,000 chunks in a body at the default cap.
CHUNK_WIRE_BYTES = 64

# The key of a response's extensions under which the library's transport hands out its
# body (a ResponseBody), for callers that read it whole, without httpx's layers.
BODY_EXTENSION = "follower.body"


def wire_bytes_allowed(limit: int) -> int:
    """The most bytes a body capped at ``limit`` may take on the wire, framing included."""
    return WIRE_FACTOR * limit + WIRE_ALLOWANCE_BYTES


@attrs.define(eq=False)
class ResponseBody(httpx.AsyncByteStream):
    """The response body, read straight off the connection.

    A plain async iterator (not an async generator): a body left half-read is
    closed by :meth:`aclose`, with no generator for the garbage collector to
    finalise (which trio reports). At the body's end the connection goes back to
    its origin's idle stack if it may be reused; otherwise, and whenever the body
    is closed before its end, it is closed. :meth:`read_within` reads it whole.
    """

    # Called with the connection once the body is read to its end: True if it was
    # kept for reuse (the transport's idle stack), False if it must be closed.
    _park: Callable[[Connection], bool]
    _connection: Connection | None
    _deadline: float

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        connection = self._connection
        if connection is None:
            raise StopAsyncIteration
        try:
            chunk = await connection.next_body(self._deadline)
        except BaseException:
            self._connection = None
            await connection.close()
            raise
        if chunk is None:
            await self._finish(connection)
            raise StopAsyncIteration
        return chunk

    async def read_within(self, limit: int) -> tuple[bytes, str | None]:
        """The whole body and None if it is at most ``limit`` bytes.

        Otherwise its first ``limit`` bytes (or fewer) and why it was cut short:
        over ``limit``, or over :func:`wire_bytes_allowed` on the wire (its
        chunked framing counted); the connection is then closed and the rest
        never read. A body already read gives ``b""``. What it holds meanwhile is
        the body's bytes, in one buffer, and one receive beside the codec's own.
        """
        connection = self._connection
        if connection is None:
            return b"", None
        parser = connection.parser
        wire_limit = wire_bytes_allowed(limit)
        wire = parser.buffered  # what came in with the head
        body = bytearray()
        cut: str | None = None
        try:
            # The common case first: a small body that came whole, handed over as it is.
            first = parser.next_body()
            if isinstance(first, bytes) and len(first) <= limit:
                following = parser.next_body()
                if following is END:
                    await self._finish(connection)
                    return first, None
                body += first
                if isinstance(following, bytes):
                    body += following
            elif isinstance(first, bytes):
                body += memoryview(first)[: limit + 1]
            while (signal := parser.body_into(body, limit + 1 - len(body))) is not END:
                if len(body) > limit:
                    break
                if wire + CHUNK_WIRE_BYTES * parser.chunks > wire_limit:
                    cut = f"framed in over {wire_limit} bytes on the wire for a {limit}-byte cap"
                    break
                if signal is PAUSE:
                    await anyio.lowlevel.checkpoint()
                    continue
                data = await connection.receive(self._deadline)
                wire += len(data)
                parser.feed(data)
            if cut is None and len(body) > limit:
                cut = f"over the {limit}-byte cap"
        except BaseException:
            self._connection = None
            await connection.close()
            raise
        if cut is not None:
            self._connection = None
            await connection.close()
            del body[limit:]
            return bytes(body), cut
        await self._finish(connection)
        return bytes(body), None

    async def _finish(self, connection: Connection) -> None:
        self._connection = None
        if not (connection.parser.reusable and self._park(connection)):
            await connection.close()

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
