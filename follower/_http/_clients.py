"""The HTTP clients followers share, on the library's transport, with one SSL context.

A follower leases a client for as long as it runs; nothing here reads or writes
a request (that is :mod:`follower._http._exchange`, over :mod:`follower._http._agent_client`
and :mod:`follower._http._transport`).
"""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, final
from urllib.request import getproxies

import anyio
import anyio.to_thread
import attrs
import httpx

from .._loop_local import LoopLocal
from .._redact import hide, hiding, secrets_of, unhide
from ._agent_client import AgentClient
from ._transport import AgentTransport

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator
    from contextvars import Token

    from .._options import RequestHeaders
    from .._redact import Secrets

# On the library's transport a request takes a connection of its own (from a stack
# of idle ones per origin, or a new one), so no follower waits on another, and a
# read costs the same however many followers share the client: one client a loop.
# (benchmarks/many_followers.py measures the shapes; docs/design.md has the figures.)
FOLLOWERS_PER_CLIENT: int | None = None
# Where the environment names a proxy, httpx's own transport (httpcore) carries the
# requests. Each follower has at most one read in flight, so a client leased to at
# most this many never makes one of them wait for a connection. Small, because
# httpcore's pool bookkeeping grows with the square of a client's connections
# (500 followers: 1.7 ms of CPU a read with 4 per client, 2.0 with 16, 3.3 with 64).
FOLLOWERS_PER_PROXIED_CLIENT = 4

_ssl_context: ssl.SSLContext | None = None
_ssl_lock = threading.Lock()


def _shared_ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle is most of what a client costs (~30 ms of CPU): once a process.
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            _ssl_context = httpx.create_ssl_context()
        return _ssl_context


def environment_names_a_proxy() -> bool:
    """Whether httpx's ``trust_env`` rules would send requests through a proxy.

    (``HTTP_PROXY``, ``HTTPS_PROXY`` or ``ALL_PROXY``, any case; ``NO_PROXY`` is
    then httpx's to apply, per URL.)
    """
    proxies = getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


@attrs.define(eq=False)
class _Shard:
    client: httpx.AsyncClient
    capacity: int | None
    leases: int = 0

    @property
    def full(self) -> bool:
        return self.capacity is not None and self.leases >= self.capacity


@attrs.define(eq=False)
class ClientPool:
    """Clients shared by followers; bounded shards only where httpx's pool needs them.

    A follower leases a client for as long as it runs, and never waits on another
    for a connection. On the library's transport one client serves every follower
    (``followers_per_client`` None). Where the environment names a proxy, clients
    are httpx's default ones, each serving at most ``FOLLOWERS_PER_PROXIED_CLIENT``
    followers with that many connections; a new client is created when every
    client is full. ``followers_per_client`` bounds the shards on either transport.
    A client is closed when its last follower leaves. All clients share one SSL
    context, loaded once per process in a worker thread, unless ``ssl_context`` is
    given (a private CA's bundle: the command line's ``--ca-bundle``).
    """

    followers_per_client: int | None = FOLLOWERS_PER_CLIENT
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, kw_only=True)
    _shards: list[_Shard] = attrs.field(factory=list, init=False)
    _creating: anyio.Lock = attrs.field(factory=anyio.Lock, init=False)

    @property
    def client_count(self) -> int:
        return len(self._shards)

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client for one follower, for the duration of the block."""
        shard = await self.acquire()
        try:
            yield shard.client
        finally:
            await self.release(shard)

    async def release(self, shard: _Shard) -> None:
        """Give back a shard :meth:`acquire` leased; its client is closed with its last lease."""
        shard.leases -= 1
        if shard.leases == 0:
            self._shards.remove(shard)
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await shard.client.aclose()

    async def acquire(self) -> _Shard:
        """A shard with room for one more follower (give it back with :meth:`release`)."""
        shard = self._free_shard()
        if shard is None:
            async with self._creating:
                shard = self._free_shard()
                if shard is None:
                    context = self.ssl_context or _ssl_context
                    if context is None:
                        context = await anyio.to_thread.run_sync(_shared_ssl_context)
                    shard = self._new_shard(context)
                    self._shards.append(shard)
                # Counted before the lock is released: a shard with no lease is closed.
                shard.leases += 1
                return shard
        shard.leases += 1
        return shard

    def _free_shard(self) -> _Shard | None:
        free = [s for s in self._shards if not s.full]
        return min(free, key=lambda s: s.leases) if free else None

    def _new_shard(self, context: ssl.SSLContext) -> _Shard:
        return _Shard(self._new_client(context), self._capacity())

    def _capacity(self) -> int | None:
        """Followers a new client may serve: any number, unless httpx's pool carries them."""
        if self.followers_per_client is None and environment_names_a_proxy():
            return FOLLOWERS_PER_PROXIED_CLIENT
        return self.followers_per_client

    def _new_client(self, context: ssl.SSLContext) -> httpx.AsyncClient:
        if environment_names_a_proxy():
            # httpx's transport, which applies the proxy and NO_PROXY, with a bounded pool.
            n = self._capacity() or FOLLOWERS_PER_PROXIED_CLIENT
            return httpx.AsyncClient(
                verify=context,
                limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                follow_redirects=False,
            )
        return AgentClient(AgentTransport(ssl_context=context), follow_redirects=False)


client_pool = LoopLocal("follower_client_pool", ClientPool).get
"""The clients shared by every follower of this event loop."""


@final
@attrs.define(eq=False)
class ClientLease:
    """:func:`leased_client` as one slotted object: what a follower holds while it runs.

    The same lease (the caller's client, else one of the loop's pool; the
    credentials hidden meanwhile), without the two suspended generators a
    generator-based context manager keeps for as long as its block runs: a
    process with thousands of followers keeps thousands of leases, and each
    object kept is one more that every full pass of the cyclic collector walks.
    Entered once.
    """

    _given: httpx.AsyncClient | None
    _headers: RequestHeaders = ()
    _url: str | None = None
    _pool: ClientPool | None = attrs.field(default=None, init=False)
    _shard: _Shard | None = attrs.field(default=None, init=False)
    _token: Token[Secrets] | None = attrs.field(default=None, init=False)

    async def __aenter__(self) -> httpx.AsyncClient:
        client = self._given
        if client is None:
            self._pool = client_pool()
            self._shard = await self._pool.acquire()
            client = self._shard.client
        self._token = hide(secrets_of(client=client, headers=self._headers, urls=[self._url]))
        return client

    async def __aexit__(self, *exc_info: object) -> None:
        token, self._token = self._token, None
        unhide(token)
        shard, self._shard = self._shard, None
        if shard is not None and self._pool is not None:
            await self._pool.release(shard)


@asynccontextmanager
async def leased_client(
    client: httpx.AsyncClient | None, *, headers: RequestHeaders = (), url: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The caller's client if given, else one leased from this loop's shared pool.

    While the block runs, every error and library log record made in it hides the
    credentials its requests carry: the client's own, those among ``headers``, and
    ``url``'s password (:mod:`follower._redact`).
    """
    if client is not None:
        with hiding(secrets_of(client=client, headers=headers, urls=[url])):
            yield client
        return
    async with client_pool().lease() as leased:
        with hiding(secrets_of(client=leased, headers=headers, urls=[url])):
            yield leased
