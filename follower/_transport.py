"""The library's own HTTP/1.1 transport for agent requests, under httpx's client.

httpx's default transport (httpcore) spends most of a small read in its pool and
stream machinery. A follower needs far less: it has at most one request in flight,
so each request takes a connection of its own, from a per-origin stack of idle
keep-alive connections or newly opened, and never waits for another's. The
exchange is framed and parsed by the library's own strict HTTP/1.1 codec
(:mod:`follower._http11`; h11 cost more than the socket work) and bounded as a
whole (connect, send, headers and body) by the request's timeout. Failures are
httpx's own exception types, so code written for httpx behaves the same on
either transport.

Deliberately absent: proxies (the client falls back to httpx's transport when the
environment names one), HTTP/2, decoding (the caller reads the bytes it was sent),
redirects and trace hooks. A request is never retried: it may have reached the
server, and an A2A ``message/send`` must never be sent twice.
"""

from __future__ import annotations

import json
import select
import ssl
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import httpx

from ._http11 import END, PAUSE, KnownHeads, RequestWriter, ResponseHead, ResponseParser

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    Origin = tuple[bytes, bytes, int]

# An idle connection is not reused after this long: servers close idle connections
# after a few seconds (hypercorn and uvicorn 5 s, gunicorn 2 s), and a request sent
# into one the server is closing fails. httpx's own default is the same 5 s; a
# server that closes sooner is caught by the readability check before reuse.
# Idle time is measured on the real (monotonic) clock, as the sockets are real.
IDLE_EXPIRY_SECONDS = 5.0
# Reads off the socket; a page of a few KiB arrives in one.
_RECEIVE_BYTES = 65536
# A body may take twice its cap on the wire, and this much more, before its read
# is cut short: chunked framing costs an honest server a few bytes a chunk, but a
# 4 KiB chunk-size line before each byte would let an agent send 4,000 times the
# cap (and have it parsed) until the read's deadline.
WIRE_FACTOR = 2
WIRE_ALLOWANCE_BYTES = 1024 * 1024
# ... and each chunk counts this much more than its bytes, for the parsing it costs
# (a few microseconds): at most ~500,000 chunks in a body at the default cap.
CHUNK_WIRE_BYTES = 64
_DEFAULT_PORTS = {b"http": 80, b"https": 443}
_NEVER = float("inf")


class AgentTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive over anyio streams, one connection per request in flight.

    ``ssl_context`` verifies servers for ``https`` URLs (SNI and the hostname are
    checked against the URL's host). A connection is reused only after a complete
    exchange its parser says may continue; one that broke, was cut short, or said
    ``Connection: close`` is closed. :meth:`aclose` closes the idle connections; a
    connection in use is closed when its response is.
    """

    def __init__(
        self, *, ssl_context: ssl.SSLContext, idle_expiry_seconds: float = IDLE_EXPIRY_SECONDS
    ) -> None:
        self._ssl_context = ssl_context
        self._idle_expiry_seconds = idle_expiry_seconds
        self._idle: dict[Origin, list[_Connection]] = {}
        self._known_heads = KnownHeads()
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
        # Checked before a connection is taken: a request that cannot be sent uses none.
        writer = RequestWriter(
            request.method.encode("ascii"),
            url.raw_path,
            request.headers.raw,
            known_heads=self._known_heads,
        )
        deadline, connect_deadline = _deadlines(request.extensions.get("timeout"))
        connection = await self._idle_connection(origin)
        if connection is None:
            connection = await _Connection.open(
                origin, self._ssl_context, min(deadline, connect_deadline)
            )
        try:
            head = await connection.exchange(request, writer, deadline)
        except BaseException:
            await connection.close()
            raise
        body = ResponseBody(self, connection, deadline)
        return httpx.Response(
            head.status,
            headers=head.headers,
            stream=body,
            extensions={
                "http_version": head.http_version,
                "reason_phrase": head.reason,
                BODY_EXTENSION: body,
            },
        )

    async def aclose(self) -> None:
        self._closed = True
        self._known_heads.clear()  # they hold the credentials sent
        idle, self._idle = self._idle, {}
        for stack in idle.values():
            for connection in stack:
                await connection.close()

    async def _idle_connection(self, origin: Origin) -> _Connection | None:
        stack = self._idle.get(origin)
        if not stack:
            return None
        now = time.monotonic()
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
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.origin, []).append(connection)
        return True


class AgentClient(httpx.AsyncClient):
    """An httpx client on an :class:`AgentTransport`: each exchange is bounded as a whole.

    Callers that bound an exchange themselves (with trace hooks, as httpcore's
    pool wait must be told from the read) can skip that on this client.

    A follower's read is a few tens of microseconds of HTTP, and httpx's client
    layer (building the request, the auth and redirect loops) cost more than
    that. So :meth:`build_json_request` and :meth:`send` take shorter paths that
    give the same request and response wherever nothing needs the long ones:
    client headers, cookies, auth and event hooks apply as on any client.
    """

    def __init__(self, transport: AgentTransport, **kwargs: Any) -> None:
        super().__init__(transport=transport, **kwargs)
        # httpx extracts cookies from every response through http.cookiejar, about
        # a tenth of a small read; agents rarely set any, so skip it when none is set.
        self._cookies = _CookiesWhenSet(self._cookies)
        # By the identity of the request's headers (each a dict kept by its caller):
        # followers that send headers of their own share the client with those that don't.
        self._merged: dict[int, tuple[object, list[tuple[bytes, bytes]], _Merged]] = {}

    def build_json_request(
        self,
        method: str,
        url: httpx.URL,
        json_body: Any,
        *,
        headers: dict[str, str],
        timeout: httpx.Timeout,
    ) -> httpx.Request:
        """``build_request(method, url, json=json_body, headers=..., timeout=...)``, cheaper.

        The same request, field for field and in the same order: the client's
        headers merged with ``headers``, then ``Host`` in front and the body's
        ``Content-Length`` and ``Content-Type`` behind, unless already there. Where
        the client holds cookies or params, or the URL is relative, httpx builds it.
        """
        if self.cookies or self.params or url.is_relative_url:
            return self.build_request(method, url, json=json_body, headers=headers, timeout=timeout)
        merged = self._merged_headers(headers)
        if merged.content_length:  # a client-wide Content-Length: httpx's to honour
            return self.build_request(method, url, json=json_body, headers=headers, timeout=timeout)
        body = _JSON.encode(json_body).encode("utf-8")
        request = httpx.Request(
            method,
            url,
            headers=merged.for_body(url.netloc, len(body)),
            stream=httpx.ByteStream(body),
            extensions={"timeout": timeout.as_dict()},
        )
        request.read()  # as for json=: the body is there to read again
        return request

    def _merged_headers(self, headers: dict[str, str]) -> _Merged:
        # Merged as httpx merges them (the request's replace the client's, at the
        # end), once for as long as the client's headers stay the same.
        current = self.headers.raw
        cached = self._merged.get(id(headers))
        if cached is not None and cached[0] is headers and cached[1] == current:
            return cached[2]
        merged_headers = httpx.Headers(self.headers)
        merged_headers.update(headers)
        merged = _Merged(
            merged_headers.raw,
            host="host" in merged_headers,
            content_length="content-length" in merged_headers
            or "transfer-encoding" in merged_headers,
            content_type="content-type" in merged_headers,
        )
        if len(self._merged) >= _BUILT_HEADERS_MAX:
            self._merged.clear()
        self._merged[id(headers)] = (headers, current, merged)  # holds it: its id stays its
        return merged

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """httpx's ``send``; straight to the transport when no auth, hook or redirect applies.

        httpx's auth and redirect loops (an async generator and two coroutines a
        request) do nothing then; what they would set on the response is set here.
        """
        if (
            auth is not httpx.USE_CLIENT_DEFAULT
            or self._auth is not None
            or (
                self.follow_redirects
                if follow_redirects is httpx.USE_CLIENT_DEFAULT
                else follow_redirects
            )
            or self._event_hooks["request"]
            or self._event_hooks["response"]
            or self.is_closed
            or request.url.userinfo  # httpx turns it into basic auth
        ):
            return await super().send(
                request, stream=stream, auth=auth, follow_redirects=follow_redirects
            )
        self._state = type(self._state).OPENED  # as httpx's send: no `async with` after
        self._set_timeout(request)
        response = await self._send_single_request(request)
        try:
            response.history = []
            if response.has_redirect_location:
                response.next_request = self._build_redirect_request(request, response)
            if not stream:
                await response.aread()
        except BaseException:
            await response.aclose()
            raise
        return response


@attrs.define
class _Merged:
    """A client's headers merged with a request's, and which of the body's are set."""

    fields: list[tuple[bytes, bytes]]
    host: bool
    content_length: bool
    content_type: bool
    # Whole field lists by (host, body length): a follower's bodies come in a few
    # lengths, and copying an httpx.Headers skips checking every field again.
    _built: dict[tuple[bytes, int], httpx.Headers] = attrs.field(factory=dict)

    def for_body(self, netloc: bytes, length: int) -> httpx.Headers:
        """A request's fields for a JSON body of ``length`` bytes, as httpx orders them."""
        built = self._built.get((netloc, length))
        if built is None:
            fields = [(b"Host", netloc), *self.fields] if not self.host else [*self.fields]
            fields.append((b"Content-Length", str(length).encode("ascii")))
            if not self.content_type:
                fields.append((b"Content-Type", b"application/json"))
            if len(self._built) >= _BUILT_HEADERS_MAX:
                self._built.clear()
            built = self._built[netloc, length] = httpx.Headers(fields)
        return built


_BUILT_HEADERS_MAX = 64


# The bytes httpx's json= sends (its encoder's options), from one encoder reused.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


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
    whole = _NEVER if read is None else now + max(connect or 0.0, write or 0.0, read)
    return whole, (_NEVER if connect is None else now + connect)


class _Connection:
    """One HTTP/1.1 connection and its exchange's parser; used by one request at a time."""

    __slots__ = ("idle_since", "origin", "parser", "poller", "stream")

    def __init__(self, origin: Origin, stream: anyio.abc.ByteStream) -> None:
        self.origin = origin
        self.stream = stream
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        # Registered once: asking whether an idle connection is readable is one poll.
        self.poller = None if raw is None else _Poller(raw.fileno())
        self.parser = ResponseParser()
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
        return self.poller is None or not self.poller.readable()

    async def exchange(
        self, request: httpx.Request, writer: RequestWriter, deadline: float
    ) -> ResponseHead:
        """Send the request and read the response's head; the body follows in ``next_body``."""
        parser = self.parser = ResponseParser(
            head_request=writer.method == b"HEAD", request_close=writer.close
        )
        try:
            content: bytes | None = request.content
        except httpx.RequestNotRead:
            content = None
        stream = self.stream
        sending = True
        with anyio.CancelScope(deadline=deadline) as scope:
            try:
                if content is not None:
                    # One send, so one syscall for a small request.
                    await stream.send(writer.whole(content))
                else:
                    await stream.send(writer.head)
                    async for chunk in request.stream:  # type: ignore[union-attr]
                        data = writer.piece(chunk)
                        if data:
                            await stream.send(data)
                    data = writer.end()
                    if data:
                        await stream.send(data)
                sending = False
                while (head := parser.next_head()) is None:
                    try:
                        parser.feed(await stream.receive(_RECEIVE_BYTES))
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
            with anyio.CancelScope(deadline=deadline):
                return await self.stream.receive(_RECEIVE_BYTES)
        except anyio.EndOfStream:
            return b""
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
        raise httpx.ReadTimeout("the response's body did not arrive in time")

    async def close(self) -> None:
        # Forcefully: a TLS goodbye to a server that stopped answering could hang.
        await anyio.aclose_forcefully(self.stream)


class _Poller:
    """Whether a socket has something to read (data, EOF or an error), without reading it."""

    __slots__ = ("_fileno", "_poll")

    def __init__(self, fileno: int) -> None:
        self._fileno = fileno
        make_poll = getattr(select, "poll", None)  # no poll() on Windows
        self._poll = None if make_poll is None else make_poll()
        if self._poll is not None:
            self._poll.register(fileno, select.POLLIN)

    def readable(self) -> bool:
        if self._poll is None:  # select() is fine for one socket
            return bool(select.select([self._fileno], [], [], 0)[0])
        return bool(self._poll.poll(0))


# The key of a response's extensions under which this transport hands out its
# body (a ResponseBody), for callers that read it whole, without httpx's layers.
BODY_EXTENSION = "follower.body"


def wire_bytes_allowed(limit: int) -> int:
    """The most bytes a body capped at ``limit`` may take on the wire, framing included."""
    return WIRE_FACTOR * limit + WIRE_ALLOWANCE_BYTES


class ResponseBody(httpx.AsyncByteStream):
    """The response body, read straight off the connection.

    A plain async iterator (not an async generator): a body left half-read is
    closed by :meth:`aclose`, with no generator for the garbage collector to
    finalise (which trio reports). At the body's end the connection goes back to
    its origin's idle stack if it may be reused; otherwise, and whenever the body
    is closed before its end, it is closed. :meth:`read_within` reads it whole.
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

    async def _finish(self, connection: _Connection) -> None:
        self._connection = None
        if not (connection.parser.reusable and self._transport.park(connection)):
            await connection.close()

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
