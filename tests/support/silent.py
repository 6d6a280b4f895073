"""Loopback S3 endpoints that stop answering: one silent from the start, one at its first write.

The socket listens and nothing ever accepts: the kernel completes each handshake
(up to the backlog), the client sends its request, and no byte comes back, so a
client waits for its read timeout, as on an endpoint that stopped answering.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import attrs


@contextlib.contextmanager
def silent_endpoint() -> Iterator[str]:
    """A URL whose server takes TCP connections and never answers, for the block."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        host, port = sock.getsockname()
        yield f"http://{host}:{port}"


EMPTY_LISTING = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Name>bucket</Name><Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys>"
    b"<IsTruncated>false</IsTruncated></ListBucketResult>"
)


@attrs.define(eq=False)
class ListingOnlyS3:
    """An S3 endpoint that lists every bucket as empty and never answers a write."""

    url: str
    put_seen: threading.Event


@contextlib.contextmanager
def s3_that_never_stores() -> Iterator[ListingOnlyS3]:
    """An endpoint whose GETs answer an empty listing and whose PUTs hang, for the block.

    A bucket probe passes; then the first write of a step hangs, as on an S3
    endpoint that stops answering in the middle of a run.
    """
    stopped = threading.Event()
    put_seen = threading.Event()

    def serve(connection: socket.socket) -> None:
        with connection:
            pending = b""
            while not stopped.is_set():
                while b"\r\n\r\n" not in pending:
                    data = connection.recv(65536)
                    if not data:
                        return
                    pending += data
                head, _, pending = pending.partition(b"\r\n\r\n")
                if not head.startswith(b"GET "):
                    put_seen.set()
                    stopped.wait()  # never answered
                    return
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(EMPTY_LISTING), EMPTY_LISTING)
                )

    def accept(sock: socket.socket) -> None:
        while True:
            try:
                connection, _ = sock.accept()
            except OSError:  # closed: the block ended
                return
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        host, port = sock.getsockname()
        threading.Thread(target=accept, args=(sock,), daemon=True).start()
        try:
            yield ListingOnlyS3(f"http://{host}:{port}", put_seen)
        finally:
            stopped.set()
            sock.shutdown(socket.SHUT_RDWR)
