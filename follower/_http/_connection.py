"""One HTTP/1.1 connection of the library's transport: open, one exchange at a time, close.

A connection carries one request at a time: it sends the request, reads the
response's head with the codec (:mod:`follower._http._response`), then hands
the body's pieces to :mod:`follower._http._body` as they are asked for. Each wait
is bounded by the exchange's deadline and fails as httpx's own exception types.
Whether an idle connection may be reused is asked of the socket itself (one
poll): a readable idle socket was closed or reset by the server.
"""

from __future__ import annotations

import os
import select
import ssl
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import attrs
import httpx

from .._backend import running_backend
from ._response import END, ResponseParser

if TYPE_CHECKING:
    import socket
    from collections.abc import AsyncIterable

    from anyio.abc import AsyncBackend

    from ._head import ResponseHead
    from ._request import RequestWriter

    Origin = tuple[bytes, bytes, int]

# Reads off the socket; a page of a few KiB arrives in one.
RECEIVE_BYTES = 65536


@attrs.define(eq=False)
class Connection:
    """One HTTP/1.1 connection and its exchange's parser; used by one request at a time."""

    origin: Origin
    stream: anyio.abc.ByteStream
    # Registered once: asking whether an idle connection is readable is one poll.
    poller: Poller | None
    # A plain TCP connection's socket, which a request is written into directly
    # (``_send_whole``), and what its descriptor is (device, inode); None over TLS, whose
    # bytes only the stream may write, and on Windows, where a socket is no file to
    # ``os.write``.
    raw_socket: socket.socket | None = None
    socket_identity: tuple[int, int] = (0, 0)
    parser: ResponseParser = attrs.field(factory=ResponseParser)
    idle_since: float = 0.0
    # Its loop's scopes and checkpoints, without anyio's lookup each (``_backend``).
    backend: type[AsyncBackend] = attrs.field(factory=running_backend)

    @classmethod
    async def open(cls, origin: Origin, context: ssl.SSLContext, deadline: float) -> Connection:
        scheme, raw_host, port = origin
        host = raw_host.decode("ascii")
        with anyio.CancelScope(deadline=deadline) as scope:
            try:
                stream: anyio.abc.ByteStream
                if scheme == b"https":
                    # SNI and the certificate's name are the URL's host. HTTP frames
                    # its own messages (a truncated body is an error), so no
                    # close_notify is required of the server, as in httpcore.
                    stream = await anyio.connect_tcp(
                        host,
                        port,
                        ssl_context=context,
                        tls_hostname=host,
                        tls_standard_compatible=False,
                    )
                else:
                    stream = await anyio.connect_tcp(host, port)
            except ssl.SSLError as exc:
                raise httpx.ConnectError(f"TLS with {host}:{port} failed: {exc}") from exc
            except (OSError, anyio.BrokenResourceError) as exc:
                raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        if scope.cancelled_caught:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out")
        connection = cls(origin, stream, Poller.of(stream))
        if isinstance(stream, anyio.abc.SocketStream) and os.name == "posix":
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            connection.raw_socket, connection.socket_identity = raw, _identity(raw.fileno())
        return connection

    def reusable(self, now: float, expiry_seconds: float) -> bool:
        """Whether the idle connection may carry another request: fresh and quiet."""
        if now - self.idle_since >= expiry_seconds:
            return False
        # Readable while idle means the server closed it (EOF), reset it, or sent
        # something unasked for: none of these can carry a request.
        # (Both backends leave the socket unread while no one receives.)
        return self.poller is None or not self.poller.readable()

    async def exchange(
        self, content: bytes | AsyncIterable[bytes], writer: RequestWriter, deadline: float
    ) -> ResponseHead:
        """Send the request and read the response's head; the body follows in ``next_body``.

        ``content`` is the request's whole body, or its pieces as they come.
        """
        parser = self.parser = ResponseParser(
            head_request=writer.method == b"HEAD", request_close=writer.close
        )
        stream = self.stream
        sending = True
        with self.backend.create_cancel_scope(deadline=deadline) as scope:
            try:
                if isinstance(content, bytes):
                    # One send, so one syscall for a small request.
                    await self._send_whole(writer.whole(content))
                else:
                    await stream.send(writer.head)
                    async for chunk in content:
                        data = writer.piece(chunk)
                        if data:
                            await stream.send(data)
                    data = writer.end()
                    if data:
                        await stream.send(data)
                sending = False
                while (head := parser.next_head()) is None:
                    try:
                        parser.feed(await stream.receive(RECEIVE_BYTES))
                    except anyio.EndOfStream:
                        parser.feed(b"")
                return head
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                error = httpx.WriteError if sending else httpx.ReadError
                raise error(f"{type(exc).__name__}: {exc}") from exc
        assert scope.cancelled_caught
        if sending:
            raise httpx.WriteTimeout("sending the request timed out")
        raise httpx.ReadTimeout("the response's headers did not arrive in time")

    async def _send_whole(self, data: bytes) -> None:
        """Send ``data``, on a plain TCP connection straight into the socket's buffer.

        A stream's send yields to the loop once it has written (both backends
        checkpoint), and the response's receive, which comes next, waits anyway: that
        turn of the loop is about a twentieth of a read's CPU. Between exchanges
        nothing else writes to the socket, and the stream keeps no bytes of its own:
        trio's send returns once the kernel has taken every byte, and anyio sets
        asyncio's write buffer limits to 0, so its send returns once the transport's
        buffer is empty (a test in tests/http/test_transport.py fails should either
        change); an exchange whose send failed or was cancelled never parks its
        connection. So the bytes go out in order. Whatever the socket's buffer does
        not take (never, for a request of a few hundred bytes) goes by the stream. As
        the stream's send does, nothing is sent once the scope is cancelled.
        """
        await self.backend.checkpoint_if_cancelled()
        sent = 0
        if self.raw_socket is not None:
            fd = self.raw_socket.fileno()
            # Still this connection's socket: one closed under it (-1, or a number kept by
            # another event loop's stand-in) may have given its number to another file.
            if _identity(fd) == self.socket_identity:
                try:  # noqa: SIM105 (a read's path: no context manager's calls)
                    sent = os.write(fd, data)
                except BlockingIOError:
                    pass
        if sent < len(data):
            await self.stream.send(data[sent:])

    async def next_body(self, deadline: float) -> bytes | None:
        """The next piece of the response body, or None at its end.

        A small body comes in with the head, so most calls need no receive, and no
        scope for its deadline (each costs a timer).
        """
        parser = self.parser
        while True:
            piece = parser.next_body()
            if isinstance(piece, bytes):
                return piece
            if piece is END:
                return None
            parser.feed(await self.receive(deadline))

    async def receive(self, deadline: float) -> bytes:
        """Bytes off the connection (``b""`` at its end), waiting until ``deadline`` at most."""
        try:
            with self.backend.create_cancel_scope(deadline=deadline):
                return await self.stream.receive(RECEIVE_BYTES)
        except anyio.EndOfStream:
            return b""
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
        raise httpx.ReadTimeout("the response's body did not arrive in time")

    async def close(self) -> None:
        # Forcefully: a TLS goodbye to a server that stopped answering could hang.
        await anyio.aclose_forcefully(self.stream)


def _identity(fd: int) -> tuple[int, int]:
    """What file a descriptor is (device, inode), or ``(-1, -1)`` for none."""
    try:
        status = os.fstat(fd)
    except OSError:
        return (-1, -1)
    return (status.st_dev, status.st_ino)


@attrs.define(eq=False)
class Poller:
    """Whether a socket has something to read (data, EOF or an error), without reading it."""

    _fileno: int
    _poll: select.poll | None  # no poll() on Windows: select() then

    @classmethod
    def of(cls, stream: anyio.abc.ByteStream) -> Poller | None:
        """The poller of a stream's socket; None for a stream with no socket of its own."""
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        if raw is None:
            return None
        make_poll = getattr(select, "poll", None)
        poll = None if make_poll is None else make_poll()
        if poll is not None:
            poll.register(raw.fileno(), select.POLLIN)
        return cls(raw.fileno(), poll)

    def readable(self) -> bool:
        if self._poll is None:  # select() is fine for one socket
            return bool(select.select([self._fileno], [], [], 0)[0])
        return bool(self._poll.poll(0))
