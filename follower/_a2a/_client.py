"""The A2A JSON-RPC client: an agent's card, its tasks, and a wait for one to end.

It speaks the wire format of agents built on a2a-sdk 0.3 (``message/send``,
``tasks/get``, ``tasks/cancel``); its requests go through the HTTP module's
bounded exchange, like the trajectory reads. It knows nothing of turns: the
turns that follow a task (``_turn``) sit above it. A step that gives up on a
task asks for its cancel with :func:`cancel_task_quietly`, shielded and bounded,
so the agent does not work for a step that is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, final
from urllib.parse import urljoin

import anyio
import attrs

from .._backoff import PollBackoff
from .._errors import (
    A2AProtocolError,
    AgentCardError,
    AgentUnavailableError,
    FollowerError,
    InvalidArgumentError,
    PoolBusyError,
    TaskTimeoutError,
    add_context,
)
from .._format._a2a import (
    A2AWire,
    TaskSource,
    Via,
    a2a_state,
    jsonrpc_interface,
    task_source,
)
from .._format._discovery import has_user_info, live_trajectory_endpoint, same_origin
from .._http._clients import leased_client
from .._http._exchange import exchange
from .._http._jsonrpc import MAX_RPC_BYTES, call_jsonrpc, call_name, json_object, short
from .._options import (
    DEFAULT_READ_TIMEOUT_SECONDS,
    RequestHeaders,
    positive_seconds,
    request_headers,
)
from .._public import NoPublicConstructor
from .._redact import hiding, secrets_of
from .._retries import FailureStreak

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    import httpx

    from .._redact import Secrets

logger = logging.getLogger("follower.a2a")

AGENT_CARD_PATH = "/.well-known/agent-card.json"
# Task states after which the turn is over: terminal, or waiting on the user.
TURN_ENDING_STATES = frozenset(
    {"completed", "canceled", "failed", "rejected", "input-required", "auth-required"}
)
CANCEL_TASK_SECONDS = 5.0
DEFAULT_TASK_DEADLINE_SECONDS = 600.0


@final
@attrs.frozen
class A2ATask(metaclass=NoPublicConstructor):
    """What the agent said of a task: its id, its context and its state.

    Made by the library from the agent's answers, never by users.
    """

    id: str
    context_id: str | None
    state: str

    @property
    def turn_ended(self) -> bool:
        """Whether the turn is over: the task ended, or waits on the user."""
        return self.state in TURN_ENDING_STATES

    @classmethod
    def from_result(
        cls, result: Any, method: str, *, url: str | None = None, task_id: str | None = None
    ) -> A2ATask:
        """The task an A2A call answered with; ``url`` and ``task_id`` name the call in errors.

        0.3 answers with the task itself (``kind`` ``task``), 1.0's ``SendMessage``
        with ``{"task": ...}``; a state in either spelling is kept in 0.3's.
        """
        what = call_name(method, url, task_id)
        if isinstance(result, Mapping) and set(result) == {"task"}:
            result = result["task"]
        if not isinstance(result, Mapping) or result.get("kind", "task") != "task":
            raise A2AProtocolError(
                f"{what} answered with no task: {short(result)}", url=url, task_id=task_id
            )
        got_id = result.get("id")
        status = result.get("status")
        state = status.get("state") if isinstance(status, Mapping) else None
        context_id = result.get("contextId")
        if not isinstance(got_id, str) or not got_id or not isinstance(state, str):
            raise A2AProtocolError(
                f"{what} answered with a malformed task: {short(result)}",
                url=url,
                task_id=task_id,
            )
        context = context_id if isinstance(context_id, str) else None
        return cls._create(got_id, context, a2a_state(state) or state.lower())


def _checked_headers(headers: Mapping[str, str] | None) -> RequestHeaders:
    return request_headers("headers", headers)


@final
@attrs.define(eq=False, repr=False)  # no repr: its URL and headers may hold credentials
class A2AAgent(metaclass=NoPublicConstructor):
    """An A2A agent reached over JSON-RPC; use :func:`connect_agent` to make one."""

    url: str
    card: Mapping[str, Any]
    _client: httpx.AsyncClient
    _timeout_seconds: float = attrs.field(default=DEFAULT_READ_TIMEOUT_SECONDS, kw_only=True)
    _headers: RequestHeaders = attrs.field(default=None, kw_only=True, converter=_checked_headers)
    wire: A2AWire = attrs.field(factory=A2AWire, kw_only=True)
    _via: Via | None = attrs.field(default=None, kw_only=True)
    # What the agent may echo of our requests, hidden in whatever its calls raise.
    _secrets: Secrets = attrs.field(init=False)
    trajectory_endpoint: str | None = attrs.field(init=False)
    task_source: TaskSource | None = attrs.field(init=False)
    """How the agent's tasks are followed: the way asked for, or the best its card offers
    (cursor reads, else its stream, else polls); None when cursor reads were asked for
    and the card offers none."""
    _rpc_headers: RequestHeaders = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._secrets = secrets_of(client=self._client, headers=self._headers, urls=[self.url])
        self.trajectory_endpoint = live_trajectory_endpoint(self.card, self.url)
        self.task_source = task_source(self.card, self.url, self.wire, self._via)
        self._rpc_headers = (*self._headers, *self.wire.headers)

    async def send_message(self, text: str, *, context_id: str | None = None) -> A2ATask:
        """Send a user message; the agent answers at once with the task it started."""
        return await self._task_call(*self.wire.send_message(text, context_id))

    async def get_task(self, task_id: str) -> A2ATask:
        return await self._task_call(*self.wire.get_task(task_id), task_id)

    async def cancel_task(self, task_id: str) -> A2ATask:
        return await self._task_call(*self.wire.cancel_task(task_id), task_id)

    async def _task_call(
        self, method: str, params: Mapping[str, Any], task_id: str | None = None
    ) -> A2ATask:
        """A call answered with a task; its errors name the agent's URL and the task."""
        try:
            with hiding(self._secrets):
                result = await self._call(method, params, task_id)
                return A2ATask.from_result(result, method, url=self.url, task_id=task_id)
        except FollowerError as exc:
            add_context(exc, url=self.url, task_id=task_id)
            raise

    async def wait_for_task(
        self,
        task_id: str,
        *,
        deadline_seconds: float = DEFAULT_TASK_DEADLINE_SECONDS,
        poll_interval_seconds: float = 1.0,
        max_interval_seconds: float = 10.0,
        max_failures: int | None = None,
    ) -> A2ATask:
        """Poll ``tasks/get`` until the turn ends; back off while it runs or fails.

        The waits between polls are the retries module's ``PollBackoff``:
        from ``poll_interval_seconds``, half as long again each time, up to
        ``max_interval_seconds``; a ``Retry-After`` lengthens one within it.

        Raises :class:`~follower.TaskTimeoutError` after ``deadline_seconds``, and
        the last :class:`~follower.AgentUnavailableError` after ``max_failures``
        failed calls in a row (None: retry until the deadline).
        """
        backoff = PollBackoff(
            interval_seconds=poll_interval_seconds, max_interval_seconds=max_interval_seconds
        )
        failures = 0  # the agent's, in a row: our own full pool is not one of them
        streak = FailureStreak(
            logger,
            f"tasks/get calls for task {task_id} at {self.url}",
            noun="call",
            extra={"task_id": task_id, "turn_id": None},
        )
        try:
            with anyio.move_on_after(deadline_seconds):
                while True:
                    try:
                        task = await self.get_task(task_id)
                    except (AgentUnavailableError, PoolBusyError) as exc:
                        failures += isinstance(exc, AgentUnavailableError)
                        streak.failed(exc)
                        if max_failures is not None and failures >= max_failures:
                            streak.close(f"after max_failures={max_failures}")
                            raise
                        wait = backoff.next_wait(getattr(exc, "retry_after_seconds", None))
                        streak.retrying(wait)
                    else:
                        streak.recovered()
                        failures = 0
                        if task.turn_ended:
                            return task
                        wait = backoff.next_wait()
                    await anyio.sleep(wait)
        finally:
            streak.close("the wait ended")
        raise TaskTimeoutError(
            f"task {task_id!r} at {self.url} did not end within {deadline_seconds} s",
            task_id=task_id,
            url=self.url,
        )

    async def _call(
        self, method: str, params: Mapping[str, Any], task_id: str | None = None
    ) -> Any:
        return await call_jsonrpc(
            self._client,
            self.url,
            method,
            params,
            timeout_seconds=self._timeout_seconds,
            headers=self._rpc_headers,
            task_id=task_id,
        )


@asynccontextmanager
async def connect_agent(
    url: str,
    *,
    client: httpx.AsyncClient | None = None,
    timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
    headers: Mapping[str, str] | None = None,
    via: Via | str | None = None,
) -> AsyncIterator[A2AAgent]:
    """Fetch the agent card under ``url`` and yield the agent, with its live read (or None).

    The card is looked for under ``url``, then at the root of its origin (as A2A
    places it). JSON-RPC goes to the URL the card names, resolved against the
    card's own address (cards often say just ``"/a2a"``); a card naming another
    origin (a public address behind a proxy, say) is not followed there: the
    agent is reached where its card was found. Without ``client``, one is leased
    from the loop's shared pool for the block.

    ``headers`` (a bearer token, say) go with the card's fetch and every JSON-RPC
    call, on top of the client's own; all of them to ``url``'s origin only
    (never through a redirect), and never into a log line. Pass the same to
    :class:`~follower.LiveTurns` for the trajectory reads.

    A card naming a JSON-RPC interface of A2A 1.0 (``supportedInterfaces``) is
    spoken to in 1.0, any other in 0.3. ``via`` (``"cursor"``, ``"stream"``,
    ``"poll"``) chooses how its tasks are followed (:attr:`A2AAgent.task_source`);
    by default the best way the card offers.
    """
    checked = request_headers("headers", headers)
    chosen = _checked_via(via)
    timeout_seconds = positive_seconds("timeout_seconds", timeout_seconds)
    async with leased_client(client, headers=checked, url=url) as leased:
        card_url, card = await fetch_agent_card(
            leased, url, timeout_seconds=timeout_seconds, headers=checked
        )
        named, version = jsonrpc_interface(card)
        yield A2AAgent._create(
            _rpc_url(named, card_url, url),
            card,
            leased,
            timeout_seconds=timeout_seconds,
            headers=dict(checked),
            wire=A2AWire(version),
            via=chosen,
        )


def _checked_via(via: object) -> Via | None:
    if via is None or isinstance(via, Via):
        return via
    if isinstance(via, str) and via in Via.__members__.values():
        return Via(via)
    ways = ", ".join(repr(way.value) for way in Via)
    raise InvalidArgumentError(f"via must be one of {ways} or None, not {via!r}")


async def fetch_agent_card(
    client: httpx.AsyncClient,
    url: str,
    *,
    timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
    headers: RequestHeaders = (),
) -> tuple[str, Mapping[str, Any]]:
    """The agent card's URL and the card, looked for under ``url``, then at its origin's root."""
    candidates = [url.rstrip("/") + AGENT_CARD_PATH]
    root = urljoin(url, AGENT_CARD_PATH)
    if root not in candidates:
        candidates.append(root)
    for card_url in candidates:
        status, body = await exchange(
            client,
            "GET",
            card_url,
            timeout_seconds=timeout_seconds,
            max_body_bytes=MAX_RPC_BYTES,
            what="agent card",
            headers=headers,
        )
        if status == 404 and card_url != candidates[-1]:
            continue
        if status != 200:
            raise AgentCardError(f"no agent card at {card_url}: HTTP {status}", url=card_url)
        return card_url, json_object(
            body, AgentCardError, f"the agent card at {card_url}", card_url
        )
    raise AssertionError("unreachable: the last candidate returns or raises")


def _rpc_url(named: str | None, card_url: str, given_url: str) -> str:
    if named is None or has_user_info(given_url):
        # Credentials in the given URL's user info go with that URL, and no other.
        return given_url
    resolved = urljoin(card_url, named)
    if same_origin(resolved, card_url):
        return resolved
    logger.info("the card names %s, off the origin it was read at; using %s", named, given_url)
    return given_url


async def cancel_task_quietly(agent: A2AAgent, task_id: str) -> None:
    """Ask the agent to cancel a task the step no longer waits for; never raise."""
    with anyio.move_on_after(CANCEL_TASK_SECONDS, shield=True) as scope:
        try:
            await agent.cancel_task(task_id)
        except FollowerError as exc:
            logger.warning("could not cancel task %s: %s", task_id, exc)
    if scope.cancelled_caught:
        logger.warning("cancelling task %s took over %s s", task_id, CANCEL_TASK_SECONDS)
