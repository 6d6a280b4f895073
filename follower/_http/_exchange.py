"""One bounded HTTP exchange, and the cursor read built on it.

Every failure of a request leaves here as a typed :class:`~follower.AgentError`,
except one: our own connection pool being full (:class:`~follower.PoolBusyError`),
which is not the agent's fault and must never count as a failed read of it.
"""

from __future__ import annotations

import email.utils
import functools
import time
from contextlib import aclosing, nullcontext
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.lowlevel
import anyio.to_thread
import attrs
import httpx

from .._errors import (
    AgentRefusedError,
    AgentUnavailableError,
    ClientClosedError,
    ErrorContext,
    FollowerError,
    InvalidArgumentError,
    MalformedPageError,
    MalformedPageReason,
    PoolBusyError,
    TaskNotFoundError,
    add_context,
)
from .._format._discovery import printable
from .._format._wire import LARGE_PAGE_BYTES, Page
from .._options import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT_SECONDS,
    RequestHeaders,
)
from .._redact import quoted
from .._telemetry import with_trace_context
from ._agent_client import AgentClient, Merged
from ._body import BODY_EXTENSION, ResponseBody

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

# Our own pools never make a follower wait; a caller's client might. A full pool is
# not the agent's fault: after this long the read gives up (PoolBusyError) and is retried.
POOL_WAIT_SECONDS = 5.0
# Error bodies are plain text, read for their first line; a proxy's page may be long.
_ERROR_BODY_BYTES = 64 * 1024
# "Later", not "no": a proxy's request timeout (408) and throttling (429) are
# retried like a 5xx, and their Retry-After honoured (docs/protocol.md, read rules).
RETRY_LATER_STATUSES = frozenset({408, 429})
# Large pages decode in worker threads, this many at a time in a process: each holds
# its page's decoded values, so the bound is on memory as much as on threads.
PAGE_DECODER_THREADS = 4
_page_decoders: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
    "follower_page_decoders"
)


class ErrorBody(bytes):
    """An error answer's body (cut short), with the one header a caller acts on.

    A ``bytes``, so ``exchange()`` still returns ``(status, body)``; ``retry_after``
    is the answer's raw ``Retry-After`` value, or None.
    """

    retry_after: str | None

    def __new__(cls, body: bytes, *, retry_after: str | None) -> ErrorBody:
        made = super().__new__(cls, body)
        made.retry_after = retry_after
        return made


class CutShort(Exception):
    """An exchange given up at its caller's ``cut_at``, before its own bound: send it again.

    Never a failure of the agent's, and never seen outside the library: a follower
    cuts a read short to write its turn's heartbeat on time, then sends it again
    (``_reading._shell.sent_again_if_cut``).
    """


async def read_page(
    client: httpx.AsyncClient,
    endpoint: str,
    task_id: str,
    after: int,
    *,
    read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    headers: RequestHeaders = (),
    cut_at: float | None = None,
) -> Page:
    """Read one page of ``task_id`` from cursor ``after``, validated.

    ``headers`` (checked pairs, see :func:`~follower._options.request_headers`) are
    sent with the read, on top of the client's own. A body over ``LARGE_PAGE_BYTES``
    is decoded in a worker thread, so the event loop keeps its schedule (deadlines,
    other followers) meanwhile; a smaller one decodes in place, in well under a
    millisecond. ``cut_at``: see :func:`exchange` (the decode is not cut short).
    """
    try:
        status, body = await exchange(
            client,
            "POST",
            endpoint,
            {"task_id": task_id, "after": after},
            timeout_seconds=read_timeout_seconds,
            max_body_bytes=max_page_bytes,
            what=f"read of task {task_id!r} from after={after}",
            headers=headers,
            cut_at=cut_at,
        )
        if status != 200:
            raise _status_error(status, body, task_id, endpoint)
        if len(body) <= LARGE_PAGE_BYTES:
            return Page.from_json(
                body,
                task_id=task_id,
                after=after,
                max_page_bytes=max_page_bytes,
                max_event_bytes=max_event_bytes,
            )
        decode = functools.partial(
            Page.from_json,
            body,
            task_id=task_id,
            after=after,
            max_page_bytes=max_page_bytes,
            max_event_bytes=max_event_bytes,
        )
        # Abandoned on cancel, so a deadline or a step's cancel ends the read at once; the
        # thread finishes its page (a bounded decode, under a second at the caps) and drops it.
        return await anyio.to_thread.run_sync(
            decode, abandon_on_cancel=True, limiter=_decoder_limiter()
        )
    except FollowerError as exc:
        # A page's errors know the read, not where it went; the exchange's, the reverse.
        add_context(exc, url=endpoint, task_id=task_id, after=after)
        raise


def _decoder_limiter() -> anyio.CapacityLimiter:
    try:
        return _page_decoders.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(PAGE_DECODER_THREADS)
        _page_decoders.set(limiter)
        return limiter


async def exchange(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    json_body: Any = None,
    *,
    timeout_seconds: float,
    max_body_bytes: int,
    what: str,
    headers: RequestHeaders = (),
    cut_at: float | None = None,
) -> tuple[int, bytes]:
    """Send one request; return the status and the body (an error body cut short).

    Bounded as a whole: ``timeout_seconds`` from the moment a connection is ours,
    after at most ``POOL_WAIT_SECONDS`` waiting for one (the library's transport
    never waits for one, and bounds the exchange itself). The body is read
    uncompressed (we ask for ``identity``), so ``max_body_bytes`` bounds what is held in memory;
    a longer body raises :class:`~follower.MalformedPageError` (``too_large``) without being loaded.
    Raises :class:`~follower.AgentUnavailableError` for every transport failure or
    timeout, :class:`~follower.PoolBusyError` when our own pool had no connection in time,
    and :class:`~follower.ClientClosedError` when the client is (or was made) closed.
    A redirect is never followed, whatever the client says: it is an answer like
    any other non-200, so a token sent with ``headers`` (or by the client) reaches
    only the URL asked for.

    ``cut_at`` (a time on the loop's clock): the exchange still unfinished then is
    given up, raising :class:`CutShort`. On the library's own transport that is the
    exchange's deadline, when it comes first; on any other, a cancel scope's.
    """
    # The current trace's context goes with every request: the agent's spans join it.
    fields = with_trace_context(_request_fields(headers))
    parsed = _parsed_url(url)
    where = f"{what} at {url}"
    deadline: anyio.CancelScope | None = None
    cut: anyio.CancelScope | None = None  # a scope for cut_at, where the deadline is not it
    cut_by_deadline = False  # the exchange's own deadline is cut_at
    send: Awaitable[tuple[int, bytes]]
    ours = client if isinstance(client, AgentClient) and json_body is not None else None
    merged = None if ours is None else ours.merged_for_json(parsed, fields)
    if ours is not None and merged is not None:
        # The library's client on its own transport, which bounds the whole exchange by
        # the timeout and has no pool to wait for: no httpx model is made. A cut that
        # comes first is its deadline, and no scope (and its timer) more for each read.
        bound_at = anyio.current_time() + timeout_seconds
        cut_by_deadline = cut_at is not None and cut_at < bound_at
        send = _send_direct(
            ours,
            method,
            parsed,
            json_body,
            merged,
            cut_at if cut_by_deadline and cut_at is not None else bound_at,
            max_body_bytes,
            where,
        )
    else:
        if cut_at is not None:
            cut = anyio.CancelScope(deadline=cut_at)
        timeout = _timeout(timeout_seconds)
        if ours is not None:  # the same, with httpx's models (the client's cookies, say)
            request = ours.build_json_request(
                method, parsed, json_body, headers=fields, timeout=timeout
            )
        else:
            request = client.build_request(
                method, parsed, json=json_body, headers=fields, timeout=timeout
            )
            if not isinstance(client, AgentClient):
                deadline = _bounded_by_traces(request, timeout_seconds)
        send = _send_capped(client, request, max_body_bytes, where)
    try:
        if deadline is None and cut is None:
            return await send
        with cut or nullcontext(), deadline or nullcontext():
            return await send
    except FollowerError as exc:  # a body refused as read
        add_context(exc, url=url)
        raise
    except httpx.PoolTimeout as exc:
        raise PoolBusyError(
            f"no free connection to {url} in {POOL_WAIT_SECONDS} s", url=url
        ) from exc
    except httpx.TimeoutException as exc:
        if cut_by_deadline:  # on the library's transport, the only timeout is the deadline
            raise CutShort(where) from exc
        raise AgentUnavailableError(
            f"{what} at {url} timed out after {timeout_seconds} s", url=url
        ) from exc
    except httpx.TransportError as exc:
        if client.is_closed:  # closed under the exchange: the caller's doing, not the agent's
            raise _client_closed(what, url) from exc
        raise AgentUnavailableError(
            f"{what} at {url} failed: {type(exc).__name__}: {exc}", url=url
        ) from exc
    except RuntimeError as exc:
        # httpx refuses to send on a closed client with a bare RuntimeError.
        if client.is_closed:
            raise _client_closed(what, url) from exc
        raise
    # Only a cancel of the cut's or the deadline's, caught by its own scope, ends up here.
    if cut is not None and cut.cancelled_caught:
        raise CutShort(where)
    raise AgentUnavailableError(f"{what} at {url} took over {timeout_seconds} s", url=url)


def _client_closed(what: str, url: str) -> ClientClosedError:
    return ClientClosedError(f"{what} at {url}: the client was closed", url=url)


# Asked of every request: the bytes counted against the cap are the bytes held.
_IDENTITY = {"accept-encoding": "identity"}


@functools.lru_cache(maxsize=256)
def _request_fields(headers: RequestHeaders) -> dict[str, str]:
    # One dict per set of headers, kept: the client merges a request's headers with
    # its own once per dict it is given, not once per read.
    if not headers:
        return _IDENTITY
    return {**dict(headers), **_IDENTITY}


@functools.lru_cache(maxsize=64)
def _timeout(timeout_seconds: float) -> httpx.Timeout:
    # Built once per value (a Timeout is never changed once made).
    return httpx.Timeout(timeout_seconds, pool=POOL_WAIT_SECONDS)


async def _send_direct(
    client: AgentClient,
    method: str,
    url: httpx.URL,
    json_body: Any,
    merged: Merged,
    deadline: float,
    max_body_bytes: int,
    what: str,
) -> tuple[int, bytes]:
    """:func:`_send_capped` on the library's client and transport, with no httpx model made."""
    head, body = await client.json_exchange(method, url, json_body, merged, deadline=deadline)
    try:
        return await _capped_answer(
            head.status, _Fields(head.headers).get, body.read_within, max_body_bytes, what
        )
    finally:
        await body.aclose()


async def _send_capped(
    client: httpx.AsyncClient, request: httpx.Request, max_body_bytes: int, what: str
) -> tuple[int, bytes]:
    # Never followed: a redirect's target is not the agent's word on its origin.
    response = await client.send(request, stream=True, follow_redirects=False)
    try:
        return await _capped_answer(
            response.status_code,
            response.headers.get,
            functools.partial(_read_response_within, response),
            max_body_bytes,
            what,
        )
    finally:
        await response.aclose()
        # httpx binds a response's stream back to the response (a reference cycle), so
        # every read would leave its Request, Response and headers to the cyclic garbage
        # collector: with thousands of followers its full passes were most of the CPU.
        # Closed, the response needs no stream: breaking the cycle frees it at once.
        response.stream = _NO_STREAM


async def _capped_answer(
    status: int,
    field: Callable[[str], str | None],
    read_within: Callable[[int], Awaitable[tuple[bytes, str | None]]],
    max_body_bytes: int,
    what: str,
) -> tuple[int, bytes]:
    """The status and the body (an error body cut short), refused if over its cap.

    ``field`` gives a response header's value; ``read_within(limit)`` the body's
    first ``limit`` bytes at most and why it was cut short (None: it was not).
    """
    encoding = field("content-encoding")
    if encoding is not None and encoding.lower() != "identity":
        raise MalformedPageError(
            f"{what}: the body is {encoding}-encoded, identity was asked",
            reason=MalformedPageReason.NOT_AN_OBJECT,
        )
    if status == 200:
        return status, await _body_within(
            field("content-length"), read_within, max_body_bytes, what
        )
    body = await _body_within(None, read_within, _ERROR_BODY_BYTES, what, cut=True)
    return status, ErrorBody(body, retry_after=field("retry-after"))


async def _body_within(
    declared: str | None,
    read_within: Callable[[int], Awaitable[tuple[bytes, str | None]]],
    limit: int,
    what: str,
    *,
    cut: bool = False,
) -> bytes:
    """The body, refused over ``limit`` bytes (before it is read if ``declared`` says so).

    ``cut``: an error body, cut short at ``limit`` instead. Not decoded: non-identity
    encodings were refused, so the bytes counted are the bytes held.
    """
    if not cut and declared is not None and declared.isdigit() and int(declared) > limit:
        raise MalformedPageError(
            f"{what}: the body of {declared[:20]} bytes is over the {limit}-byte cap; not loaded",
            reason=MalformedPageReason.TOO_LARGE,
        )
    data, over = await read_within(limit)
    if over is not None and not cut:
        raise MalformedPageError(
            f"{what}: the body is {over}; not loaded", reason=MalformedPageReason.TOO_LARGE
        )
    return data


async def _read_capped(
    response: httpx.Response, limit: int, what: str, *, cut: bool = False
) -> bytes:
    """:func:`_body_within` of an httpx response."""
    read_within = functools.partial(_read_response_within, response)
    return await _body_within(
        response.headers.get("content-length"), read_within, limit, what, cut=cut
    )


@attrs.frozen
class _Fields:
    """A head's fields, looked up as ``httpx.Headers.get`` does: by name, values joined."""

    _fields: list[tuple[bytes, bytes]]

    def get(self, name: str) -> str | None:
        key = name.encode("ascii")
        values = [value for field, value in self._fields if field.lower() == key]
        if not values:
            return None
        return ", ".join(value.decode("latin-1") for value in values)


# What a closed response is left holding (see _send_capped).
_NO_STREAM = httpx.ByteStream(b"")


def checked_endpoint(endpoint: object) -> str:
    """``endpoint`` as given, if a read can be sent to it; else :class:`InvalidArgumentError`.

    Refused: what is no non-empty ``str``, whitespace, a backslash or a control
    or format character anywhere (as in a card's endpoint: httpx refuses a CR
    or LF and percent-encodes a space, even in the host), and what httpx cannot
    parse. Called where a caller names the endpoint, so misuse fails at once.
    """
    if not isinstance(endpoint, str) or not endpoint:
        raise InvalidArgumentError(
            f"endpoint must be a non-empty URL string, not {quoted(endpoint, 80)}"
        )
    if not printable(endpoint):
        raise InvalidArgumentError(
            f"endpoint {quoted(endpoint, 120)} holds whitespace, a backslash or a control character"
        )
    try:
        _parsed_url(endpoint)
    except httpx.InvalidURL as exc:
        raise InvalidArgumentError(f"endpoint {quoted(endpoint, 120)} is no URL: {exc}") from None
    return endpoint


@functools.lru_cache(maxsize=1024)
def _parsed_url(url: str) -> httpx.URL:
    # A follower reads one URL over and over; httpx parses a str each time (immutable URLs).
    return httpx.URL(url)


def _bounded_by_traces(request: httpx.Request, timeout_seconds: float) -> anyio.CancelScope:
    """A deadline for the whole exchange on any transport, narrowed by its trace events.

    httpx's own timeouts bound each socket operation, not the exchange. The wait
    for a pooled connection has its own bound; from the moment the connection is
    ours (its first trace event) the whole exchange, headers included, gets
    ``timeout_seconds``. Transports without traces get both.
    """
    request.stream = _BodyStream(request.read())
    deadline = anyio.CancelScope(
        deadline=anyio.current_time() + timeout_seconds + POOL_WAIT_SECONDS
    )

    async def on_trace(event: str, info: Any) -> None:
        if event.endswith((".connect_tcp.started", ".send_request_headers.started")):
            deadline.deadline = min(deadline.deadline, anyio.current_time() + timeout_seconds)

    request.extensions["trace"] = on_trace
    return deadline


@attrs.define(eq=False)
class _BodyStream(httpx.AsyncByteStream):
    """A request body that is an iterator, not an async generator.

    httpx's own body is an async generator; when the agent drops the connection
    mid-request it is left unexhausted and garbage-collected, which trio reports
    as a ResourceWarning on every failed read.
    """

    _body: bytes

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _Once(self._body)


@attrs.define(eq=False)
class _Once:
    """One chunk, then the end."""

    _chunk: bytes | None

    def __aiter__(self) -> _Once:
        return self

    async def __anext__(self) -> bytes:
        if self._chunk is None:
            raise StopAsyncIteration
        chunk, self._chunk = self._chunk, None
        return chunk


async def _read_response_within(response: httpx.Response, limit: int) -> tuple[bytes, str | None]:
    """A response's body, as :meth:`ResponseBody.read_within` reads one: at most ``limit`` bytes."""
    # The library's transport hands out its body to be read whole, with no generator
    # between (unless a hook read it already).
    body = response.extensions.get(BODY_EXTENSION)
    if isinstance(body, ResponseBody) and not response.is_stream_consumed:
        return await body.read_within(limit)
    parts: list[bytes] = []
    size = 0
    # A body cut short leaves httpx's nested generators to the garbage collector
    # (trio warns, when ResourceWarnings are shown): only pages over the cap and
    # error bodies over 64 KiB are cut short.
    async with aclosing(cast("AsyncGenerator[bytes]", response.aiter_bytes())) as chunks:
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                parts.append(chunk[: limit - (size - len(chunk))])
                return b"".join(parts), f"over the {limit}-byte cap"
            parts.append(chunk)
    return b"".join(parts), None


def _status_error(status: int, body: bytes, task_id: str, endpoint: str) -> Exception:
    text = body.decode(errors="replace")
    detail = text.strip().splitlines()[0][:200] if text.strip() else "(no body)"
    context: ErrorContext = {"task_id": task_id, "url": endpoint}
    if status == 404:
        return TaskNotFoundError(
            f"agent at {endpoint} does not know task {task_id!r}: {detail}", **context
        )
    if status >= 500 or status in RETRY_LATER_STATUSES:
        return AgentUnavailableError(
            f"agent at {endpoint} answered {status} to the read of task {task_id!r}: {detail}",
            status_code=status,
            retry_after_seconds=retry_after_seconds(getattr(body, "retry_after", None)),
            **context,
        )
    return AgentRefusedError(
        f"agent at {endpoint} refused the read of task {task_id!r} with {status}: {detail}",
        status_code=status,
        **context,
    )


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """The delay a ``Retry-After`` value asks for: delta-seconds or an HTTP date (RFC 9110).

    None for a missing or unreadable value; a date in the past is 0. ``now``
    (wall-clock seconds) is for tests; the follower caps what it honours.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(int(value[:12]))  # over 30,000 years is as good as the cap
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None  # an HTTP date is in GMT; a date without a zone is not one
    wall = time.time() if now is None else now
    return max(0.0, when.timestamp() - wall)
