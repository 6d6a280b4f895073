"""Following one task over the agent's own stream: ``SubscribeToTask``, as server-sent events.

The same rules as the cursor read loop (``_follow``), for an agent that offers a
stream and no live-trajectory extension (docs/protocol.md, "Streamed turns"):

- each frame is stored as it arrives, in order, once (``_format._stream``:
  one event each, in A2A 1.0's shape); frames that arrive together are one chunk;
- a stream that drops while the step runs is subscribed to again, after a
  jittered backoff; a stream that fails, drops or ends early after ``stop`` ends
  following at once (the sentinel, :class:`~follower._errors.FollowingEnded`):
  the step has stopped, so an agent that fails is gone;
- where a stream was lost, the events the agent sent meanwhile may be missing:
  the next subscription stores a ``gap`` event first, and when the task has
  ended the follower stores the task as ``GetTask`` gives it (its status,
  artifacts and whole history), so the turn is complete only when nothing can
  be missing;
- our own full pool is never the agent's failure; a task the agent does not
  know ends following quietly; a malformed frame, a refusal or a JSON-RPC error
  ends it with a typed error, and what is stored stays.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs

from .._errors import (
    A2AProtocolError,
    AgentUnavailableError,
    FollowerError,
    MalformedPageError,
    MalformedPageReason,
    PoolBusyError,
    TaskNotFoundError,
)
from .._format._a2a import JSONRPC_UNSUPPORTED_OPERATION, TaskSource, ends_turn
from .._format._sse import SSEDecoder, SSEError
from .._format._stream import (
    StreamItem,
    gap_event,
    stream_item,
    task_item,
    trajectory_state,
)
from .._http._event_stream import event_stream
from .._http._jsonrpc import MAX_RPC_BYTES, call_jsonrpc, call_name, rpc_result
from .._retries import FailureStreak, failure_reason
from ._shell import failed_call, follow_by, store_events, wait_or_stop

if TYPE_CHECKING:
    from collections.abc import Coroutine

    import httpx

    from .._options import FollowOptions
    from ._record import Beats, FollowOutcome, FollowProgress, Sink

logger = logging.getLogger("follower.stream")

# The longest line a frame may take past its data's bound: the field name and the
# JSON-RPC envelope around the event.
_FRAME_OVERHEAD_BYTES = 64 * 1024


class _StreamEnded(Exception):
    """The subscription ended without a frame that ends the turn (cut, or closed early)."""


@attrs.define(eq=False, kw_only=True)
class _StreamFollower:
    """One task's stream: subscriptions, the frames they bring, and the gaps between them."""

    source: TaskSource
    task_id: str
    sink: Sink
    options: FollowOptions
    stop: anyio.Event
    progress: FollowProgress
    turn_id: str | None = None
    beats: Beats | None = None  # handed to a task at once, and not kept
    extra: dict[str, object] = attrs.field(init=False)
    failing: FailureStreak = attrs.field(init=False)
    a2a_state: str = "submitted"
    gap_reason: str | None = None
    """Why events may be missing before the next frame; stored with it as a ``gap`` event."""
    gaps: int = 0
    subscriptions: int = 0
    failures: int = 0

    noun = "stream"

    def __attrs_post_init__(self) -> None:
        if self.beats is not None:
            # The turn's heartbeats go to a task: a stream's wait is the stream, with no
            # time between reads to write one in.
            self.beats.to_task()
            self.beats = None
        self.extra = {"task_id": self.task_id, "turn_id": self.turn_id}
        what = f"streams of task {self.task_id} at {self.source.url}"
        self.failing = FailureStreak(logger, what, noun="stream", extra=self.extra)

    def left(self, ending: str) -> None:
        self.failing.close(ending)

    @property
    def url(self) -> str:
        return self.source.url

    async def run(self, client: httpx.AsyncClient, after: int) -> None:
        if after > 0:
            # A turn resumed from an earlier attempt: what the agent sent between the two
            # attempts was streamed to nobody.
            self._lost("resumed")
        while True:
            try:
                await self._subscribe(client)
                return  # the frame that ends the turn was stored
            except _StreamEnded as ended:
                failure: FollowerError = AgentUnavailableError(str(ended), url=self.url)
            except (AgentUnavailableError, PoolBusyError) as exc:
                failure = exc
            except TaskNotFoundError:
                logger.warning(
                    "task %s is unknown to the agent at %s; not following it",
                    self.task_id,
                    self.url,
                    extra=self.extra,
                )
                return
            except A2AProtocolError as exc:
                if exc.code != JSONRPC_UNSUPPORTED_OPERATION:
                    raise
                # A 1.0 agent will not stream a task that has ended: what it ended with
                # is its GetTask.
                self._lost("the task ended while no stream was open")
                await self._reconcile(client, refused=exc)
                return
            await self._after_failure(failure)

    async def _subscribe(self, client: httpx.AsyncClient) -> None:
        method, params = self.source.wire.subscribe(self.task_id)
        options = self.options
        decoder = SSEDecoder(
            max_line_bytes=options.max_event_bytes + _FRAME_OVERHEAD_BYTES,
            max_data_bytes=options.max_event_bytes + _FRAME_OVERHEAD_BYTES,
        )
        self.progress.reads += 1
        self.subscriptions += 1
        if self.subscriptions > 1:
            self.progress.reconnects += 1
        started = anyio.current_time()
        async with event_stream(
            client,
            self.url,
            self.source.wire.request(method, params),
            timeout_seconds=options.read_timeout_seconds,
            max_body_bytes=MAX_RPC_BYTES,
            what=call_name(method, None, self.task_id),
            headers=(*options.headers, *self.source.wire.headers),
        ) as answer:
            if (observer := self.progress.observer) is not None:  # the head's latency
                observer.read_took(anyio.current_time() - started)
            if not answer.is_event_stream:
                # A JSON-RPC error (or a proxy's page) instead of a stream: what it says.
                assert answer.body is not None
                what = call_name(method, self.url, self.task_id)
                result = rpc_result(answer.status, answer.body, what, self.url, self.task_id)
                raise MalformedPageError(
                    f"{method} of task {self.task_id!r} at {self.url} answered with no stream: "
                    f"{type(result).__name__}",
                    reason=MalformedPageReason.NOT_AN_OBJECT,
                )
            self.progress.caught_up_at = anyio.current_time()
            while True:
                data = await answer.receive()
                if not data:
                    raise _StreamEnded(f"the stream of task {self.task_id} ended early")
                try:
                    frames = decoder.feed(data)
                except SSEError as exc:
                    raise MalformedPageError(
                        f"the stream of task {self.task_id!r} at {self.url}: {exc}",
                        reason=MalformedPageReason.EVENT_TOO_LARGE,
                    ) from None
                items: list[StreamItem] = []
                try:
                    for frame in frames:
                        if frame.event == "message":
                            items.append(
                                stream_item(
                                    frame.data,
                                    task_id=self.task_id,
                                    url=self.url,
                                    max_event_bytes=options.max_event_bytes,
                                )
                            )
                except FollowerError:
                    if items:  # what came before the bad frame is stored, then following ends
                        await self._hand_over(items)
                    raise
                if not items:
                    continue
                if self.failures:
                    self.failing.recovered()
                self.failures = 0
                ends = await self._hand_over(items)
                if ends:
                    if self.gaps:
                        await self._reconcile(client)
                    return

    async def _hand_over(self, items: list[StreamItem]) -> bool:
        """Store what arrived (after the gap it follows, if any); whether it ends the turn."""
        events = self._gap_events()
        ends = False
        for item in items:
            events.append(item.event)
            if item.state is not None:
                self.a2a_state = item.state
            if item.ends_stream:
                ends = True
                break  # the agent ends its stream here: nothing after it is the task's
        # The turn is complete at its last frame when no stream was ever lost; after a
        # gap, only the task GetTask gives at the end can make it so (_reconcile).
        await self._store(events, last=ends and not self.gaps)
        return ends

    def _gap_events(self) -> list[Any]:
        """The gap to store before the next frame, if a stream was lost since the last one."""
        reason, self.gap_reason = self.gap_reason, None
        return [] if reason is None else [gap_event(self.progress.cursor, reason, _now())]

    async def _store(self, events: list[Any], *, last: bool) -> None:
        state = trajectory_state(self.a2a_state)
        await store_events(self.sink, self.progress, events, state, last=last)

    def _lost(self, reason: str) -> None:
        """A stream was lost (or never open): events may be missing from here."""
        if self.gap_reason is None:
            self.gaps += 1
        self.gap_reason = reason

    async def _reconcile(
        self, client: httpx.AsyncClient, *, refused: FollowerError | None = None
    ) -> None:
        """Store the task as ``GetTask`` gives it: after a gap, what makes the turn complete."""
        method, params = self.source.wire.get_task(self.task_id, history=True)
        self.progress.reads += 1
        started = anyio.current_time()
        try:
            try:
                result = await call_jsonrpc(
                    client,
                    self.url,
                    method,
                    params,
                    timeout_seconds=self.options.read_timeout_seconds,
                    headers=(*self.options.headers, *self.source.wire.headers),
                    task_id=self.task_id,
                )
            finally:  # a read like any other: timed, as a poll is
                if (observer := self.progress.observer) is not None:
                    observer.read_took(anyio.current_time() - started)
        except (AgentUnavailableError, PoolBusyError) as exc:
            self.progress.failed_reads += isinstance(exc, AgentUnavailableError)
            logger.warning(
                "task %s: the task after its stream could not be read (%s); the turn is "
                "stored incomplete",
                self.task_id,
                failure_reason(exc),
                extra=self.extra,
            )
            return
        if not isinstance(result, dict):
            raise MalformedPageError(
                f"{method} of task {self.task_id!r} at {self.url} answered with no task",
                reason=MalformedPageReason.BAD_FIELD,
            )
        item = task_item(result, task_id=self.task_id, url=self.url)
        if not ends_turn(item.state):
            if refused is not None:
                raise refused  # it will not stream a task that runs: there is no stream
            return  # the stream said the task ended, GetTask says not yet: stored incomplete
        assert item.state is not None
        self.a2a_state = item.state
        # The task as it ended holds every message and artifact the agent keeps: with
        # it stored, nothing a gap could have lost is missing.
        await self._store([*self._gap_events(), item.event], last=True)

    async def _after_failure(self, failure: FollowerError) -> None:
        """A subscription failed or was lost: end after stop, else wait and subscribe again."""
        if not isinstance(failure, PoolBusyError):
            self.failures += 1
            self._lost("the stream was lost")
        delay = failed_call(
            failure,
            failures=self.failures,
            failing=self.failing,
            progress=self.progress,
            stop=self.stop,
            options=self.options,
            what=f"task {self.task_id}: the stream",
        )
        # Setting stop ends the wait at once: the next subscription is the drain's (and if
        # it fails, the sentinel above ends following).
        await wait_or_stop(self.stop, delay)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def follow_stream(
    source: TaskSource,
    task_id: str,
    sink: Sink,
    *,
    stop: anyio.Event,
    options: FollowOptions,
    after: int = 0,
    progress: FollowProgress | None = None,
    turn_id: str | None = None,
    beats: Beats | None = None,
) -> Coroutine[Any, Any, FollowOutcome]:
    """Follow ``task_id`` over the agent's stream, handing each frame to ``sink``.

    The coroutine it returns, awaited at once, returns once the task is done with
    the turn (ended, or waiting on the user), for a task the agent does not know,
    when the stream fails or drops after ``stop``, or after
    ``options.max_follow_seconds``, and raises the typed errors of a read
    (:class:`~follower.MalformedPageError`, :class:`~follower.AgentRefusedError`,
    :class:`~follower.A2AProtocolError`...) or whatever ``sink`` raises.
    ``after`` is the number of events already stored (a resumed turn).
    """
    return follow_by(
        _StreamFollower,
        source,
        task_id,
        sink,
        stop=stop,
        options=options,
        after=after,
        progress=progress,
        turn_id=turn_id,
        logger=logger,
        beats=beats,
    )
