"""OpenTelemetry: a step's spans, its followers' metrics, and the trace context sent to the agent.

The one module that imports ``opentelemetry`` (the API only, the ``otel`` extra), and
only once something asks for it. The rest of the library calls small hooks:

- the step (``_turns._step``) and each turn's block (``_turns._block``) open a span
  with :meth:`Telemetry.span`; the block wraps its follower in :meth:`Telemetry.following`,
  which opens the follower's span (a child of the turn's: anyio copies the context into the
  follower's task), keeps it where the step's metrics read it, and sets its
  :class:`ReadObserver` on the follower's record;
- the read loops call the record's observer, when there is one, with each read's
  latency and each scheduled read's lateness (the histograms);
- the HTTP layer passes every request's fields through :func:`with_trace_context`
  (``traceparent``/``tracestate`` from the current context, so the agent's spans join
  the step's trace);
- a run of failures (``_retries.FailureStreak``) notes what it logs on the current span
  with :func:`note_on_span`: one event a run and one summary, never one a failed read.

Without the extra, or with no provider configured (the API's default), a step gets
:data:`OFF`: its hooks do nothing, and the read path checks one attribute for ``None``.
The counters are not counted a second time: they are observed, at each collection, from
the same records ``statistics()`` reads (the live followers', and the totals of those
that ended), so the two always agree.

Nothing here may change a step's outcome: a span is ended however its block ends, and
telemetry's own failures are the SDK's to log.
"""

from __future__ import annotations

import re
import threading
import weakref
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import attrs

from ._redact import scrub

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
    from opentelemetry.trace import Span

    from ._statistics import LiveTurnStatistics

INSTRUMENTATION_NAME = "follower"
# Span names. The turn's is GenAI's operation (semantic conventions): a turn is one
# agent invoked and its task followed.
STEP_SPAN = "follower.step"
TURN_SPAN = "invoke_agent"
FOLLOWER_SPAN = "follower.follow"
# A long span is exported only when it ends: this short child, ended at once, shows it began.
START_SPAN = "follower.start"
FAILURES_EVENT = "follower.failures"

# Span attributes.
OPERATION_ATTRIBUTE = "gen_ai.operation.name"
TURN_ID_ATTRIBUTE = "follower.turn.id"
TASK_ID_ATTRIBUTE = "follower.task.id"
AGENT_URL_ATTRIBUTE = "follower.agent.url"
VIA_ATTRIBUTE = "follower.via"
OUTCOME_ATTRIBUTE = "follower.outcome"
STOP_REASON_ATTRIBUTE = "follower.stop_reason"
STATE_ATTRIBUTE = "follower.state"
COMPLETE_ATTRIBUTE = "follower.complete"
READS_ATTRIBUTE = "follower.reads"
FAILED_READS_ATTRIBUTE = "follower.failed_reads"
EVENTS_ATTRIBUTE = "follower.events_stored"
BYTES_ATTRIBUTE = "follower.bytes_stored"
TURNS_ATTRIBUTE = "follower.turns"
ATTEMPT_ATTRIBUTE = "follower.attempt"
"""The step span's Temporal attempt (``activity.info().attempt``: 1 for the first)."""

# A link's attribute: what the linked span is to this one.
LINK_ATTRIBUTE = "follower.link"
PREVIOUS_ATTEMPT = "previous_attempt"

# Metric instruments: (name, unit, description). Their only attribute is the way of
# following (cursor|stream|poll): bounded, never a task or a turn id.
READS_METRIC = "follower.reads"
FAILED_READS_METRIC = "follower.reads.failed"
POOL_WAITS_METRIC = "follower.pool_waits"
PAGES_METRIC = "follower.pages.stored"
EVENTS_METRIC = "follower.events.stored"
BYTES_METRIC = "follower.bytes.stored"
RECONNECTS_METRIC = "follower.reconnects"
ALIVE_METRIC = "follower.followers.alive"
READ_DURATION_METRIC = "follower.read.duration"
POLL_LAG_METRIC = "follower.poll.lag"

# Why a follower stopped (its span's attribute): a word for each of run_follower's endings.
STOP_REASONS: Final = {
    "it ended": "ended",
    "it was cancelled": "cancelled",
    "an error ended it": "error",
}


class ReadObserver(Protocol):
    """What a follower's loop tells telemetry of each read; set on its record when measured."""

    def read_took(self, seconds: float) -> None:
        """A read (a cursor read, a poll, a stream's head) took ``seconds``, answered or not."""

    def woke_late(self, seconds: float) -> None:
        """A scheduled read began ``seconds`` after it was due (the poll lag)."""


class _Progress(Protocol):
    """The follower's record, as far as telemetry reads it (``_reading._record.FollowProgress``)."""

    observer: ReadObserver | None
    reconnects: int
    ending: str | None


# --- the API, imported once, when first asked for ----------------------------------------

_api: _Api | None = None
_tried = False


@final
class _Api:
    """The opentelemetry modules this one uses (imported only when the extra is installed)."""

    def __init__(self) -> None:
        from opentelemetry import context, metrics, propagate, trace
        from opentelemetry.metrics import NoOpMeterProvider

        unset_meters: tuple[type, ...] = (NoOpMeterProvider,)
        try:  # the API's stand-in until an application sets a provider (no public name)
            from opentelemetry.metrics._internal import _ProxyMeterProvider
        except ImportError:  # pragma: no cover (another API's layout: only NoOp counts)
            pass
        else:
            unset_meters += (_ProxyMeterProvider,)
        self.context = context
        self.get_current = context.get_current
        self.inject = propagate.inject
        self.trace = trace
        self.metrics = metrics
        self.unset_tracers = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self.unset_meters = unset_meters


def _loaded() -> _Api | None:
    global _api, _tried
    if not _tried:
        _tried = True
        try:
            _api = _Api()
        except ImportError:
            _api = None
    return _api


def available() -> bool:
    """Whether the ``otel`` extra (``opentelemetry-api``) is installed."""
    return _loaded() is not None


# --- trace context to the agent ------------------------------------------------------------


_traced_fields: ContextVar[tuple[object, dict[str, str], dict[str, str]]] = ContextVar(
    "follower_traced_fields"
)


def with_trace_context(fields: dict[str, str]) -> dict[str, str]:
    """``fields`` with the current context's ``traceparent`` and ``tracestate``, if there is one.

    Used by every request the library sends an agent (a cursor read, a stream, a
    JSON-RPC call), so the agent's own spans join the step's trace. With nothing in
    the current context (no span, no baggage) the fields are returned as they are, so
    the check costs two calls. The fields are never logged.
    """
    api = _api if _tried else _loaded()
    if api is None:
        return fields
    current = api.get_current()
    if not current:
        return fields
    # A follower reads in one context, with one set of fields, read after read: the
    # fields made for them are kept (in the task's own context), so the propagators run
    # once a follower, and the client, which merges its headers once per dict it is
    # given, sees the same dict each read.
    kept = _traced_fields.get(None)
    if kept is not None and kept[0] is current and kept[1] is fields:
        return kept[2]
    carrier = dict(fields)
    api.inject(carrier, context=current)
    _traced_fields.set((current, fields, carrier))
    return carrier


def note_on_span(name: str, attributes: Mapping[str, str | int | float]) -> None:
    """Add an event to the current span, if one records: what a run of failures logs."""
    api = _api if _tried else _loaded()
    if api is None:
        return
    span = api.trace.get_current_span()
    if span.is_recording():
        span.add_event(name, attributes)


# --- a step's telemetry --------------------------------------------------------------------


class Telemetry:
    """What a step (or a lone turn) emits: its tracer's spans and its meters' instruments.

    :data:`OFF` when neither has a provider: every hook then does nothing.
    """

    def __init__(self, tracer: Any = None, meters: _Meters | None = None) -> None:
        self._tracer = tracer
        self._meters = meters

    @property
    def on(self) -> bool:
        return self._tracer is not None or self._meters is not None

    def span(
        self,
        name: str,
        attributes: Mapping[str, str | int | bool],
        links: Sequence[SpanLink] = (),
    ) -> SpanScope:
        """Start ``name`` as the current span, and show at once that it began.

        ``links``: earlier spans it is linked to (a retried attempt's step, to the
        previous attempt's).
        """
        if self._tracer is None:
            return _NO_SPAN
        api = _api
        assert api is not None
        span = self._tracer.start_span(
            name, attributes=attributes, links=[link.made(api) for link in links]
        )
        token = api.context.attach(api.trace.set_span_in_context(span))
        # Exported as it ends, at once: a long turn is seen before it ends.
        self._tracer.start_span(START_SPAN, attributes=attributes).end()
        return SpanScope(span, token)

    def following(
        self,
        *,
        via: str,
        task_id: str,
        turn_id: str,
        url: str,
        progress: _Progress,
        statistics: Callable[[], LiveTurnStatistics],
    ) -> AbstractContextManager[SpanScope]:
        """The follower's span (current inside), its record observed, and its counts metered.

        Untraced and unmetered, one shared block that does nothing: a follower
        keeps its block for as long as it runs, with thousands in a process.
        """
        if not self.on:
            return _UNTRACED
        return self._following(via, task_id, turn_id, url, progress, statistics)

    @contextmanager
    def _following(
        self,
        via: str,
        task_id: str,
        turn_id: str,
        url: str,
        progress: _Progress,
        statistics: Callable[[], LiveTurnStatistics],
    ) -> Iterator[SpanScope]:
        meters = self._meters
        if meters is not None:
            progress.observer = meters.observer(via)
            watched = meters.watch(via, progress, statistics)
        scope = self.span(
            FOLLOWER_SPAN,
            {
                VIA_ATTRIBUTE: via,
                TASK_ID_ATTRIBUTE: task_id,
                TURN_ID_ATTRIBUTE: turn_id,
                AGENT_URL_ATTRIBUTE: agent_url(url),
            },
        )
        try:
            yield scope
        finally:
            try:
                if scope.recording:
                    scope.set_attributes(follower_attributes(statistics(), progress))
                scope.end(None)
            finally:
                if meters is not None:
                    meters.unwatch(watched)


def follower_attributes(
    stats: LiveTurnStatistics, progress: _Progress
) -> dict[str, str | int | bool]:
    ending = progress.ending or "it ended"
    attributes: dict[str, str | int | bool] = {
        READS_ATTRIBUTE: stats.reads,
        FAILED_READS_ATTRIBUTE: stats.failed_reads,
        EVENTS_ATTRIBUTE: stats.events_stored,
        BYTES_ATTRIBUTE: stats.bytes_stored,
        COMPLETE_ATTRIBUTE: stats.complete,
        STOP_REASON_ATTRIBUTE: stop_reason(ending),
    }
    state = getattr(progress, "state", None)
    if state is not None:
        attributes[STATE_ATTRIBUTE] = str(state)
    return attributes


def stop_reason(ending: str) -> str:
    """A bounded word for one of ``run_follower``'s endings."""
    if ending in STOP_REASONS:
        return STOP_REASONS[ending]
    if ending.startswith("it ran for max_follow_seconds"):
        return "max_follow_seconds"
    if ending.endswith("failed after stop"):
        return "failed_after_stop"
    return "other"


def agent_url(url: str) -> str:
    """The agent's URL as an attribute: never a password, nor a query's secrets."""
    return scrub(url.split("?", 1)[0])


class SpanScope:
    """A started span made current; :meth:`end` ends it and restores the context before it."""

    def __init__(self, span: Span | None, token: Any) -> None:
        self._span = span
        self._token = token

    @property
    def recording(self) -> bool:
        return self._span is not None and self._span.is_recording()

    @property
    def span(self) -> Span | None:
        return self._span

    def context_details(self) -> dict[str, str] | None:
        """The span's ids as W3C hex strings, JSON-able; None unless it records.

        What a Temporal attempt's heartbeats carry, so the next attempt links to it
        (:func:`previous_attempt_link`).
        """
        span = self._span
        if span is None or not span.is_recording():
            return None
        context = span.get_span_context()
        if not context.is_valid:
            return None
        return {
            "trace_id": format(context.trace_id, "032x"),
            "span_id": format(context.span_id, "016x"),
            "trace_flags": format(context.trace_flags, "02x"),
        }

    def set_attributes(self, attributes: Mapping[str, str | int | bool]) -> None:
        if self._span is not None:
            self._span.set_attributes(attributes)

    def failed(self, kind: str, detail: str) -> None:
        """Record a failure (its type and our own words of it, never an agent's body)."""
        if self._span is None:
            return
        api = _api
        assert api is not None
        self._span.add_event("exception", {"exception.type": kind, "exception.message": detail})
        self._span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, f"{kind}: {detail}"))

    def end(self, outcome: str | None) -> None:
        """End the span; an ``outcome`` (``raised``, ``stopped``) sets its status to an error."""
        span, self._span = self._span, None
        if span is None:
            return
        api = _api
        assert api is not None
        try:
            if outcome is not None:
                span.set_attribute(OUTCOME_ATTRIBUTE, outcome)
                span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, outcome))
            else:
                span.set_attribute(OUTCOME_ATTRIBUTE, "returned")
            span.end()
        finally:
            # Detached in the task that attached it: the block's enter and exit run in
            # the step's task. A context left another way is the API's to log, not to raise.
            api.context.detach(self._token)


_NO_SPAN: Final = SpanScope(None, None)
_UNTRACED: Final = nullcontext(_NO_SPAN)
OFF: Final = Telemetry()


# --- links to earlier spans ----------------------------------------------------------------

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_TRACE_FLAGS = re.compile(r"[0-9a-f]{2}")


@final
@attrs.frozen
class SpanLink:
    """A link to an earlier span, by its ids: read without opentelemetry, made with it."""

    trace_id: int
    span_id: int
    trace_flags: int
    attributes: tuple[tuple[str, str], ...]

    def made(self, api: _Api) -> Any:
        """The API's ``Link``, to the span as a remote one (it was made in another process)."""
        trace = api.trace
        context = trace.SpanContext(
            self.trace_id,
            self.span_id,
            is_remote=True,
            trace_flags=trace.TraceFlags(self.trace_flags),
        )
        return trace.Link(context, dict(self.attributes))


def previous_attempt_link(details: object) -> SpanLink | None:
    """The link to the previous attempt's step span, from what its heartbeats carried.

    ``details`` is :meth:`SpanScope.context_details` as a heartbeat carried it (JSON
    read back); None for anything else: details of a version that carried none,
    malformed ones, or the W3C invalid ids (all zeros). Without ``trace_flags`` the
    link's are the default (not sampled).
    """
    if not isinstance(details, dict):
        return None
    trace_id, span_id = details.get("trace_id"), details.get("span_id")
    flags = details.get("trace_flags", "00")
    if not (
        isinstance(trace_id, str)
        and isinstance(span_id, str)
        and isinstance(flags, str)
        and _TRACE_ID.fullmatch(trace_id)
        and _SPAN_ID.fullmatch(span_id)
        and _TRACE_FLAGS.fullmatch(flags)
    ):
        return None
    link = SpanLink(
        int(trace_id, 16),
        int(span_id, 16),
        int(flags, 16),
        ((LINK_ATTRIBUTE, PREVIOUS_ATTEMPT),),
    )
    if not (link.trace_id and link.span_id):
        return None
    return link


def telemetry_for(tracer_provider: Any, meter_provider: Any) -> Telemetry:
    """A step's telemetry: the providers given, else the global ones; :data:`OFF` if none is set."""
    if tracer_provider is None and meter_provider is None:
        api = _loaded()
        if api is None:
            return OFF
    else:
        api = _loaded()
        assert api is not None, "a provider was given, so opentelemetry is installed"
    tracers = tracer_provider if tracer_provider is not None else api.trace.get_tracer_provider()
    meter_source = (
        meter_provider if meter_provider is not None else api.metrics.get_meter_provider()
    )
    tracer = None
    if not isinstance(tracers, api.unset_tracers):
        tracer = tracers.get_tracer(INSTRUMENTATION_NAME)
    meters = None if isinstance(meter_source, api.unset_meters) else _meters_of(meter_source)
    if tracer is None and meters is None:
        return OFF
    return Telemetry(tracer, meters)


# --- metrics -------------------------------------------------------------------------------

_COUNTED = ("reads", "failed_reads", "pool_waits", "pages_stored", "events_stored", "bytes_stored")
_meters_by_provider: weakref.WeakKeyDictionary[Any, _Meters] = weakref.WeakKeyDictionary()
_meters_lock = threading.Lock()


def _meters_of(provider: MeterProvider) -> _Meters:
    # Instruments are made once a provider: a second set would report its counts twice.
    with _meters_lock:
        meters = _meters_by_provider.get(provider)
        if meters is None:
            meters = _meters_by_provider[provider] = _Meters(provider)
        return meters


@attrs.define(eq=False)
class _Watched:
    via: str
    progress: _Progress
    statistics: Callable[[], LiveTurnStatistics]


@final
class _Meters:
    """One meter provider's instruments, and the followers whose counts they observe.

    A collection (maybe on the reader's thread) sums the live followers' statistics
    and the totals of those that ended, by way of following: cumulative, as a
    counter's value must be, and equal to what ``statistics()`` says.
    """

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter(INSTRUMENTATION_NAME)
        self._lock = threading.Lock()
        self._live: set[_Watched] = set()
        self._ended: dict[str, dict[str, int]] = {}
        counters = (
            (READS_METRIC, "reads", "{read}", "Reads sent to agents, answered or not."),
            (FAILED_READS_METRIC, "failed_reads", "{read}", "Reads that brought no valid page."),
            (POOL_WAITS_METRIC, "pool_waits", "{read}", "Reads that found our own pool full."),
            (PAGES_METRIC, "pages_stored", "{page}", "Pages stored as chunks."),
            (EVENTS_METRIC, "events_stored", "{event}", "Events stored."),
            (BYTES_METRIC, "bytes_stored", "By", "Bytes of the chunks stored."),
            (RECONNECTS_METRIC, "reconnects", "{stream}", "Streams opened again after a loss."),
        )
        for name, field, unit, description in counters:
            meter.create_observable_counter(
                name, callbacks=[self._observing(field)], unit=unit, description=description
            )
        meter.create_observable_up_down_counter(
            ALIVE_METRIC,
            callbacks=[self._alive],
            unit="{follower}",
            description="Followers running now.",
        )
        self.read_duration = meter.create_histogram(
            READ_DURATION_METRIC,
            unit="s",
            description="How long a read (a cursor read, a poll, a stream's head) took.",
        )
        self.poll_lag = meter.create_histogram(
            POLL_LAG_METRIC,
            unit="s",
            description="How much later than due a scheduled read began.",
        )
        self._observers: dict[str, _Observer] = {}

    def observer(self, via: str) -> _Observer:
        observer = self._observers.get(via)
        if observer is None:
            observer = self._observers[via] = _Observer(self, {VIA_ATTRIBUTE: via})
        return observer

    def watch(
        self, via: str, progress: _Progress, statistics: Callable[[], LiveTurnStatistics]
    ) -> _Watched:
        watched = _Watched(via, progress, statistics)
        with self._lock:
            self._live.add(watched)
        return watched

    def unwatch(self, watched: _Watched) -> None:
        counts = _counts(watched)
        with self._lock:
            totals = self._ended.setdefault(watched.via, dict.fromkeys(counts, 0))
            for field, value in counts.items():
                totals[field] += value
            self._live.discard(watched)

    def _sums(self) -> dict[str, dict[str, int]]:
        with self._lock:
            live = list(self._live)
            sums = {via: dict(totals) for via, totals in self._ended.items()}
        for watched in live:
            counts = _counts(watched)
            into = sums.setdefault(watched.via, dict.fromkeys(counts, 0))
            for field, value in counts.items():
                into[field] += value
        return sums

    def _observing(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            api = _api
            assert api is not None
            return [
                api.metrics.Observation(counts[field], {VIA_ATTRIBUTE: via})
                for via, counts in sorted(self._sums().items())
            ]

        return observe

    def _alive(self, options: CallbackOptions) -> Iterable[Observation]:
        api = _api
        assert api is not None
        with self._lock:
            live = list(self._live)
            vias = set(self._ended)
        alive = dict.fromkeys(vias | {w.via for w in live}, 0)
        for watched in live:
            alive[watched.via] += watched.statistics().followers_alive
        return [
            api.metrics.Observation(n, {VIA_ATTRIBUTE: via}) for via, n in sorted(alive.items())
        ]


def _counts(watched: _Watched) -> dict[str, int]:
    stats = watched.statistics()
    counts = {field: getattr(stats, field) for field in _COUNTED}
    counts["reconnects"] = watched.progress.reconnects
    return counts


@final
class _Observer:
    """A way's histograms, fed by its followers' loops (:class:`ReadObserver`)."""

    def __init__(self, meters: _Meters, attributes: dict[str, str]) -> None:
        self._read = meters.read_duration.record
        self._lag = meters.poll_lag.record
        self._attributes = attributes

    def read_took(self, seconds: float) -> None:
        self._read(seconds, self._attributes)

    def woke_late(self, seconds: float) -> None:
        self._lag(seconds, self._attributes)
