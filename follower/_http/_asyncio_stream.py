"""A plain TCP connection on asyncio that keeps reading: no reader added and removed each receive.

anyio's asyncio socket stream pauses its transport's reading whenever no one receives,
and resumes it for each receive: the loop adds the socket's reader and removes it again
(two ``epoll_ctl`` calls, a handle and a selector key each time), about a sixteenth of a
steady read's Python calls. A connection of the library's transport receives once or
twice an exchange, so on asyncio its plain TCP connections use this stream instead: the
transport reads whatever arrives into a buffer, and pauses only once a limit is buffered
(flow control, as a paused stream has). Whether an idle connection may be reused is then
asked of that buffer first (:meth:`KeptReadingStream.readable`): the loop may have read
an EOF, a reset or a stray byte already, which the socket no longer shows.

Its ends and failures are anyio's exception types: ``EndOfStream`` at the server's
EOF, ``BrokenResourceError`` for a connection lost or a write refused (at the send,
where anyio's stream fails the receive after it), ``ClosedResourceError`` once closed
here, ``BusyResourceError`` for a second receive or send at once. TLS, trio and
another library's asyncio loop (:func:`runs_on`) keep anyio's streams.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from anyio.abc import AsyncBackend

# Reading pauses once this much is buffered unread, and resumes below it: at most this,
# and the one read the loop makes past it, is held for a receive to come.
BUFFER_LIMIT = 64 * 1024
# What asyncio's connect waits before trying the next address, as anyio's connect_tcp.
_HAPPY_EYEBALLS_DELAY = 0.25


def runs_on(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the stream serves ``loop``: asyncio's own loops, not another's (uvloop's).

    Another loop's transports and connect are its own (uvloop's connect takes no happy
    eyeballs): its connections keep anyio's stream.
    """
    return isinstance(loop, asyncio.BaseEventLoop)


class KeptReadingStream(asyncio.Protocol, anyio.abc.ByteStream):
    """A plain TCP connection on asyncio, read as bytes arrive; one receive or send at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, backend: type[AsyncBackend]) -> None:
        self._loop = loop
        self._backend = backend
        self._transport: asyncio.Transport | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._reading_paused = False
        self._writing_paused = False
        self._at_eof = False
        self._lost = False
        self._error: Exception | None = None
        self._closed = False
        # The receive's and the send's waits: one of each at a time (else BusyResourceError).
        self._receiving: asyncio.Future[None] | None = None
        self._sending: asyncio.Future[None] | None = None

    @classmethod
    async def connect(
        cls, loop: asyncio.AbstractEventLoop, backend: type[AsyncBackend], host: str, port: int
    ) -> KeptReadingStream:
        """Connect to ``host``:``port``; fails as asyncio's connect does (an ``OSError``).

        A name's addresses are tried as anyio's connect tries them (happy eyeballs); an
        address is connected to directly (asyncio's race would leave its tasks to the
        cyclic collector).
        """
        try:
            ipaddress.ip_address(host)
        except ValueError:
            _, stream = await loop.create_connection(
                lambda: cls(loop, backend), host, port, happy_eyeballs_delay=_HAPPY_EYEBALLS_DELAY
            )
        else:
            _, stream = await loop.create_connection(lambda: cls(loop, backend), host, port)
        return stream

    # The protocol's side: called by the loop.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        # Told to pause writing as soon as a byte is left unsent: a send returns only
        # once the kernel has every byte, as anyio's does (Connection._send_whole).
        transport.set_write_buffer_limits(0)

    def data_received(self, data: bytes) -> None:
        self._chunks.append(bytes(data))  # a proactor loop may hand a bytearray
        self._buffered += len(data)
        if self._buffered >= BUFFER_LIMIT and not self._reading_paused:
            self._reading_paused = True
            assert self._transport is not None
            self._transport.pause_reading()
        _wake(self._receiving)

    def eof_received(self) -> bool:
        self._at_eof = True
        _wake(self._receiving)
        return True  # the transport stays open: closing it is aclose's

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost, self._error = True, exc
        _wake(self._receiving)
        _wake(self._sending)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        _wake(self._sending)

    # The stream's side: called by the connection.

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        transport = self._transport
        if transport is None:
            return {}
        return {anyio.abc.SocketAttribute.raw_socket: lambda: transport.get_extra_info("socket")}

    def readable(self) -> bool:
        """Whether anything came in while no one received: bytes, the server's EOF, a loss."""
        return bool(self._chunks) or self._at_eof or self._lost

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._receiving is not None:
            raise anyio.BusyResourceError("reading from")
        if self._chunks:
            # Bytes that came in already are returned without a turn of the loop; as
            # anyio's receive, a cancel pending goes first.
            await self._backend.checkpoint_if_cancelled()
        while not self._chunks:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._error is not None:
                raise anyio.BrokenResourceError from self._error
            if self._at_eof or self._lost:
                raise anyio.EndOfStream
            waiter = self._receiving = self._loop.create_future()
            try:
                await waiter
            finally:
                self._receiving = None
        chunk = self._chunks.popleft()
        if len(chunk) > max_bytes:
            chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
            self._chunks.appendleft(rest)
        self._buffered -= len(chunk)
        if self._reading_paused and self._buffered < BUFFER_LIMIT:
            self._reading_paused = False
            assert self._transport is not None
            self._transport.resume_reading()
        return chunk

    async def send(self, item: bytes) -> None:
        if self._sending is not None:
            raise anyio.BusyResourceError("writing to")
        # As anyio's send: a cancel pending fails it before a byte is written.
        await self._backend.checkpoint_if_cancelled()
        transport = self._transport
        if self._closed:
            raise anyio.ClosedResourceError
        if self._lost or transport is None or transport.is_closing():
            raise anyio.BrokenResourceError from self._error
        transport.write(item)  # tries the socket at once; keeps only what it refused
        # A write the socket refused closes the transport (its loss comes a turn later).
        if transport.is_closing():
            raise anyio.BrokenResourceError("the connection broke while sending")
        while self._writing_paused:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._lost:
                raise anyio.BrokenResourceError from self._error
            waiter = self._sending = self._loop.create_future()
            try:
                await waiter
            finally:
                self._sending = None

    async def send_eof(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write_eof()

    async def aclose(self) -> None:
        """Close at once; bytes a server has not taken are dropped rather than waited for."""
        self._closed = True
        transport = self._transport
        if transport is not None and not transport.is_closing():
            if transport.get_write_buffer_size():
                transport.abort()
            else:
                transport.close()
        _wake(self._receiving)
        _wake(self._sending)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
