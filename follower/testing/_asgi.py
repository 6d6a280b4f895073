"""ASGI plumbing for the reference agent: lifespan, request bodies, plain responses.

Nothing here knows what the agent serves; it is what any small ASGI app needs
without a framework.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Coroutine[Any, Any, None]]

JSON = b"application/json"
TEXT = b"text/plain; charset=utf-8"
# Requests to the agent are small; anything larger is refused unread.
MAX_REQUEST_BYTES = 1024 * 1024


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer the lifespan protocol: nothing to start, nothing to stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Receive) -> bytes | None:
    """The request's body, or None when it is over :data:`MAX_REQUEST_BYTES`."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(parts)
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            return None
        parts.append(chunk)
        if not message.get("more_body"):
            return b"".join(parts)


async def until_disconnected(receive: Receive) -> None:
    """Wait for the client to go away: how an ASGI app holds a request without answering."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def respond(
    send: Send, status: int, body: bytes, content_type: bytes, *, allow: bytes | None = None
) -> None:
    """Send a whole response: ``status``, ``body`` and its length and type."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if allow is not None:
        headers.append((b"allow", allow))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def base_url(scope: Scope) -> str:
    """The URL the request was sent to, up to the app's root: ``http://host:port/``."""
    host = None
    for name, value in scope.get("headers", []):
        if name == b"host":
            host = value.decode("latin-1")
            break
    if not host:
        server = scope.get("server")
        if server is None:
            host = "localhost"
        else:
            server_host, port = server
            host = f"[{server_host}]" if ":" in server_host else server_host
            if port is not None:
                host = f"{host}:{port}"
    return f"{scope.get('scheme', 'http')}://{host}{scope.get('root_path', '')}/"
