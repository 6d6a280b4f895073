"""Reading HTTP/1.1 requests off a raw stream, for the tests' scripted loopback servers."""

from __future__ import annotations

import anyio.abc


async def read_request(stream: anyio.abc.ByteStream, buffer: bytes) -> tuple[bytes, bytes, bytes]:
    """The next request's head and body (Content-Length framed), and the bytes after it.

    Raises ``anyio.EndOfStream`` when the client closes the connection first.
    """
    while b"\r\n\r\n" not in buffer:
        buffer += await stream.receive()
    head, buffer = buffer.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.lower().split(b"\r\n")[1:]:
        if line.startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    received = bytearray(buffer)  # not bytes: a body of megabytes comes in many pieces
    while len(received) < length:
        received += await stream.receive()
    return head, bytes(received[:length]), bytes(received[length:])
