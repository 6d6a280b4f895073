"""The ways the reference agent can misbehave, as values a test sets and changes at run time."""

from __future__ import annotations

import enum
from typing import final

import attrs

from .._options import DEFAULT_MAX_PAGE_BYTES

# One byte over the library's default page cap: derived, so the two cannot part.
DEFAULT_OVERSIZED_BYTES = DEFAULT_MAX_PAGE_BYTES + 1
_PAGE_FIELDS = ("context_id", "task_id", "state", "format", "events", "next", "has_more")


class FaultKind(enum.Enum):
    """What the agent does wrong.

    ``CLOSE``, ``SILENT`` and ``GONE`` hit every request (card, A2A calls and
    trajectory reads); the others hit trajectory reads only.
    """

    CLOSE = "close"
    """Close every connection without answering."""
    SILENT = "silent"
    """Accept every request and never answer it."""
    UNAVAILABLE = "unavailable"
    """Answer reads with a 5xx, for some reads or some time, then be healthy."""
    NOT_JSON = "not-json"
    """Answer reads with a 200 whose body is not JSON."""
    NOT_AN_OBJECT = "not-an-object"
    """Answer reads with a JSON array holding the page."""
    MISSING_FIELD = "missing-field"
    """Answer reads with a page lacking one field."""
    UNKNOWN_STATE = "unknown-state"
    """Answer reads with a page whose state is none of the five."""
    CURSOR_MISMATCH = "cursor-mismatch"
    """Answer reads with a page whose ``next`` is not ``after + len(events)``."""
    OTHER_TASK = "other-task"
    """Answer reads with a page of another task."""
    NO_PROGRESS = "no-progress"
    """Answer reads with a page that claims more events but holds none."""
    OVERSIZED = "oversized"
    """Answer reads with a valid page padded to ``size_bytes``."""
    GONE = "gone"
    """Go away once a task has made ``after_events`` events: close every later connection."""
    RESTART = "restart"
    """Forget every task known so far (404 for them from then on)."""
    SLOW = "slow"
    """Take ``seconds`` to answer each read."""


def _optional_positive_int(_: object, attribute: attrs.Attribute[int | None], v: object) -> None:
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
        raise ValueError(f"{attribute.name} must be a positive int, not {v!r}")


def _optional_positive_float(
    _: object, attribute: attrs.Attribute[float | None], v: object
) -> None:
    if v is not None and (not isinstance(v, int | float) or isinstance(v, bool) or not v > 0):
        raise ValueError(f"{attribute.name} must be a positive number of seconds, not {v!r}")


@final
@attrs.frozen
class Fault:
    """One fault of the agent: a kind and the parameters that kind takes.

    Named constructors (``Fault.close()``, ``Fault.unavailable(reads=2)``...)
    read best; the plain constructor checks that only the kind's own
    parameters are given. Set one on a running agent with ``agent.fault = ...``.
    """

    kind: FaultKind = attrs.field(validator=attrs.validators.instance_of(FaultKind))
    reads: int | None = attrs.field(default=None, kw_only=True, validator=_optional_positive_int)
    seconds: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional_positive_float
    )
    status: int | None = attrs.field(default=None, kw_only=True)
    after_events: int | None = attrs.field(default=None, kw_only=True)
    field: str | None = attrs.field(default=None, kw_only=True)
    size_bytes: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional_positive_int
    )

    def __attrs_post_init__(self) -> None:
        given = {
            name
            for name in ("reads", "seconds", "status", "after_events", "field", "size_bytes")
            if getattr(self, name) is not None
        }
        allowed = _PARAMETERS.get(self.kind, frozenset())
        if not given <= allowed:
            raise ValueError(f"{self.kind.name} takes no {', '.join(sorted(given - allowed))}")
        if self.kind is FaultKind.UNAVAILABLE:
            if self.reads is not None and self.seconds is not None:
                raise ValueError("UNAVAILABLE takes reads or seconds, not both")
            if self.status is not None and not 500 <= self.status <= 599:
                raise ValueError(f"UNAVAILABLE answers a 5xx status, not {self.status}")
        if self.kind is FaultKind.SLOW and self.seconds is None:
            raise ValueError("SLOW needs seconds")
        if self.kind is FaultKind.GONE and (
            not isinstance(self.after_events, int) or self.after_events < 0
        ):
            raise ValueError("GONE needs after_events >= 0")
        if self.kind is FaultKind.MISSING_FIELD and self.field not in (None, *_PAGE_FIELDS):
            raise ValueError(f"a page has no field {self.field!r}; one of {_PAGE_FIELDS}")

    # --- named constructors ---------------------------------------------------------

    @classmethod
    def close(cls) -> Fault:
        """Close every connection without answering."""
        return cls(FaultKind.CLOSE)

    @classmethod
    def silent(cls) -> Fault:
        """Accept every request and never answer it."""
        return cls(FaultKind.SILENT)

    @classmethod
    def unavailable(
        cls, *, reads: int | None = None, seconds: float | None = None, status: int = 503
    ) -> Fault:
        """Answer ``status`` to the first ``reads`` reads, or for ``seconds`` from the
        first read it answers, or (neither given) to every read; then be healthy."""
        return cls(FaultKind.UNAVAILABLE, reads=reads, seconds=seconds, status=status)

    @classmethod
    def not_json(cls) -> Fault:
        return cls(FaultKind.NOT_JSON)

    @classmethod
    def not_an_object(cls) -> Fault:
        return cls(FaultKind.NOT_AN_OBJECT)

    @classmethod
    def missing_field(cls, field: str = "next") -> Fault:
        return cls(FaultKind.MISSING_FIELD, field=field)

    @classmethod
    def unknown_state(cls) -> Fault:
        return cls(FaultKind.UNKNOWN_STATE)

    @classmethod
    def cursor_mismatch(cls) -> Fault:
        return cls(FaultKind.CURSOR_MISMATCH)

    @classmethod
    def other_task(cls) -> Fault:
        return cls(FaultKind.OTHER_TASK)

    @classmethod
    def no_progress(cls) -> Fault:
        return cls(FaultKind.NO_PROGRESS)

    @classmethod
    def oversized(cls, size_bytes: int = DEFAULT_OVERSIZED_BYTES) -> Fault:
        """A valid page padded to ``size_bytes`` (by default just over the library's cap)."""
        return cls(FaultKind.OVERSIZED, size_bytes=size_bytes)

    @classmethod
    def gone(cls, after_events: int) -> Fault:
        """Go away at the moment a task would make its event number ``after_events``
        (counting from 0): every later request gets a closed connection."""
        return cls(FaultKind.GONE, after_events=after_events)

    @classmethod
    def restart(cls) -> Fault:
        """Forget every task known so far; tasks sent afterwards are served as usual."""
        return cls(FaultKind.RESTART)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Take ``seconds`` to answer each read."""
        return cls(FaultKind.SLOW, seconds=seconds)


_PARAMETERS = {
    FaultKind.UNAVAILABLE: frozenset({"reads", "seconds", "status"}),
    FaultKind.MISSING_FIELD: frozenset({"field"}),
    FaultKind.OVERSIZED: frozenset({"size_bytes"}),
    FaultKind.GONE: frozenset({"after_events"}),
    FaultKind.SLOW: frozenset({"seconds"}),
}
