"""The HTTP clients followers share: sharded, bounded pools with one SSL context.

A follower leases a client for as long as it runs; nothing here reads or writes
a request (that is :mod:`follower._exchange`).
"""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import anyio.to_thread
import attrs
import httpx

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator

# Each follower has at most one read in flight, so a client leased to at most
# this many followers never makes one of them wait for a connection. Small, because
# httpcore's pool bookkeeping grows with the square of a client's connections:
# benchmarks/many_followers.py (500 followers, agent in a subprocess) measured
# 1.7 ms of CPU a read with 4 per client, 2.0 ms with 16, 3.3 ms with 64.
FOLLOWERS_PER_CLIENT = 4

_ssl_context: ssl.SSLContext | None = None
_ssl_lock = threading.Lock()


def _shared_ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle is most of what a client costs (~30 ms of CPU): once a process.
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            _ssl_context = httpx.create_ssl_context()
        return _ssl_context


@attrs.define(eq=False)
class _Shard:
    client: httpx.AsyncClient
    leases: int = 0


@attrs.define(eq=False)
class ClientPool:
    """Clients shared by followers, sharded so that no pool grows without bound.

    A follower leases a client for as long as it runs. A client serves at most
    ``followers_per_client`` followers and has that many connections, so no
    follower waits on another for a connection; a new client is created when
    every client is full, and closed when its last follower leaves. All clients
    share one SSL context, loaded once per process in a worker thread.
    """

    followers_per_client: int = FOLLOWERS_PER_CLIENT
    _shards: list[_Shard] = attrs.field(factory=list, init=False)
    _creating: anyio.Lock = attrs.field(factory=anyio.Lock, init=False)

    @property
    def client_count(self) -> int:
        return len(self._shards)

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client for one follower, for the duration of the block."""
        shard = await self._acquire()
        try:
            yield shard.client
        finally:
            shard.leases -= 1
            if shard.leases == 0:
                self._shards.remove(shard)
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await shard.client.aclose()

    async def _acquire(self) -> _Shard:
        shard = self._free_shard()
        if shard is None:
            async with self._creating:
                shard = self._free_shard()
                if shard is None:
                    context = _ssl_context
                    if context is None:
                        context = await anyio.to_thread.run_sync(_shared_ssl_context)
                    shard = _Shard(self._new_client(context))
                    self._shards.append(shard)
                # Counted before the lock is released: a shard with no lease is closed.
                shard.leases += 1
                return shard
        shard.leases += 1
        return shard

    def _free_shard(self) -> _Shard | None:
        free = [s for s in self._shards if s.leases < self.followers_per_client]
        return min(free, key=lambda s: s.leases) if free else None

    def _new_client(self, context: ssl.SSLContext) -> httpx.AsyncClient:
        n = self.followers_per_client
        return httpx.AsyncClient(
            verify=context,
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
            follow_redirects=False,
        )


_run_pool: anyio.lowlevel.RunVar[ClientPool] = anyio.lowlevel.RunVar("follower_client_pool")


def client_pool() -> ClientPool:
    """The clients shared by every follower of this event loop."""
    try:
        return _run_pool.get()
    except LookupError:
        pool = ClientPool()
        _run_pool.set(pool)
        return pool


@asynccontextmanager
async def leased_client(client: httpx.AsyncClient | None) -> AsyncIterator[httpx.AsyncClient]:
    """The caller's client if given, else one leased from this loop's shared pool."""
    if client is not None:
        yield client
        return
    async with client_pool().lease() as leased:
        yield leased
