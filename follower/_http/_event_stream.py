"""One request answered with an event stream: its head within a bound, then its body as it comes.

A cursor read is one bounded exchange (``_exchange``); a stream is not: its body
lasts as long as the task, so only the wait for its head is bounded
(``timeout_seconds``, after at most ``POOL_WAIT_SECONDS`` for a pooled
connection), and the body is received piece by piece for as long as the
caller's scope lets it. Every failure leaves as the same typed errors a read
raises: :class:`~follower.AgentUnavailableError` for the transport and
timeouts, :class:`~follower.PoolBusyError` for our own full pool,
:class:`~follower.ClientClosedError` for a client closed under it. An answer
that is no event stream (a JSON-RPC error, a proxy's page) is read whole, capped.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast, final

import anyio
import attrs
import httpx

from .._errors import (
    AgentUnavailableError,
    ClientClosedError,
    FollowerError,
    MalformedPageError,
    MalformedPageReason,
    PoolBusyError,
    add_context,
)
from .._telemetry import with_trace_context
from ._exchange import (
    POOL_WAIT_SECONDS,
    ErrorBody,
    _parsed_url,
    _read_capped,
    _request_fields,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._options import RequestHeaders

EVENT_STREAM = "text/event-stream"
_STREAM_ASKED = {"accept": f"{EVENT_STREAM}, application/json"}


@final
@attrs.define(eq=False)
class StreamAnswer:
    """An answer to a request for an event stream: the stream, or a body read whole.

    ``status`` is the answer's status. When it is 200 and its content type is
    ``text/event-stream``, :meth:`receive` gives its body as it arrives;
    otherwise ``body`` holds the whole body (an error's cut short).
    """

    status: int
    body: bytes | None
    _response: httpx.Response = attrs.field(repr=False)
    _what: str = attrs.field(repr=False)
    _url: str = attrs.field(repr=False)
    _client: httpx.AsyncClient = attrs.field(repr=False)
    _raw: AsyncIterator[bytes] | None = attrs.field(default=None, init=False, repr=False)

    @property
    def is_event_stream(self) -> bool:
        return self.body is None

    async def receive(self) -> bytes:
        """The next bytes of the stream, ``b""`` at its end; raises the library's errors."""
        try:
            raw = self._raw
            if raw is None:
                # The body's own iterator, not httpx's aiter_raw: that is a generator over
                # another, and one left unexhausted is the garbage collector's (trio warns).
                # The library's transport's body is a plain iterator.
                stream = cast("httpx.AsyncByteStream", self._response.stream)
                raw = self._raw = stream.__aiter__()
            return await raw.__anext__()
        except StopAsyncIteration:
            return b""
        except httpx.TransportError as exc:
            if self._client.is_closed:
                closed = f"{self._what}: the client was closed"
                raise ClientClosedError(closed, url=self._url) from exc
            raise AgentUnavailableError(
                f"{self._what} was cut: {type(exc).__name__}: {exc}", url=self._url
            ) from exc

    async def aclose(self) -> None:
        raw, self._raw = self._raw, None
        close = getattr(raw, "aclose", None)
        if close is not None:
            await close()
        await self._response.aclose()


@asynccontextmanager
async def event_stream(
    client: httpx.AsyncClient,
    url: str,
    json_body: Any,
    *,
    timeout_seconds: float,
    max_body_bytes: int,
    what: str,
    headers: RequestHeaders = (),
) -> AsyncIterator[StreamAnswer]:
    """POST ``json_body`` to ``url`` asking for an event stream; yield the answer.

    The head must come within ``timeout_seconds`` (plus the pool's wait); the
    body then takes as long as it takes. A redirect is never followed. The
    stream's connection is closed when the block ends, however it ends.
    """
    fields = with_trace_context({**_request_fields(headers), **_STREAM_ASKED})
    # No read timeout: the library's transport then bounds nothing past the connect,
    # and the head's wait is bounded here, on either transport.
    timeout = httpx.Timeout(timeout_seconds, read=None, pool=POOL_WAIT_SECONDS)
    request = client.build_request(
        "POST", _parsed_url(url), json=json_body, headers=fields, timeout=timeout
    )
    answer = await _answer(client, request, url, what, timeout_seconds, max_body_bytes)
    try:
        yield answer
    finally:
        with anyio.CancelScope(shield=True):
            await answer.aclose()


async def _answer(
    client: httpx.AsyncClient,
    request: httpx.Request,
    url: str,
    what: str,
    timeout_seconds: float,
    max_body_bytes: int,
) -> StreamAnswer:
    try:
        with anyio.fail_after(timeout_seconds + POOL_WAIT_SECONDS):
            response = await client.send(request, stream=True, follow_redirects=False)
            try:
                return await _read_head(client, response, url, what, max_body_bytes)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
                raise
    except FollowerError as exc:
        add_context(exc, url=url)
        raise
    except TimeoutError as exc:
        raise AgentUnavailableError(
            f"{what} at {url} gave no answer in {timeout_seconds} s", url=url
        ) from exc
    except httpx.PoolTimeout as exc:
        raise PoolBusyError(
            f"no free connection to {url} in {POOL_WAIT_SECONDS} s", url=url
        ) from exc
    except httpx.TimeoutException as exc:
        raise AgentUnavailableError(f"{what} at {url} timed out", url=url) from exc
    except httpx.TransportError as exc:
        if client.is_closed:
            raise ClientClosedError(f"{what} at {url}: the client was closed", url=url) from exc
        raise AgentUnavailableError(
            f"{what} at {url} failed: {type(exc).__name__}: {exc}", url=url
        ) from exc
    except RuntimeError as exc:
        if client.is_closed:  # httpx refuses to send on a closed client with a bare RuntimeError
            raise ClientClosedError(f"{what} at {url}: the client was closed", url=url) from exc
        raise


async def _read_head(
    client: httpx.AsyncClient, response: httpx.Response, url: str, what: str, max_body_bytes: int
) -> StreamAnswer:
    if response.headers.get("content-encoding", "identity").lower() != "identity":
        raise MalformedPageError(
            f"{what} at {url}: the body is "
            f"{response.headers['content-encoding']}-encoded, identity was asked",
            reason=MalformedPageReason.NOT_AN_OBJECT,
        )
    status = response.status_code
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    body: bytes | None = None
    if status != 200:
        body = ErrorBody(
            await _read_capped(response, 64 * 1024, f"{what} at {url}", cut=True),
            retry_after=response.headers.get("retry-after"),
        )
    elif kind != EVENT_STREAM:
        body = await _read_capped(response, max_body_bytes, f"{what} at {url}")
    return StreamAnswer(status, body, response, f"{what} at {url}", url, client)
