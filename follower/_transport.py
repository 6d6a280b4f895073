"""The library's own HTTP/1.1 transport for agent requests, under httpx's client.

httpx's default transport (httpcore) spends most of a small read in its pool and
stream machinery. A follower needs far less: it has at most one request in flight,
so each request takes a connection of its own, from a per-origin stack of idle
keep-alive connections or newly opened, and never waits for another's. The
exchange is parsed with h11 and bounded as a whole (connect, send, headers and
body) by the request's timeout. Failures are httpx's own exception types, so code
written for httpx behaves the same on either transport.

Deliberately absent: proxies (the client falls back to httpx's transport when the
environment names one), HTTP/2, decoding (the caller reads the bytes it was sent),
redirects and trace hooks. A request is never retried: it may have reached the
server, and an A2A ``message/send`` must never be sent twice.
"""

from __future__ import annotations

import select
import ssl
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import h11
import httpx

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    Origin = tuple[bytes, bytes, int]

# An idle connection is not reused after this long: servers close idle connections
# after a few seconds (hypercorn and uvicorn 5 s, gunicorn 2 s), and a request sent
# into one the server is closing fails. httpx's own default is the same 5 s; a
# server that closes sooner is caught by the readability check before reuse.
IDLE_EXPIRY_SECONDS = 5.0
# Reads off the socket; a page of a few KiB arrives in one.
_RECEIVE_BYTES = 65536
_DEFAULT_PORTS = {b"http": 80, b"https": 443}
_NEVER = float("inf")


class AgentTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive over anyio streams, one connection per request in flight.

    ``ssl_context`` verifies servers for ``https`` URLs (SNI and the hostname are
    checked against the URL's host). A connection is reused only after a complete
    exchange that h11 says may continue; one that broke, was cut short, or said
    ``Connection: close`` is closed. :meth:`aclose` closes the idle connections; a
    connection in use is closed when its response is.
    """

    def __init__(
        self, *, ssl_context: ssl.SSLContext, idle_expiry_seconds: float = IDLE_EXPIRY_SECONDS
    ) -> None:
        self._ssl_context = ssl_context
        self._idle_expiry_seconds = idle_expiry_seconds
        self._idle: dict[Origin, list[_Connection]] = {}
        self._closed = False

    @property
    def idle_connection_count(self) -> int:
        return sum(len(stack) for stack in self._idle.values())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.raw_scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        origin = (scheme, url.raw_host, url.port or _DEFAULT_PORTS[scheme])
        deadline, connect_deadline = _deadlines(request.extensions.get("timeout"))
        connection = await self._idle_connection(origin)
        if connection is None:
            connection = await _Connection.open(
                origin, self._ssl_context, min(deadline, connect_deadline)
            )
        try:
            event = await connection.exchange(request, deadline)
        except BaseException:
            await connection.close()
            raise
        return httpx.Response(
            event.status_code,
            headers=event.headers,
            stream=_ResponseBody(self, connection, deadline),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": event.reason},
        )

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for stack in idle.values():
            for connection in stack:
                await connection.close()

    async def _idle_connection(self, origin: Origin) -> _Connection | None:
        stack = self._idle.get(origin)
        if not stack:
            return None
        now = anyio.current_time()
        # The oldest sit at the bottom of the stack; drop one a call once expired,
        # so a burst of connections does not linger after the burst.
        if len(stack) > 1 and not stack[0].reusable(now, self._idle_expiry_seconds):
            await stack.pop(0).close()
        while stack:
            connection = stack.pop()
            if connection.reusable(now, self._idle_expiry_seconds):
                return connection
            await connection.close()
        return None

    def park(self, connection: _Connection) -> bool:
        """Keep a connection whose exchange completed for the next request to its origin.

        False when the transport is closed: the caller closes the connection.
        """
        if self._closed:
            return False
        connection.idle_since = anyio.current_time()
        self._idle.setdefault(connection.origin, []).append(connection)
        return True


class AgentClient(httpx.AsyncClient):
    """An httpx client on an :class:`AgentTransport`: each exchange is bounded as a whole.

    Callers that bound an exchange themselves (with trace hooks, as httpcore's
    pool wait must be told from the read) can skip that on this client.
    """

    def __init__(self, transport: AgentTransport, **kwargs: Any) -> None:
        super().__init__(transport=transport, **kwargs)
        # httpx extracts cookies from every response through http.cookiejar, about
        # a tenth of a small read; agents rarely set any, so skip it when none is set.
        self._cookies = _CookiesWhenSet(self._cookies)


class _CookiesWhenSet(httpx.Cookies):
    """httpx's cookies, extracted only from responses that set some."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


def _deadlines(timeout: Any) -> tuple[float, float]:
    """The whole exchange's deadline and the connect's, from httpx's timeout extension.

    The exchange gets the longest of the connect, write and read timeouts (httpx's
    own apply to each socket operation; here they bound the whole), or no bound
    without a read timeout; the connect also gets its own. There is no pool wait:
    a request never waits for a connection.
    """
    if not timeout:
        return _NEVER, _NEVER
    now = anyio.current_time()
    connect, write, read = timeout.get("connect"), timeout.get("write"), timeout.get("read")
    # No read timeout asks for a read that may take as long as it takes.
    whole = _NEVER if read is None else now + max(t for t in (connect, write, read) if t)
    return whole, (_NEVER if connect is None else now + connect)


class _Connection:
    """One HTTP/1.1 connection and its h11 state; used by one request at a time."""

    __slots__ = ("fileno", "h11", "idle_since", "origin", "stream")

    def __init__(self, origin: Origin, stream: anyio.abc.ByteStream) -> None:
        self.origin = origin
        self.stream = stream
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        self.fileno = -1 if raw is None else raw.fileno()
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    @classmethod
    async def open(cls, origin: Origin, context: ssl.SSLContext, deadline: float) -> _Connection:
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
        return cls(origin, stream)

    def reusable(self, now: float, expiry_seconds: float) -> bool:
        """Whether the idle connection may carry another request: fresh and quiet."""
        if now - self.idle_since >= expiry_seconds:
            return False
        # Readable while idle means the server closed it (EOF), reset it, or sent
        # something unasked for: none of these can carry a request.
        # (Both backends leave the socket unread while no one receives.)
        return self.fileno < 0 or not _readable(self.fileno)

    async def exchange(self, request: httpx.Request, deadline: float) -> h11.Response:
        """Send the request and read the response's head; the body follows in ``next_body``."""
        connection = self.h11
        head = h11.Request(
            method=request.method, target=request.url.raw_path, headers=request.headers.raw
        )
        try:
            content: bytes | None = request.content
        except httpx.RequestNotRead:
            content = None
        sending = True
        with anyio.CancelScope(deadline=deadline) as scope:
            try:
                if content is not None:
                    # One send, so one syscall for a small request.
                    data = connection.send(head)
                    if content:
                        data += connection.send(h11.Data(data=content))
                    data += connection.send(h11.EndOfMessage())
                    await self.stream.send(data)
                else:
                    await self.stream.send(connection.send(head))
                    async for chunk in request.stream:  # type: ignore[union-attr]
                        await self.stream.send(connection.send(h11.Data(data=chunk)))
                    await self.stream.send(connection.send(h11.EndOfMessage()))
                sending = False
                while True:
                    event = await self._next_event()
                    if isinstance(event, h11.Response):
                        return event
                    # 1xx answers come before the real one.
            except h11.LocalProtocolError as exc:
                raise httpx.LocalProtocolError(str(exc)) from exc
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                error = httpx.WriteError if sending else httpx.ReadError
                raise error(f"{type(exc).__name__}: {exc}") from exc
        assert scope.cancelled_caught
        if sending:
            raise httpx.WriteTimeout("sending the request timed out")
        raise httpx.ReadTimeout("the response's headers did not arrive in time")

    async def next_body(self, deadline: float) -> bytes | None:
        """The next piece of the response body, or None at its end."""
        try:
            event = await self._next_event(deadline)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
        if isinstance(event, h11.Data):
            return bytes(event.data)
        return None

    async def _next_event(self, deadline: float | None = None) -> h11.Event:
        """The next event off the connection; its receives bounded by ``deadline`` if given.

        Without one, the caller's scope bounds them. A small body comes in with the
        headers, so most body reads need no scope (each costs a timer).
        """
        connection = self.h11
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is h11.NEED_DATA:
                connection.receive_data(await self._receive(deadline))
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("the server closed the connection mid-exchange")
            return event  # type: ignore[return-value]

    async def _receive(self, deadline: float | None) -> bytes:
        try:
            if deadline is None:
                return await self.stream.receive(_RECEIVE_BYTES)
            with anyio.CancelScope(deadline=deadline):
                return await self.stream.receive(_RECEIVE_BYTES)
        except anyio.EndOfStream:
            return b""
        raise httpx.ReadTimeout("the response's body did not arrive in time")

    def may_continue(self) -> bool:
        """Whether the exchange completed and both sides keep the connection open."""
        connection = self.h11
        if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
            return False
        connection.start_next_cycle()
        return True

    async def close(self) -> None:
        # Forcefully: a TLS goodbye to a server that stopped answering could hang.
        await anyio.aclose_forcefully(self.stream)


def _readable(fileno: int) -> bool:
    """Whether a socket has something to read (data, EOF or an error), without reading it."""
    if _poll is None:  # no poll() on Windows; select() is fine for one socket there
        return bool(select.select([fileno], [], [], 0)[0])
    poller = _poll()
    poller.register(fileno, select.POLLIN)
    return bool(poller.poll(0))


_poll = getattr(select, "poll", None)


class _ResponseBody(httpx.AsyncByteStream):
    """The response body, read straight off the connection.

    A plain async iterator (not an async generator): a body left half-read is
    closed by :meth:`aclose`, with no generator for the garbage collector to
    finalise (which trio reports). At the body's end the connection goes back to
    its origin's idle stack if it may be reused; otherwise, and whenever the body
    is closed before its end, it is closed.
    """

    __slots__ = ("_connection", "_deadline", "_transport")

    def __init__(self, transport: AgentTransport, connection: _Connection, deadline: float) -> None:
        self._transport = transport
        self._connection: _Connection | None = connection
        self._deadline = deadline

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
            self._connection = None
            if not (connection.may_continue() and self._transport.park(connection)):
                await connection.close()
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
