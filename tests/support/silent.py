"""A loopback TCP server that takes connections and never answers: a hung S3 endpoint.

The socket listens and nothing ever accepts: the kernel completes each handshake
(up to the backlog), the client sends its request, and no byte comes back, so a
client waits for its read timeout, as on an endpoint that stopped answering.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def silent_endpoint() -> Iterator[str]:
    """A URL whose server takes TCP connections and never answers, for the block."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        host, port = sock.getsockname()
        yield f"http://{host}:{port}"
