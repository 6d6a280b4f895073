"""A loopback TCP forwarder that a test can cut: streams dropped mid-task, on demand.

:class:`CuttingProxy` relays every connection it accepts on 127.0.0.1 to a target host and
port, with plain threads and blocking sockets, so it works whatever event loop the test runs
(asyncio or trio) and whatever runs the target (another process, another thread). A test
drops every open connection at once with :meth:`CuttingProxy.cut`, or refuses new ones with
:meth:`CuttingProxy.refuse`, and counts what came through.

Who owns what: one accept thread, two pump threads per connection (one each way). A pump
that sees its side end shuts both sockets down, which ends its twin; the last pump of a
connection closes its sockets. :meth:`cut` only shuts sockets down (that wakes any thread
blocked on them, and the peers see the connection end) and waits, bounded, for the pumps to
finish, so no socket is closed under a thread still using it.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from types import TracebackType
from typing import Self

# Every join and wait in here is bounded by this.
JOIN_SECONDS = 5.0
_CHUNK_BYTES = 65536


class _Connection:
    """One relayed connection: the client's socket, the target's, and their two pumps."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.pumps = [
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True),
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True),
        ]
        self._lock = threading.Lock()
        self._running = 2
        self.done = threading.Event()

    def start(self) -> None:
        for pump in self.pumps:
            pump.start()

    def shut_down(self) -> None:
        """End the connection on both sides now: each peer sees it closed."""
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(_CHUNK_BYTES):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            self.shut_down()
            with self._lock:
                self._running -= 1
                last = self._running == 0
            if last:
                self.client.close()
                self.upstream.close()
                self.done.set()


class CuttingProxy:
    """Relays 127.0.0.1:<port> to ``target_host:target_port`` until :meth:`close`.

    Started on construction; also a context manager that closes it. Thread-safe: any thread
    (a test's event loop, a worker thread) may call any method.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # Held from accept to relaying, so a cut never misses a connection being set up.
        self._setting_up = threading.Lock()
        self._open: list[_Connection] = []
        self._accepted = 0
        self._refused = 0
        self._refusing = False
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self._wake_reader, self._wake_writer = socket.socketpair()
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        """The proxy's base URL, ``http://127.0.0.1:<port>`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        """Connections accepted so far, refused ones included."""
        with self._lock:
            return self._accepted

    @property
    def refused(self) -> int:
        """Connections closed on accept while refusing."""
        with self._lock:
            return self._refused

    @property
    def open_connections(self) -> int:
        """Connections being relayed now."""
        with self._lock:
            self._open = [c for c in self._open if not c.done.is_set()]
            return len(self._open)

    def refuse(self, refusing: bool = True) -> None:
        """Close every new connection as soon as it is accepted (or, with False, relay again)."""
        with self._lock:
            self._refusing = refusing

    def cut(self) -> int:
        """Close every open connection, on both sides at once; return how many were open.

        Returns once their pumps have ended (bounded): by then each peer has seen its
        connection closed. New connections are relayed as before (see :meth:`refuse`).
        """
        with self._setting_up, self._lock:
            cutting = [c for c in self._open if not c.done.is_set()]
        for connection in cutting:
            connection.shut_down()
        deadline = time.monotonic() + JOIN_SECONDS
        for connection in cutting:
            connection.done.wait(max(0.0, deadline - time.monotonic()))
        return len(cutting)

    def wait_for_connections(self, count: int, timeout_seconds: float = JOIN_SECONDS) -> None:
        """Block until ``count`` connections in all were accepted; TimeoutError if not in time.

        From async code, call it in a worker thread (``anyio.to_thread.run_sync``).
        """
        with self._changed:
            if not self._changed.wait_for(lambda: self._accepted >= count, timeout_seconds):
                raise TimeoutError(
                    f"{self._accepted} connections accepted, not {count}, "
                    f"within {timeout_seconds} s"
                )

    def close(self) -> None:
        """Stop accepting, cut every open connection and release the listener (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"x")
        self._acceptor.join(JOIN_SECONDS)
        self.cut()
        self._listener.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_reader in ready:
                    return
                try:
                    client, _ = self._listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    return
                with self._setting_up:
                    self._relay(client)

    def _relay(self, client: socket.socket) -> None:
        client.setblocking(True)
        with self._changed:
            self._accepted += 1
            refusing = self._refusing or self._closed
            if refusing:
                self._refused += 1
            self._changed.notify_all()
        if refusing:
            client.close()
            return
        try:
            upstream = socket.create_connection(self._target, timeout=JOIN_SECONDS)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = _Connection(client, upstream)
        with self._lock:
            self._open.append(connection)
        connection.start()
