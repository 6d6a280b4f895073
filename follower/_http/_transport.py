"""The library's own HTTP/1.1 transport for agent requests, under httpx's client.

httpx's default transport (httpcore) spends most of a small read in its pool and
stream machinery. A follower needs far less: it has at most one request in flight,
so each request takes a connection of its own, from a per-origin stack of idle
keep-alive connections or newly opened, and never waits for another's. The
exchange is framed and parsed by the library's own strict HTTP/1.1 codec
(:mod:`follower._http._request`, :mod:`follower._http._response`; h11 cost
more than the socket work) and bounded as a
whole (connect, send, headers and body) by the request's timeout. Failures are
httpx's own exception types, so code written for httpx behaves the same on
either transport. One connection is :mod:`follower._http._connection`, its
response's body :mod:`follower._http._body`.

Deliberately absent: proxies (the client falls back to httpx's transport when the
environment names one), HTTP/2, decoding (the caller reads the bytes it was sent),
redirects and trace hooks. A request is never retried: it may have reached the
server, and an A2A ``message/send`` must never be sent twice.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, final

import anyio
import attrs
import httpx

from ._body import BODY_EXTENSION, ResponseBody
from ._connection import Connection
from ._request import KnownHeads, RequestWriter

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterable

    from ._connection import Origin
    from ._head import ResponseHead

# An idle connection is not reused after this long: servers close idle connections
# after a few seconds (hypercorn and uvicorn 5 s, gunicorn 2 s), and a request sent
# into one the server is closing fails. httpx's own default is the same 5 s; a
# server that closes sooner is caught by the readability check before reuse.
# Idle time is measured on the real (monotonic) clock, as the sockets are real.
IDLE_EXPIRY_SECONDS = 5.0
_DEFAULT_PORTS = {b"http": 80, b"https": 443}
_NEVER = float("inf")


@final
@attrs.define(eq=False, kw_only=True)
class AgentTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive over anyio streams, one connection per request in flight.

    ``ssl_context`` verifies servers for ``https`` URLs (SNI and the hostname are
    checked against the URL's host). A connection is reused only after a complete
    exchange its parser says may continue; one that broke, was cut short, or said
    ``Connection: close`` is closed. :meth:`aclose` closes the idle connections; a
    connection in use is closed when its response is.
    """

    _ssl_context: ssl.SSLContext
    _idle_expiry_seconds: float = IDLE_EXPIRY_SECONDS
    # Per origin, a stack of idle connections: the newest on top.
    _idle: dict[Origin, list[Connection]] = attrs.field(factory=dict, init=False)
    _known_heads: KnownHeads = attrs.field(factory=KnownHeads, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        deadline, connect_deadline = _deadlines(request.extensions.get("timeout"))
        content: bytes | AsyncIterable[bytes]
        try:
            content = request.content
        except httpx.RequestNotRead:
            content = request.stream  # type: ignore[assignment]
        head, body = await self.send_bytes(
            request.url,
            request.method.encode("ascii"),
            request.headers.raw,
            content,
            deadline=deadline,
            connect_deadline=connect_deadline,
        )
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

    async def send_bytes(
        self,
        url: httpx.URL,
        method: bytes,
        fields: list[tuple[bytes, bytes]],
        content: bytes | AsyncIterable[bytes],
        *,
        deadline: float,
        connect_deadline: float = _NEVER,
    ) -> tuple[ResponseHead, ResponseBody]:
        """One exchange, without httpx's models: the response's head, and its body to read.

        ``fields`` are the request's, in order, ``Host`` and framing included.
        The whole exchange is bounded by ``deadline``, the connect also by
        ``connect_deadline``; failures are httpx's exception types.
        """
        scheme = url.raw_scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        origin = (scheme, url.raw_host, url.port or _DEFAULT_PORTS[scheme])
        # Checked before a connection is taken: a request that cannot be sent uses none.
        writer = RequestWriter(method, url.raw_path, fields, known_heads=self._known_heads)
        connection = await self._idle_connection(origin)
        if connection is None:
            connection = await Connection.open(
                origin, self._ssl_context, min(deadline, connect_deadline)
            )
        try:
            head = await connection.exchange(content, writer, deadline)
        except BaseException:
            await connection.close()
            raise
        return head, ResponseBody(self.park, connection, deadline)

    async def aclose(self) -> None:
        self._closed = True
        self._known_heads.clear()  # they hold the credentials sent
        idle, self._idle = self._idle, {}
        for stack in idle.values():
            for connection in stack:
                await connection.close()

    async def _idle_connection(self, origin: Origin) -> Connection | None:
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

    def park(self, connection: Connection) -> bool:
        """Keep a connection whose exchange completed for the next request to its origin.

        False when the transport is closed: the caller closes the connection.
        """
        if self._closed:
            return False
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.origin, []).append(connection)
        return True


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
