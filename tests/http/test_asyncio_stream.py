"""The asyncio stream of the library's plain TCP connections, against loopback peers.

docs/design.md ("HTTP: one bounded exchange"): on asyncio a connection keeps reading its
socket, so an exchange adds and removes no reader; it stops reading once a limit is
buffered unread and starts again below it, so a server that sends without end holds a
bounded amount; its ends and failures are anyio's, as a ``SocketStream``'s. On trio a
connection keeps anyio's stream (the last test). Everything else a connection does is
tested on both backends in tests/http/test_transport.py.

Real sockets, so the bounds are generous.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import struct
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
import sniffio

from follower._backend import running_backend
from follower._http._agent_client import AgentClient
from follower._http._asyncio_stream import BUFFER_LIMIT, KeptReadingStream, runs_on
from follower._http._clients import _shared_ssl_context
from follower._http._connection import Connection
from follower._http._exchange import read_page
from follower._http._transport import AgentTransport

from .test_transport import serving

pytestmark = pytest.mark.anyio

# The stream is asyncio's; a test of it on trio would test nothing.
on_asyncio = pytest.mark.parametrize("anyio_backend", ["asyncio"])

# The most asyncio's selector transport reads off a socket at once.
_ONE_READ = 256 * 1024


@asynccontextmanager
async def peer_port(
    behave: Callable[[anyio.abc.SocketStream], Awaitable[None]],
) -> AsyncIterator[int]:
    """The port of a loopback peer that behaves as ``behave`` says on each connection."""

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await behave(stream)

    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(listener.serve, serve)
        try:
            yield listener.extra(anyio.abc.SocketAttribute.local_port)
        finally:
            tg.cancel_scope.cancel()


@asynccontextmanager
async def peer(
    behave: Callable[[anyio.abc.SocketStream], Awaitable[None]],
) -> AsyncIterator[KeptReadingStream]:
    """A stream connected to a loopback peer that behaves as ``behave`` says."""
    async with peer_port(behave) as port:
        stream = await KeptReadingStream.connect(
            asyncio.get_running_loop(), running_backend(), "127.0.0.1", port
        )
        try:
            yield stream
        finally:
            await stream.aclose()


@on_asyncio
async def test_an_exchange_adds_and_removes_no_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    # anyio's stream pauses reading between receives: the loop registers the socket
    # with its selector for each receive and unregisters it after (2 a read).
    selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    changes: list[int] = []  # the descriptors whose registration changed, in turn
    for name in ("register", "modify", "unregister"):
        method = getattr(selector, name)

        def counted(fileobj: Any, *args: Any, _method: Any = method) -> Any:
            changes.append(fileobj if isinstance(fileobj, int) else fileobj.fileno())
            return _method(fileobj, *args)

        monkeypatch.setattr(selector, name, counted)
    transport = AgentTransport(ssl_context=_shared_ssl_context())
    with anyio.fail_after(10):
        async with serving() as (url, server), AgentClient(transport) as client:
            await read_page(client, url, "t1", 0)  # connects: registers the socket
            [[connection]] = transport._idle.values()
            client_fd = connection.stream.extra(anyio.abc.SocketAttribute.raw_socket).fileno()
            made = len(changes)
            for _ in range(20):
                await read_page(client, url, "t1", 0)
            during = changes[made:]  # not the close's
            assert server.connections == 1
    assert client_fd in changes[:made]
    # The server's own socket, on anyio's stream, changes at every request.
    assert [fd for fd in during if fd == client_fd] == []
    assert len(during) >= 20


@on_asyncio
async def test_a_server_that_sends_without_end_is_read_no_further_than_the_limit() -> None:
    sent = bytes(range(256)) * (32 * 4096)  # 32 MiB: more than any socket's buffers hold
    done = anyio.Event()

    async def flood(stream: anyio.abc.SocketStream) -> None:
        await stream.send(sent)
        done.set()
        await anyio.sleep_forever()

    with anyio.fail_after(30):
        async with peer(flood) as stream:
            while not stream._reading_paused:  # nobody receives: the buffer fills
                await anyio.lowlevel.checkpoint()
            assert BUFFER_LIMIT <= stream._buffered < BUFFER_LIMIT + _ONE_READ
            assert not done.is_set()  # the rest waits in the kernel, then at the server
            digest, size = hashlib.sha256(), 0
            while size < len(sent):  # reading resumes as the buffer is taken
                chunk = await stream.receive(65536)
                assert len(chunk) <= 65536
                digest.update(chunk)
                size += len(chunk)
                assert stream._buffered < BUFFER_LIMIT + _ONE_READ
            await done.wait()
    assert (size, digest.digest()) == (len(sent), hashlib.sha256(sent).digest())


@on_asyncio
async def test_the_servers_eof_ends_the_stream_after_what_it_sent() -> None:
    async def say_and_close(stream: anyio.abc.SocketStream) -> None:
        await stream.send(b"last words")

    with anyio.fail_after(10):
        async with peer(say_and_close) as stream:
            received = b""
            with pytest.raises(anyio.EndOfStream):
                while True:
                    received += await stream.receive()
            assert stream.readable()  # an idle connection at its EOF is never reused
            with pytest.raises(anyio.EndOfStream):
                await stream.receive()
    assert received == b"last words"


@on_asyncio
async def test_a_reset_breaks_the_stream_for_receive_and_send() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        port = listener.getsockname()[1]
        with anyio.fail_after(10):
            stream = await KeptReadingStream.connect(
                asyncio.get_running_loop(), running_backend(), "127.0.0.1", port
            )
            try:
                await anyio.wait_readable(listener)
                accepted, _ = listener.accept()
                # Closed without lingering: a reset (RST), not an end (FIN).
                accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                accepted.close()
                with pytest.raises(anyio.BrokenResourceError) as caught:
                    await stream.receive()
                assert isinstance(caught.value.__cause__, ConnectionResetError)
                assert stream.readable()  # an idle connection that was reset is never reused
                with pytest.raises(anyio.BrokenResourceError):
                    await stream.send(b"GET / HTTP/1.1\r\n\r\n")
            finally:
                await stream.aclose()


@on_asyncio
async def test_a_stream_closed_here_refuses_both_ways() -> None:
    with anyio.fail_after(10):
        async with peer(lambda stream: anyio.sleep_forever()) as stream:
            await stream.aclose()
            with pytest.raises(anyio.ClosedResourceError):
                await stream.receive()
            with pytest.raises(anyio.ClosedResourceError):
                await stream.send(b"x")


@on_asyncio
async def test_a_cancelled_receive_loses_nothing_that_comes_after() -> None:
    go = anyio.Event()

    async def answer_when_told(stream: anyio.abc.SocketStream) -> None:
        await go.wait()
        await stream.send(b"answer")
        await anyio.sleep_forever()

    with anyio.fail_after(10):
        async with peer(answer_when_told) as stream:
            with anyio.CancelScope() as scope:
                scope.cancel()
                await stream.receive()
            assert scope.cancelled_caught
            with anyio.CancelScope() as scope:
                scope.cancel()
                await stream.send(b"request")  # a pending cancel: nothing is sent
            assert scope.cancelled_caught
            go.set()
            assert await stream.receive() == b"answer"


async def test_a_plain_connection_keeps_reading_on_asyncio_only() -> None:
    async def idle(stream: anyio.abc.SocketStream) -> None:
        await anyio.sleep_forever()

    with anyio.fail_after(10):
        async with peer_port(idle) as port:
            connection = await Connection.open(
                (b"http", b"127.0.0.1", port), _shared_ssl_context(), anyio.current_time() + 5
            )
            try:
                kept = isinstance(connection.stream, KeptReadingStream)
            finally:
                await connection.close()
    assert kept == (sniffio.current_async_library() == "asyncio")


def test_only_asyncios_own_loops_get_the_stream() -> None:
    # Another loop's transports and connect are its own (uvloop's connect takes no happy
    # eyeballs): its connections keep anyio's stream.
    class AnotherLoop(asyncio.AbstractEventLoop):
        pass

    loop = asyncio.new_event_loop()
    try:
        assert runs_on(loop)
    finally:
        loop.close()
    assert not runs_on(AnotherLoop())


@on_asyncio
async def test_a_send_returns_once_the_kernel_has_every_byte() -> None:
    # What writing a request after the stream's send relies on: the stream keeps none of
    # the bytes once its send returned. A peer that reads nothing until told: the send
    # waits, and when it returns its transport holds nothing.
    sent = bytes(range(256)) * (32 * 4096)  # 32 MiB: more than any socket's buffers hold
    read_now, all_read = anyio.Event(), anyio.Event()
    received = bytearray()

    async def read_when_told(stream: anyio.abc.SocketStream) -> None:
        await read_now.wait()
        while len(received) < len(sent):
            received.extend(await stream.receive())
        all_read.set()

    with anyio.fail_after(30):
        async with peer(read_when_told) as stream, anyio.create_task_group() as tg:
            done = anyio.Event()

            async def send() -> None:
                # Told to pause writing at the first byte left unsent, resumed when none is.
                assert stream._transport is not None
                assert stream._transport.get_write_buffer_limits() == (0, 0)
                await stream.send(sent)
                assert stream._transport is not None
                assert stream._transport.get_write_buffer_size() == 0
                done.set()

            tg.start_soon(send)
            while not stream._writing_paused:
                await anyio.lowlevel.checkpoint()
            assert not done.is_set()
            read_now.set()
            await done.wait()
            await all_read.wait()
    assert received == sent


@on_asyncio
async def test_a_stream_closed_with_bytes_unsent_lets_its_socket_go_at_once() -> None:
    # A server that stopped reading must not keep the connection's socket open: the
    # unsent bytes are dropped (an abort), not waited for.
    async def read_nothing(stream: anyio.abc.SocketStream) -> None:
        await anyio.sleep_forever()

    with anyio.fail_after(30):
        async with peer(read_nothing) as stream:
            with anyio.CancelScope() as scope:

                async def cancel_once_paused() -> None:
                    while not stream._writing_paused:
                        await anyio.lowlevel.checkpoint()
                    scope.cancel()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_once_paused)
                    await stream.send(bytes(32 * 1024 * 1024))
            assert scope.cancelled_caught
            assert stream._transport is not None
            assert stream._transport.get_write_buffer_size() > 0  # the server took only some
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            await stream.aclose()
            # Closed in the loop's next turn (an abort's call_soon), not at a drain.
            await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()
            assert raw.fileno() == -1


@on_asyncio
async def test_a_second_receive_at_once_is_refused_not_left_waiting() -> None:
    async def idle(stream: anyio.abc.SocketStream) -> None:
        await anyio.sleep_forever()

    with anyio.fail_after(10):
        async with peer(idle) as stream, anyio.create_task_group() as tg:
            tg.start_soon(stream.receive)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(anyio.BusyResourceError):
                await stream.receive()
            tg.cancel_scope.cancel()


@on_asyncio
async def test_bytes_come_in_already_do_not_outrun_a_pending_cancel() -> None:
    async def say(stream: anyio.abc.SocketStream) -> None:
        await stream.send(b"come in")
        await anyio.sleep_forever()

    with anyio.fail_after(10):
        async with peer(say) as stream:
            while not stream.readable():
                await anyio.lowlevel.checkpoint()
            with anyio.CancelScope() as scope:
                scope.cancel()
                await stream.receive()
            assert scope.cancelled_caught
            assert await stream.receive() == b"come in"


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop runs on POSIX only")
def test_another_asyncio_loops_connections_keep_anyios_stream() -> None:
    # uvloop's connect takes no happy eyeballs and its transports read their sockets
    # themselves: its connections keep anyio's stream and are read through it, an
    # address's and a name's alike (asking asyncio's connect for happy eyeballs failed
    # every read there with a TypeError).
    kinds: set[tuple[str, bool]] = set()

    async def read_a_few() -> None:
        transport = AgentTransport(ssl_context=_shared_ssl_context())
        with anyio.fail_after(10):
            async with serving() as (url, _), AgentClient(transport) as client:
                for host in ("127.0.0.1", "localhost"):
                    for _ in range(3):
                        page = await read_page(client, url.replace("127.0.0.1", host), "t1", 0)
                        assert page.next == 1
                kinds.update(
                    (type(connection.stream).__name__, connection.reads_socket)
                    for stack in transport._idle.values()
                    for connection in stack
                )

    anyio.run(read_a_few, backend="asyncio", backend_options={"use_uvloop": True})
    assert kinds == {("SocketStream", False)}
