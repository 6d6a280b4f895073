"""A step's turns, linked in order; or a lone turn.

The turns' blocks (``_block``) own the tasks and the step's ledger
(``_ledger.StepLedger``) every decision; this module opens the turns, writes
the step's last mark where the ledger says, and sums what its turns did
(``statistics()``).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, final

import anyio
import anyio.lowlevel
import attrs

from .._errors import AgentCardError, TurnStateError
from .._format._a2a import TaskSource, Via
from .._format._layout import TurnKeys
from .._http._exchange import checked_endpoint
from .._options import (
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT_SECONDS,
    DEFAULT_WRITER_HEARTBEAT_SECONDS,
    FollowOptions,
)
from .._statistics import LiveTurnsStatistics
from .._stores._keys import check_prefix
from .._storing._chunks import LiveTrajectoryChunks, write_next_turn
from .._storing._stored_turn import read_stored_turn
from .._telemetry import (
    AGENT_URL_ATTRIBUTE,
    BYTES_ATTRIBUTE,
    COMPLETE_ATTRIBUTE,
    EVENTS_ATTRIBUTE,
    STEP_SPAN,
    TURNS_ATTRIBUTE,
    SpanLink,
    SpanScope,
    agent_url,
    telemetry_for,
)
from ._block import open_turn
from ._endings import bounded_cleanup, outcome_of, run_cleanup
from ._ledger import StepLedger

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractAsyncContextManager
    from types import TracebackType

    import httpx
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from .._stores import ObjectStore
    from ._block import LiveTurn
    from ._chain import TurnProgress
    from ._ledger import StepEnd


logger = logging.getLogger("follower.step")


def live_source(endpoint: str | TaskSource | None) -> TaskSource:
    """How the turns' tasks are followed: an endpoint's cursor reads, or the source given.

    A ``str`` is a live-trajectory endpoint (cursor reads); a :class:`TaskSource`
    (``A2AAgent.task_source``) names its way. Its URL is checked; an
    :class:`~follower.AgentCardError` at once if there is none.

    ``A2AAgent.trajectory_endpoint`` is None for an agent whose card offers no live
    trajectory; taken as is, the step would store turns no reader can follow. Any
    other endpoint that cannot be sent is an :class:`~follower.InvalidArgumentError`.
    """
    if endpoint is None:
        raise AgentCardError(
            "the agent's card offers no live trajectory (no usable "
            "urn:agentenv:trajectory/v1 extension), so there is nothing to follow: check "
            "agent.trajectory_endpoint before following, or follow another agent"
        )
    if isinstance(endpoint, TaskSource):
        checked_endpoint(endpoint.url)
        return endpoint
    return TaskSource(Via.CURSOR, checked_endpoint(endpoint))


def following_live_trajectory(
    endpoint: str | TaskSource | None,
    store: ObjectStore,
    prefix_key: str,
    turn_id: str,
    *,
    poll_interval_seconds: float,
    previous_turn_id: str | None = None,
    drain_seconds: float = DEFAULT_DRAIN_SECONDS,
    client: httpx.AsyncClient | None = None,
    read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    resume: bool = False,
    max_follow_seconds: float | None = None,
    headers: Mapping[str, str] | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    writer_heartbeat_seconds: float = DEFAULT_WRITER_HEARTBEAT_SECONDS,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> AbstractAsyncContextManager[LiveTurn]:
    """Follow one turn's live trajectory for the duration of an ``async with`` block.

    Yields a :class:`LiveTurn`. When the body returns, the follower drains for at
    most ``drain_seconds``; when it raises or is cancelled, the follower is
    cancelled at once and the body's exception or cancel comes out as itself.
    Either way the turn's end mark (and the link from ``previous_turn_id``) is
    written, shielded and bounded, unless the turn was handed off.

    A turn the store already holds raises :class:`~follower.TurnExistsError`
    on entry, unless ``resume`` is true: then ``follow()`` of the same task
    continues after its last stored chunk, and another task's turn raises
    :class:`~follower.TurnConflictError`.

    ``max_follow_seconds`` bounds the follower's run from ``follow()`` (None: only
    the drain bounds it): past it, following ends and the body goes on; the
    end mark then says the turn is not complete.

    ``max_page_bytes`` caps one read's body and ``max_event_bytes`` one event (as
    compact JSON), as in :func:`~follower.lowlevel.follow_trajectory`: a page over either
    ends the turn's following with a typed error (logged), and is not stored.

    ``headers`` (a bearer token, say) are sent with every read, on top of the
    client's own: the way to reach an agent behind a token without building a
    client. They go only to ``endpoint``, never through a redirect, and are
    never logged.

    While the turn follows a task and is open, its writer stores a heartbeat
    every ``writer_heartbeat_seconds`` (default 10: 360 puts an hour), so that a reader
    can tell a writer that stopped without an end mark from one whose task is
    quiet (:class:`~follower.WriterGoneError`).

    With the ``otel`` extra, the turn and its follower are spans of the current
    trace, its follower's counts are metrics, and every read carries the trace
    context to the agent, on ``tracer_provider`` and ``meter_provider`` (default: the
    global ones; nothing is emitted while none is configured). docs/operating.md
    says what is emitted.
    """
    source = live_source(endpoint)
    options = FollowOptions(
        poll_interval_seconds=poll_interval_seconds,
        drain_seconds=drain_seconds,
        client=client,
        read_timeout_seconds=read_timeout_seconds,
        max_page_bytes=max_page_bytes,
        max_event_bytes=max_event_bytes,
        max_follow_seconds=max_follow_seconds,
        headers=headers,
        writer_heartbeat_seconds=writer_heartbeat_seconds,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    if previous_turn_id is not None:
        TurnKeys(prefix_key, previous_turn_id)  # refused now, not at the first link
    keys = TurnKeys(prefix_key, turn_id)
    ledger = StepLedger(previous_turn_id)
    return open_turn(source, store, keys, options=options, ledger=ledger, resume=resume)


@final
@attrs.define(eq=False, init=False, repr=False)  # no repr: the options hold headers
class LiveTurns:
    """A step's turns, linked in order: ``following(turn_id)`` for each, ``end()`` after.

    "Previous" is the last turn that followed a task: when a turn calls
    ``follow()``, the previous one's ``next.json`` is written to name it. As
    ``async with LiveTurns(...) as turns:``, the exit marks the last turn,
    whatever ended the step. It holds no client: each turn's follower leases
    its own lane and gives it back as it ends.

    ``resume=True`` continues turns the store already holds (a retried step);
    :meth:`hand_off` leaves every turn for the next attempt instead of ending it.
    ``max_follow_seconds`` bounds each turn's follower, ``max_page_bytes`` and
    ``max_event_bytes`` cap each read, ``headers`` go with each read, and each
    open turn stores a heartbeat every ``writer_heartbeat_seconds``, as in
    :func:`following_live_trajectory`.

    With the ``otel`` extra, ``async with`` makes the step a span, each turn and
    follower a span under it, and the followers' counts metrics, on
    ``tracer_provider`` and ``meter_provider`` (default: the global ones; nothing is
    emitted while none is configured).
    """

    source: TaskSource
    store: ObjectStore
    prefix_key: str
    resume: bool
    _options: FollowOptions
    _ledger: StepLedger = attrs.field(factory=StepLedger, init=False)
    _entered: bool = attrs.field(default=False, init=False)
    _span: SpanScope | None = attrs.field(default=None, init=False)
    # More for the step's span, from whoever runs the step (a Temporal attempt).
    _span_attributes: dict[str, str | int | bool] = attrs.field(factory=dict, init=False)
    _span_links: tuple[SpanLink, ...] = attrs.field(default=(), init=False)

    def __init__(
        self,
        endpoint: str | TaskSource | None,
        store: ObjectStore,
        prefix_key: str,
        *,
        poll_interval_seconds: float,
        drain_seconds: float = DEFAULT_DRAIN_SECONDS,
        client: httpx.AsyncClient | None = None,
        read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        resume: bool = False,
        max_follow_seconds: float | None = None,
        headers: Mapping[str, str] | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        writer_heartbeat_seconds: float = DEFAULT_WRITER_HEARTBEAT_SECONDS,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        source = live_source(endpoint)
        prefix_key = check_prefix(prefix_key)
        options = FollowOptions(
            poll_interval_seconds=poll_interval_seconds,
            drain_seconds=drain_seconds,
            client=client,
            read_timeout_seconds=read_timeout_seconds,
            max_page_bytes=max_page_bytes,
            max_event_bytes=max_event_bytes,
            max_follow_seconds=max_follow_seconds,
            headers=headers,
            writer_heartbeat_seconds=writer_heartbeat_seconds,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )
        self.__attrs_init__(source, store, prefix_key, resume, options)

    @property
    def endpoint(self) -> str:
        """Where the turns' tasks are read: the cursor read's endpoint, or the JSON-RPC URL."""
        return self.source.url

    def following(self, turn_id: str) -> AbstractAsyncContextManager[LiveTurn]:
        """The block of the next turn; yields a :class:`LiveTurn`."""
        self._ledger.check_opening(turn_id)
        block = open_turn(
            self.source,
            self.store,
            TurnKeys(self.prefix_key, turn_id),
            options=self._options,
            ledger=self._ledger,
            resume=self.resume,
        )
        self._ledger.opened(block)
        return block

    def _trace_step(
        self, attributes: Mapping[str, str | int | bool], links: tuple[SpanLink, ...]
    ) -> None:
        """Attributes and links for the step's span, on top of its own: before it is entered.

        Private: ``follower.temporal``'s attempt gives its attempt number and a link to
        the previous attempt's step span.
        """
        if self._entered:
            raise TurnStateError("the step's span is traced before LiveTurns is entered")
        self._span_attributes.update(attributes)
        self._span_links += links

    def _span_context(self) -> dict[str, str] | None:
        """The step span's ids (W3C hex), while it is open and records; else None."""
        return self._span.context_details() if self._span is not None else None

    def progress(self) -> tuple[TurnProgress, ...]:
        """Where each turn of the step stands now, in the order they were opened; read-only."""
        return tuple(turn.turn_progress() for turn in self._ledger.views)

    def statistics(self) -> LiveTurnsStatistics:
        """What the step's turns have done so far: each turn's snapshot, and their sums.

        Cheap and without I/O (an operator may poll it for thousands of
        followers); frozen, as trio's ``statistics()`` are.
        """
        turns = self._ledger.views
        # One clock reading for every turn, and none when no follower runs.
        now = anyio.current_time() if any(turn.running for turn in turns) else None
        return LiveTurnsStatistics.of_turns([turn.statistics(now) for turn in turns])

    def hand_off(self) -> None:
        """Leave this step's turns for a later attempt: no end marks, no null link.

        For a step that stops without ending its turns for good: a worker shutting
        down, or a failure that will be retried. Turns open now and later write no
        ``end.json``, and the exit writes no ``{"turn": null}``; everything stored
        stays, and the next attempt continues it with ``resume=True``.
        """
        self._ledger.hand_off()

    async def end(self) -> None:
        """Mark the last followed turn as the step's last: its ``next.json`` is null."""
        await self._end(None)

    async def _end(self, exc: BaseException | None) -> None:
        last = self._ledger.end(outcome_of(exc))
        if last is not None:
            await run_cleanup(lambda: self._mark_last(last), exc)

    async def _mark_last(self, last: StepEnd) -> None:
        extra = {"task_id": last.task_id, "turn_id": last.turn_id}
        keys = TurnKeys(self.prefix_key, last.turn_id)
        try:
            keys = await self._end_of_stored_chain(keys, last)
        except Exception:
            # A cleanup never replaces the step's outcome: log, and mark what we can.
            logger.exception(
                "turn %s: reading the stored chain past it failed", last.turn_id, extra=extra
            )
        if keys.turn_id != last.turn_id:
            extra = {"task_id": None, "turn_id": keys.turn_id}
        await bounded_cleanup(
            f"turn {keys.turn_id}: marking it last",
            lambda: write_next_turn(self.store, keys, None),
            extra=extra,
        )

    async def _end_of_stored_chain(self, keys: TurnKeys, last: StepEnd) -> TurnKeys:
        """The turn to mark last: past turns an earlier attempt linked on to, each ended here."""
        while (turn_id := last.past((await read_stored_turn(self.store, keys)).link)) is not None:
            keys = TurnKeys(self.prefix_key, turn_id)
            stored = await read_stored_turn(self.store, keys)
            mark = last.end_mark_past(stored)
            if mark is not None:
                sink = LiveTrajectoryChunks(
                    self.store,
                    self.prefix_key,
                    keys.turn_id,
                    stored_next=stored.contiguous_next,
                    format=stored.format,
                )
                await bounded_cleanup(
                    f"turn {keys.turn_id}: end mark",
                    partial(sink.end, mark.state, mark.complete),
                    extra={"task_id": None, "turn_id": keys.turn_id},
                )
        return keys

    async def __aenter__(self) -> LiveTurns:
        # No client is leased for the step: one shared by its turns would serve
        # turns that run at once on one lane. Each follower leases its own
        # (``follow_task``); a client kept warm between turns would save ~0.1 ms
        # of CPU a turn (docs/design.md, "Lanes"), not worth a slot held idle.
        if self._entered:
            raise TurnStateError("LiveTurns can be entered once")
        self._entered = True
        options = self._options
        telemetry = telemetry_for(options.tracer_provider, options.meter_provider)
        self._span = telemetry.span(
            STEP_SPAN,
            {AGENT_URL_ATTRIBUTE: agent_url(self.endpoint), **self._span_attributes},
            self._span_links,
        )
        try:
            await anyio.lowlevel.checkpoint()
        except BaseException as exc:
            self._end_span(exc)
            raise
        return self

    def _end_span(self, exc: BaseException | None) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        if span.recording:
            stats = self.statistics()
            span.set_attributes(
                {
                    TURNS_ATTRIBUTE: len(stats.turns),
                    EVENTS_ATTRIBUTE: stats.events_stored,
                    BYTES_ATTRIBUTE: stats.bytes_stored,
                    COMPLETE_ATTRIBUTE: stats.complete,
                }
            )
        span.end(None if exc is None else outcome_of(exc).value)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._end(exc)
        finally:
            self._end_span(exc)
