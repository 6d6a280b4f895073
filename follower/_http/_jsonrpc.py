"""One JSON-RPC 2.0 call over the bounded exchange, and the rules of its answer.

The A2A client's calls (``_a2a._client``) and a streamed turn's closing
``GetTask`` (``_reading._stream``) both go through :func:`call_jsonrpc`, so an
answer means the same whoever asked: a 5xx, 408 or 429 is
:class:`~follower.AgentUnavailableError` (its ``Retry-After`` kept), another
non-200 :class:`~follower.AgentRefusedError`, a JSON-RPC error the error its
code names (``_format._a2a.rpc_error``), and anything else that is not a
response :class:`~follower.A2AProtocolError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import (
    A2AProtocolError,
    AgentRefusedError,
    AgentUnavailableError,
    ErrorContext,
    FollowerError,
)
from .._format._a2a import A2AWire, rpc_error
from .._redact import scrub
from ._exchange import RETRY_LATER_STATUSES, exchange, retry_after_seconds

if TYPE_CHECKING:
    import httpx

    from .._options import RequestHeaders

MAX_RPC_BYTES = 16 * 1024 * 1024


async def call_jsonrpc(
    client: httpx.AsyncClient,
    url: str,
    method: str,
    params: Mapping[str, Any],
    *,
    timeout_seconds: float,
    headers: RequestHeaders = (),
    task_id: str | None = None,
    cut_at: float | None = None,
) -> Any:
    """Call ``method`` at ``url``; return the answer's ``result``, or raise what it says.

    ``cut_at``: the call still unanswered then raises ``CutShort`` (``exchange``).
    """
    status, body = await exchange(
        client,
        "POST",
        url,
        A2AWire.request(method, params),
        timeout_seconds=timeout_seconds,
        max_body_bytes=MAX_RPC_BYTES,
        what=call_name(method, None, task_id),
        headers=headers,
        cut_at=cut_at,
    )
    return rpc_result(status, body, call_name(method, url, task_id), url, task_id)


def rpc_result(status: int, body: bytes, what: str, url: str, task_id: str | None) -> Any:
    """The ``result`` of a JSON-RPC answer with ``status`` and ``body``, or the error it means."""
    context: ErrorContext = {"url": url, "task_id": task_id}
    if status >= 500 or status in RETRY_LATER_STATUSES:
        raise AgentUnavailableError(
            f"{what} answered {status}",
            status_code=status,
            retry_after_seconds=retry_after_seconds(getattr(body, "retry_after", None)),
            **context,
        )
    if status != 200:
        raise AgentRefusedError(f"{what} answered {status}", status_code=status, **context)
    answer = json_object(body, A2AProtocolError, f"the answer to {what}", url)
    error = answer.get("error")
    if error is not None:
        raise rpc_error(error, what, task_id, url)
    if "result" not in answer:
        raise A2AProtocolError(f"{what} answered with neither result nor error", **context)
    return answer["result"]


def json_object(body: bytes, error: type[FollowerError], what: str, url: str) -> Mapping[str, Any]:
    """A JSON object from an answer, or ``error`` saying what it was instead."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise error(f"{what} is not JSON", url=url) from exc
    if not isinstance(value, Mapping):
        raise error(f"{what} is not a JSON object: {short(value)}", url=url)
    return value


def call_name(method: str, url: str | None, task_id: str | None) -> str:
    """How an error names an A2A call: its method, its task (if it has one) and its URL."""
    of_task = f" of task {task_id!r}" if task_id is not None else ""
    at = f" at {url}" if url is not None else ""
    return f"{method}{of_task}{at}"


def short(value: Any) -> str:
    """A value quoted in an error: scrubbed, then cut to 200 characters."""
    text = scrub(repr(value))  # before it is cut, as a JSON-RPC error's message
    return text if len(text) <= 200 else text[:200] + "..."
