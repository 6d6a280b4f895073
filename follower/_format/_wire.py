"""The trajectory extension's wire types: states, validated pages, batches.

Sync and free of I/O: the HTTP reader builds a :class:`Page` from the bytes it
read, and everything past it works with validated values only.
"""

from __future__ import annotations

import enum
import json
from typing import Any, NamedTuple, TypedDict, final

import attrs

from .._errors import MalformedPageError, MalformedPageReason
from .._options import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_PAGE_BYTES
from ._nesting import MAX_JSON_DEPTH, decoded_bytes_estimate, nests_too_deep

TRAJECTORY_EXTENSION_URI = "urn:agentenv:trajectory/v1"
# The agent returns at most this many events a read (docs/protocol.md, "The cursor read").
MAX_PAGE_EVENTS = 1000
# A body over this size may decode to many small values: its decoded size is estimated
# first (a pass at C speed) and refused past DECODED_PAGE_FACTOR x max_page_bytes.
# Below it, decoding takes under a millisecond and little memory whatever the shape.
LARGE_PAGE_BYTES = 128 * 1024
DECODED_PAGE_FACTOR = 8
# Events measured as they would be stored: compact JSON, as the chunk encoder writes them.
_EVENT_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class TrajectoryState(enum.StrEnum):
    """The state of a task's trajectory; values are the wire strings."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @classmethod
    def from_task_state(cls, state: str | TrajectoryState) -> TrajectoryState:
        """Map the A2A state a task ended in to the end mark's state.

        Case-insensitive; ``completed``, ``canceled`` or ``cancelled``; anything
        else (``failed``, ``rejected``, ``auth-required``...) means failed.
        """
        if isinstance(state, TrajectoryState):
            return state if state.is_terminal else cls.FAILED
        word = str(state).strip().lower()
        if word == "completed":
            return cls.COMPLETED
        if word in ("canceled", "cancelled"):
            return cls.CANCELED
        return cls.FAILED


class NumberRefused(ValueError):
    """A number JSON cannot carry exactly, met while decoding (the decoder's hooks raise it)."""


def refuse_constant(name: str) -> Any:
    """``parse_constant`` for ``json.loads``: ``NaN``, ``Infinity``, ``-Infinity`` are not JSON."""
    raise NumberRefused(f"{name} is not a JSON number")


def finite_float(text: str) -> float:
    """``parse_float`` for ``json.loads``: a float past the double range would become infinite.

    Called only for numbers with a fraction or an exponent; integers keep the fast path.
    """
    value = float(text)
    if value - value:  # inf - inf is NaN, which is true; a finite float gives 0.0
        raise NumberRefused(f"{text[:40]} is out of the range of a double (it would be {value})")
    return value


# The number rule's decoder, made once: json.loads with hooks builds a new decoder and
# scanner on every call, a third of what decoding a one-event page costs.
_STRICT_DECODER = json.JSONDecoder(parse_constant=refuse_constant, parse_float=finite_float)
decode_strict_json = _STRICT_DECODER.decode
"""Decode one JSON text (a ``str``) under the number rule: ``NaN``, ``Infinity`` and
floats past the double range raise :class:`NumberRefused`; other faults ``ValueError``."""


def loads_strict_json(document: bytes | str) -> Any:
    """``json.loads`` of a page's body under the number rule, with the shared decoder.

    Bytes are decoded as ``json.loads`` decodes them (UTF-8, or UTF-16/32 by its
    byte-order detection, lone surrogates kept for the decoder to judge).
    """
    if isinstance(document, bytes):
        document = document.decode(json.detect_encoding(document), "surrogatepass")
    elif document.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", document, 0)
    return decode_strict_json(document)


_TERMINAL = frozenset({TrajectoryState.COMPLETED, TrajectoryState.FAILED, TrajectoryState.CANCELED})


def _events_tuple(events: Any) -> tuple[Any, ...]:
    return tuple(events)


@final
@attrs.frozen
class TrajectoryBatch:
    """One page of events handed to a sink: events ``after`` .. ``next - 1``.

    ``last`` is true on the final page: the state is terminal and the agent has
    no more events, so every event of the task has been read.
    """

    after: int = attrs.field(validator=attrs.validators.ge(0))
    next: int = attrs.field()
    events: tuple[Any, ...] = attrs.field(converter=_events_tuple)
    format: str | None
    state: TrajectoryState
    last: bool
    wire_bytes: int = attrs.field(default=0, eq=False, repr=False, kw_only=True)
    """The size of the page's body as read (0 when unknown): a sink encodes a large one
    off the event loop. Not part of the batch's value."""

    @next.validator
    def _check_next(self, _attribute: attrs.Attribute[int], value: int) -> None:
        if value != self.after + len(self.events):
            raise ValueError(f"next={value} but after={self.after} + {len(self.events)} events")


@final
@attrs.frozen
class Page:
    """A validated answer to one cursor read."""

    task_id: str
    context_id: str | None
    state: TrajectoryState
    format: str | None
    after: int
    events: tuple[Any, ...]
    next: int
    has_more: bool
    body_bytes: int = attrs.field(default=0, eq=False, repr=False, kw_only=True)

    @property
    def last(self) -> bool:
        """Terminal and nothing more to read: every event has been read."""
        return self.state.is_terminal and not self.has_more

    def to_batch(self) -> TrajectoryBatch:
        return TrajectoryBatch(
            after=self.after,
            next=self.next,
            events=self.events,
            format=self.format,
            state=self.state,
            last=self.last,
            wire_bytes=self.body_bytes,
        )

    @classmethod
    def from_json(
        cls,
        body: bytes | str,
        *,
        task_id: str,
        after: int,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> Page:
        """Parse and validate the answer to a read of ``task_id`` from ``after``.

        Raises :class:`~follower.MalformedPageError`, whose ``reason`` names what is wrong.
        Measured before decoding: the nesting depth, and, for a large body, the
        size it would decode to (within ``DECODED_PAGE_FACTOR`` x ``max_page_bytes``).
        Numbers must be ones JSON carries exactly (docs/protocol.md, "Numbers").
        Sync and CPU-bound: the reader runs it in a worker thread for a large body.
        """
        data_bytes = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
        where = f"page for task {task_id!r} at after={after}"
        if nests_too_deep(data_bytes):
            raise MalformedPageError(
                f"{where} nests deeper than {MAX_JSON_DEPTH} levels",
                task_id=task_id,
                after=after,
                reason=MalformedPageReason.TOO_DEEP,
            )
        if len(data_bytes) > LARGE_PAGE_BYTES:
            estimate = decoded_bytes_estimate(data_bytes)
            if estimate > DECODED_PAGE_FACTOR * max_page_bytes:
                raise MalformedPageError(
                    f"{where} would decode to about {estimate} bytes, over "
                    f"{DECODED_PAGE_FACTOR} x the {max_page_bytes}-byte cap; not decoded",
                    task_id=task_id,
                    after=after,
                    reason=MalformedPageReason.TOO_LARGE,
                )
        try:
            data = loads_strict_json(body)
        except NumberRefused as exc:
            raise MalformedPageError(
                f"{where}: {exc}",
                task_id=task_id,
                after=after,
                reason=MalformedPageReason.BAD_NUMBER,
            ) from None
        except ValueError as exc:
            if "integer string conversion" in str(exc):  # over sys.get_int_max_str_digits()
                raise MalformedPageError(
                    f"{where} holds an integer of more digits than Python converts exactly",
                    task_id=task_id,
                    after=after,
                    reason=MalformedPageReason.BAD_NUMBER,
                ) from None
            raise MalformedPageError(
                f"{where} is not JSON: {exc}",
                task_id=task_id,
                after=after,
                reason=MalformedPageReason.NOT_AN_OBJECT,
            ) from exc
        except RecursionError as exc:  # pragma: no cover - measured above; kept as a last guard
            raise MalformedPageError(
                f"{where} is not JSON: {exc}",
                task_id=task_id,
                after=after,
                reason=MalformedPageReason.NOT_AN_OBJECT,
            ) from exc
        page = cls.from_object(data, task_id=task_id, after=after, body_bytes=len(data_bytes))
        if len(data_bytes) > max_event_bytes:  # only then can one event be over the cap
            _check_event_sizes(page.events, max_event_bytes, task_id, after)
        return page

    @classmethod
    def from_object(cls, data: Any, *, task_id: str, after: int, body_bytes: int = 0) -> Page:
        """Validate an already-decoded JSON value as a page (``body_bytes`` long as read)."""
        read = _Read(task_id, after)
        if not isinstance(data, dict):
            raise MalformedPageError(
                f"{read} is a JSON {type(data).__name__}, not an object",
                **read.context,
                reason=MalformedPageReason.NOT_AN_OBJECT,
            )
        got_task = _field(data, "task_id", str, read)
        if got_task != task_id:
            raise MalformedPageError(
                f"asked for task {task_id!r} at after={after}, got a page of task {got_task!r}",
                **read.context,
                reason=MalformedPageReason.TASK_MISMATCH,
            )
        context_id = _field(data, "context_id", str, read, nullable=True, required=False)
        raw_state = _field(data, "state", str, read)
        try:
            state = TrajectoryState(raw_state)
        except ValueError:
            raise MalformedPageError(
                f"{read} has unknown state {raw_state!r:.100}",
                **read.context,
                reason=MalformedPageReason.UNKNOWN_STATE,
            ) from None
        fmt = _field(data, "format", str, read, nullable=True, required=False)
        events = _field(data, "events", list, read)
        if len(events) > MAX_PAGE_EVENTS:
            raise MalformedPageError(
                f"{read} holds {len(events)} events, "
                f"over the {MAX_PAGE_EVENTS} an agent may send in one page",
                **read.context,
                reason=MalformedPageReason.TOO_MANY_EVENTS,
            )
        nxt = _field(data, "next", int, read)
        has_more = _field(data, "has_more", bool, read)
        if nxt != after + len(events):
            raise MalformedPageError(
                f"page for task {task_id!r} read after={after} with {len(events)} events "
                f"but says next={nxt}",
                **read.context,
                reason=MalformedPageReason.CURSOR_MISMATCH,
            )
        if has_more and not events:
            raise MalformedPageError(
                f"{read} claims more events but has none",
                **read.context,
                reason=MalformedPageReason.NO_PROGRESS,
            )
        return cls(
            task_id=got_task,
            context_id=context_id,
            state=state,
            format=fmt,
            after=after,
            events=tuple(events),
            next=nxt,
            has_more=has_more,
            body_bytes=body_bytes,
        )


def _check_event_sizes(events: tuple[Any, ...], limit: int, task_id: str, after: int) -> None:
    encode = _EVENT_ENCODER.encode
    for index, event in enumerate(events):
        size = len(encode(event))
        if size > limit:
            raise MalformedPageError(
                f"page for task {task_id!r} at after={after}: event {after + index} is "
                f"{size} bytes of JSON, "
                f"over the {limit}-byte cap (max_event_bytes)",
                task_id=task_id,
                after=after,
                reason=MalformedPageReason.EVENT_TOO_LARGE,
            )


class _Read(NamedTuple):
    """The read a page answers: what its errors name, in their message and attributes."""

    task_id: str
    after: int

    def __str__(self) -> str:
        return f"page for task {self.task_id!r} at after={self.after}"

    @property
    def context(self) -> _PageContext:
        return {"task_id": self.task_id, "after": self.after}


class _PageContext(TypedDict):
    task_id: str
    after: int


def _field(
    data: dict[str, Any],
    name: str,
    kind: type,
    read: _Read,
    *,
    nullable: bool = False,
    required: bool = True,
) -> Any:
    if name not in data:
        if required:
            raise MalformedPageError(
                f"{read} has no {name!r} field",
                **read.context,
                reason=MalformedPageReason.BAD_FIELD,
            )
        return None
    value = data[name]
    if value is None and nullable:
        return None
    # JSON true/false decode to bool, a subclass of int: an int field must not take them.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedPageError(
            f"{read}: field {name!r} is a {type(value).__name__}, expected {kind.__name__}",
            **read.context,
            reason=MalformedPageReason.BAD_FIELD,
        )
    if isinstance(value, int) and value < 0:
        raise MalformedPageError(
            f"{read}: field {name!r} is negative: {value}",
            **read.context,
            reason=MalformedPageReason.BAD_FIELD,
        )
    return value
