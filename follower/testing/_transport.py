"""An in-process httpx transport to an ASGI app that can drop connections.

``httpx.ASGITransport`` always answers; a real agent sometimes closes the
connection instead. :class:`InProcessTransport` asks, before each request,
whether to, and if so fails the request as httpcore does on a closed socket.
``httpx.ASGITransport`` also hands a response over only once the app has
finished it, which a stream never does in time: the transport offers each
request to ``open_stream`` first, which answers the streams itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._asgi import ASGIApp


class InProcessTransport(httpx.AsyncBaseTransport):
    """``httpx.ASGITransport`` to ``app``, closing the connection when ``drops_connection()``.

    ``open_stream(request)`` answers a request whose response is a stream, and
    returns None for any other, which goes to ``app``.
    """

    def __init__(
        self,
        app: ASGIApp,
        drops_connection: Callable[[], bool],
        open_stream: Callable[[httpx.Request], Awaitable[httpx.Response | None]] | None = None,
    ) -> None:
        self._drops_connection = drops_connection
        self._open_stream = open_stream
        self._asgi = httpx.ASGITransport(app=app)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # As httpcore does on a real connection: tells clients the connection is theirs,
        # so their deadlines time the exchange, not a wait for a pooled connection.
        trace = request.extensions.get("trace")
        if trace is not None:
            await trace("http11.send_request_headers.started", {"request": request})
            await trace("http11.send_request_headers.complete", {"return_value": None})
        if self._drops_connection():
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        if self._open_stream is not None:
            streamed = await self._open_stream(request)
            if streamed is not None:
                return streamed
        return await self._asgi.handle_async_request(request)

    async def aclose(self) -> None:
        await self._asgi.aclose()
