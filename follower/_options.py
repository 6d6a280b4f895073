"""The read path's options, validated once, when the caller names them.

Public functions keep their keyword options and build a :class:`FollowOptions`;
everything below them passes the value, so a new option is one field here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from ._errors import InvalidArgumentError

if TYPE_CHECKING:
    import httpx
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

DEFAULT_READ_TIMEOUT_SECONDS = 30.0
# The agent sends about 4 MiB a read (but the first event whatever its size): four
# times that leaves room, and with the events cap a page decodes in a worker thread in
# well under a second. 64 MiB let one page hold 33 M tiny events.
DEFAULT_MAX_PAGE_BYTES = 16 * 1024 * 1024
# One event, as compact JSON: half a page, so a page at the cap holds at least two.
DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024
DEFAULT_DRAIN_SECONDS = 60.0
# A turn's writer writes a heartbeat this often: 360 puts a turn an hour (docs/protocol.md,
# "The writer's heartbeat", says what that costs on S3), and a reader judges it gone
# after 3 of them and the listing lag (35 s by default) without one.
DEFAULT_WRITER_HEARTBEAT_SECONDS = 10.0

# Extra request fields, as checked (name, value) pairs: hashable, so kept once.
RequestHeaders = tuple[tuple[str, str], ...]
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
# HTAB, SP and visible ASCII: what a field value may hold and the codec sends.
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]*")
# Framed by the library, per request: a caller's value would break the framing.
_FRAMING_FIELDS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def _is_real(value: Any) -> bool:
    # bool is an int: True seconds or True bytes is a caller's slip, not a number.
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive_seconds(name: str, value: Any) -> float:
    """``value`` as a finite, positive duration, or :class:`InvalidArgumentError`."""
    if not _is_real(value) or not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


def non_negative_seconds(name: str, value: Any) -> float:
    """``value`` as a finite duration of zero or more, or :class:`InvalidArgumentError`."""
    if not _is_real(value) or not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{name} must be a number of seconds >= 0, not {value!r}")
    return float(value)


def optional_positive_seconds(name: str, value: Any) -> float | None:
    """``value`` as None (no bound) or a finite, positive duration."""
    return None if value is None else positive_seconds(name, value)


def count(name: str, value: Any, *, minimum: int = 0) -> int:
    """``value`` as an integer of at least ``minimum``, or :class:`InvalidArgumentError`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgumentError(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


def request_headers(name: str, value: Any) -> RequestHeaders:
    """Extra request headers (a mapping or pairs of str) as checked pairs.

    Raises :class:`InvalidArgumentError` for a name that is no token, a value
    holding CR, LF or another control character, or a field the library frames
    itself; the message names the field, never its value (it may be a token).
    """
    if value is None:
        return ()
    try:
        pairs = list(value.items() if isinstance(value, Mapping) else value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be a mapping of header names to values") from None
    checked = []
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise InvalidArgumentError(f"{name} must hold (name, value) pairs")
        field, text = pair
        if not isinstance(field, str) or _TOKEN.fullmatch(field) is None:
            raise InvalidArgumentError(f"{name}: {field!r} is not a header name")
        if field.lower() in _FRAMING_FIELDS:
            raise InvalidArgumentError(f"{name}: {field} is set by the library, per request")
        if not isinstance(text, str) or _FIELD_VALUE.fullmatch(text) is None:
            raise InvalidArgumentError(
                f"{name}: the value of {field} must be a str of visible ASCII, spaces and tabs"
            )
        checked.append((field, text.strip(" \t")))
    return tuple(checked)


def _headers_option(value: Any) -> RequestHeaders:
    return request_headers("headers", value)


def _validated(check: Any) -> Any:
    def validator(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        check(attribute.name, value)

    return validator


@final
@attrs.frozen(kw_only=True)
class FollowOptions:
    """How a follower reads: the poll interval, each read's bounds, the drain, the client.

    ``headers`` are extra request fields for every read (checked pairs, never in
    the repr: one may be a token).

    ``max_follow_seconds`` bounds one follower's whole run (None: no bound
    but the drain after stop): past it, following ends as after a failed read
    after stop, and the step goes on.

    ``tracer_provider`` and ``meter_provider``: where a turn's spans and metrics go
    (None: the global providers; nothing is emitted while none is configured).

    ``writer_heartbeat_seconds``: how often a turn's writer stores a heartbeat while
    the turn is open (a turn's option; a lone follower stores none).

    Built by :func:`~follower.lowlevel.follow_trajectory`,
    :func:`~follower.following_live_trajectory` and :class:`~follower.LiveTurns` from
    their keyword options; raises
    :class:`~follower.InvalidArgumentError` at construction, before anything runs.
    """

    poll_interval_seconds: float = attrs.field(validator=_validated(positive_seconds))
    read_timeout_seconds: float = attrs.field(
        default=DEFAULT_READ_TIMEOUT_SECONDS, validator=_validated(positive_seconds)
    )
    max_page_bytes: int = attrs.field(
        default=DEFAULT_MAX_PAGE_BYTES, validator=_validated(lambda n, v: count(n, v, minimum=1))
    )
    max_event_bytes: int = attrs.field(
        default=DEFAULT_MAX_EVENT_BYTES, validator=_validated(lambda n, v: count(n, v, minimum=1))
    )
    drain_seconds: float = attrs.field(
        default=DEFAULT_DRAIN_SECONDS, validator=_validated(non_negative_seconds)
    )
    max_follow_seconds: float | None = attrs.field(
        default=None, validator=_validated(optional_positive_seconds)
    )
    writer_heartbeat_seconds: float = attrs.field(
        default=DEFAULT_WRITER_HEARTBEAT_SECONDS, validator=_validated(positive_seconds)
    )
    client: httpx.AsyncClient | None = attrs.field(default=None, repr=False)
    # Never shown: a header may carry a token.
    headers: RequestHeaders = attrs.field(default=(), converter=_headers_option, repr=False)
    # Where a step's spans and metrics go (``_telemetry``); None: the global providers.
    tracer_provider: TracerProvider | None = attrs.field(default=None, repr=False)
    meter_provider: MeterProvider | None = attrs.field(default=None, repr=False)
