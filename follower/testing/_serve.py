"""Serving the reference agent on a loopback socket, under trio or asyncio.

Hypercorn serves the agent on a private socket; a small TCP front relays each
connection to it. The front is what makes connection faults real: when the
agent's fault says so (``close``, ``gone``), it closes the client's connection
instead of relaying the request, which no ASGI app can do by itself.

Who owns what: :func:`serve_agent` runs in the caller's task group. Cancelling
that group cancels the front at once (closing every client connection) and turns
into hypercorn's graceful shutdown, which then has nothing left to wait for.
Hypercorn runs shielded so that its asyncio worker can finish its own cleanup
instead of being cut short, but only for a bounded time once shutdown starts.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import TYPE_CHECKING, cast

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from .._extras import install_hint

if TYPE_CHECKING:
    from hypercorn.typing import ASGIFramework

    from ._agent import ReferenceAgent

logger = logging.getLogger("follower.testing")

# After shutdown is triggered, hypercorn gets this long before it is cancelled.
_SHUTDOWN_BOUND_SECONDS = 5.0
# Requests still in flight at shutdown (a slow read) get this long to finish.
_GRACEFUL_SECONDS = 1.0
_RELAY_ERRORS = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    OSError,
)


async def serve_agent(
    agent: ReferenceAgent,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``agent`` on ``host:port`` until cancelled; start it with ``await tg.start(...)``.

    Hands back the base URL, ``http://<host>:<port>/`` (the port chosen when
    ``port`` is 0). Runs under trio (``hypercorn.trio``) and asyncio
    (``hypercorn.asyncio``); cancelling the surrounding task group stops it
    within milliseconds, client connections still open or not. Needs hypercorn
    (the ``testing`` extra).
    """
    try:
        import hypercorn  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"serve_agent needs hypercorn: {install_hint('testing')}", name=exc.name
        ) from exc
    upstream = upstream_socket()
    try:
        upstream_port: int = upstream.getsockname()[1]
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
        front_port = listener.extra(anyio.abc.SocketAttribute.local_port)
        shutdown = anyio.Event()
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(_run_hypercorn, agent, upstream, shutdown)
            for each in listener.listeners:
                tg.start_soon(_accept, agent, each, upstream_port)
            task_status.started(f"http://{_url_host(host)}:{front_port}/")
            try:
                await anyio.sleep_forever()
            finally:
                shutdown.set()
    finally:
        upstream.close()


def upstream_socket() -> socket.socket:
    """The private socket hypercorn serves on: listening on loopback, any port.

    With ``TCP_NODELAY``, which hypercorn sets only on sockets it makes itself:
    without it, under asyncio, every answer on a kept-alive connection after the
    first waited about 40 ms for the client's delayed ACK (headers and body are
    two writes).
    """
    upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.bind(("127.0.0.1", 0))
        upstream.listen(128)
        upstream.setblocking(False)
    except BaseException:
        upstream.close()
        raise
    return upstream


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _accept(
    agent: ReferenceAgent, listener: anyio.abc.Listener[anyio.abc.SocketStream], upstream_port: int
) -> None:
    """Take in the listener's connections, each relayed by a task of its own.

    Accepted here rather than by anyio's ``serve``, which would hand the connection
    over only once the loop has set its transport up, looking blocked meanwhile: so
    ``agent.wait_quiet()`` sees a connection waiting in the listening socket's
    backlog, then a relay task that has not run yet, then the connection's socket.
    """
    raw = listener.extra(SocketAttribute.raw_socket)
    unclaimed: set[socket.socket] = set()  # accepted, their relays not started yet
    try:
        with agent.carrying(raw):
            async with anyio.create_task_group() as relays:
                while True:
                    await anyio.wait_readable(raw)
                    try:
                        client, _ = raw.accept()
                    except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                        continue  # gone before it was taken in
                    unclaimed.add(client)
                    relays.start_soon(_relay, agent, upstream_port, client, unclaimed)
    finally:
        for client in unclaimed:  # their relays were cancelled before they began
            client.close()


async def _relay(
    agent: ReferenceAgent, upstream_port: int, client: socket.socket, unclaimed: set[socket.socket]
) -> None:
    """Relay one client connection to hypercorn, unless the agent drops it."""
    unclaimed.discard(client)
    with agent.carrying(client):
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stream = await anyio.abc.SocketStream.from_socket(client)
        except (OSError, ValueError):  # reset before it was taken in: no longer connected
            client.close()
            return
        except BaseException:
            client.close()
            raise
        async with stream:
            await _relay_requests(agent, upstream_port, stream)


async def _relay_requests(
    agent: ReferenceAgent, upstream_port: int, client: anyio.abc.SocketStream
) -> None:
    if agent.drops_connection():
        return
    try:
        upstream = await anyio.connect_tcp("127.0.0.1", upstream_port)
    except OSError:
        return
    async with upstream, anyio.create_task_group() as tg:
        tg.start_soon(_pump, upstream, client, tg.cancel_scope)
        try:
            async for chunk in client:
                # Checked on every chunk, so a keep-alive connection opened while the
                # agent was healthy is closed at its first request after the fault.
                if agent.drops_connection():
                    break
                await upstream.send(chunk)
        except _RELAY_ERRORS:
            pass
        tg.cancel_scope.cancel()


async def _pump(
    source: anyio.abc.SocketStream,
    sink: anyio.abc.SocketStream,
    scope: anyio.CancelScope,
) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except _RELAY_ERRORS:
        pass
    # Hypercorn closed its side (keep-alive timeout, shutdown): close the client's too.
    scope.cancel()


async def _run_hypercorn(agent: ReferenceAgent, sock: socket.socket, shutdown: anyio.Event) -> None:
    from hypercorn.config import Config, Sockets
    from hypercorn.utils import wrap_app

    config = Config()
    config.errorlog = logger
    config.graceful_timeout = _GRACEFUL_SECONDS
    sockets = Sockets(secure_sockets=[], insecure_sockets=[sock], quic_sockets=[])
    app = wrap_app(cast("ASGIFramework", agent), config.wsgi_max_body_size, "asgi")
    with anyio.CancelScope(shield=True) as shielded:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_bound_after, shutdown, shielded)
            if _running_trio():
                from hypercorn.trio.run import worker_serve as trio_serve

                await trio_serve(app, config, sockets=sockets, shutdown_trigger=shutdown.wait)
            else:
                from hypercorn.asyncio.run import worker_serve as asyncio_serve

                await asyncio_serve(app, config, sockets=sockets, shutdown_trigger=shutdown.wait)
            tg.cancel_scope.cancel()


async def _bound_after(shutdown: anyio.Event, scope: anyio.CancelScope) -> None:
    await shutdown.wait()
    scope.deadline = anyio.current_time() + _SHUTDOWN_BOUND_SECONDS


def _running_trio() -> bool:
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True
