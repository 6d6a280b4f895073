"""Server-sent events from bytes: the event-stream format's parser, bounded, with no I/O.

The rules are those of the HTML standard's "Interpreting an event stream"
(WHATWG HTML 9.2.6), as sans-I/O as h11: bytes go in with :meth:`SSEDecoder.feed`,
whole events come out, and nothing here reads a socket or knows the clock.
It is never more lenient than the standard: lines end with CR LF, LF or CR; a
leading byte-order mark is dropped once; a line starting with ``:`` is a
comment; ``data`` lines join with LF; ``id`` holding NUL and ``retry`` that is
not all ASCII digits are ignored (and a ``retry`` of over 18 digits: a
reconnection time the standard leaves unbounded); an event with no data is not
dispatched; an event cut off by the end of the stream is discarded. Text is
UTF-8, with invalid bytes replaced (the standard's decode).

It is stricter in one way the standard leaves to implementations: memory. A
line longer than ``max_line_bytes``, or an event whose data grows past
``max_data_bytes``, raises :class:`SSEError` instead of growing a buffer with
no end, and the bytes between two events (comments, keep-alives, fields
other than ``data``) are bounded by ``max_idle_bytes``.

Why not ``httpx-sse``: it has none of these bounds (a server that never ends a
line grows its buffer until the process dies), and it parses through httpx's
text and line decoders, two generator layers a stream's every byte passes
through. ``tests/format/test_sse.py`` checks this parser against it, as the
HTTP codec is checked against h11; ``benchmarks/sse_parse.py`` measures both.
"""

from __future__ import annotations

from typing import final

import attrs

_BOM = b"\xef\xbb\xbf"
_LINE_ENDS = (b"\n", b"\r")
# A reconnection time of more digits than this (over 31 million years) is ignored.
_MAX_RETRY_DIGITS = 18


class SSEError(ValueError):
    """The bytes break a bound of the decoder (a line, an event, or chatter too long)."""


@final
@attrs.frozen
class ServerSentEvent:
    """One dispatched event: its type, its data, and the stream's last event id."""

    data: str
    event: str = "message"
    id: str = ""
    retry: int | None = None
    """The ``retry`` field's reconnection time in milliseconds, if this event's lines set it."""


@final
class SSEDecoder:
    """Turn an event stream's bytes into :class:`ServerSentEvent` values, within bounds.

    ``max_line_bytes``: the longest line; ``max_data_bytes``: the most data one
    event may gather; ``max_idle_bytes``: the most bytes taken between two
    dispatched events by lines that add no data (comments, keep-alives, ``event``,
    ``id``, ``retry`` and unknown fields, blank lines of no event).
    """

    __slots__ = (
        "_data",
        "_data_bytes",
        "_event",
        "_idle_bytes",
        "_last_id",
        "_max_data_bytes",
        "_max_idle_bytes",
        "_max_line_bytes",
        "_partial",
        "_retry",
        "_skip_lf",
        "_started",
    )

    def __init__(
        self, *, max_line_bytes: int, max_data_bytes: int, max_idle_bytes: int = 1024 * 1024
    ) -> None:
        self._max_line_bytes = max_line_bytes
        self._max_data_bytes = max_data_bytes
        self._max_idle_bytes = max_idle_bytes
        self._partial = bytearray()
        self._skip_lf = False  # the last feed ended in CR: a LF first in the next ends that line
        self._started = False  # the byte-order mark is looked for once, at the start
        self._data: list[str] = []
        self._data_bytes = 0
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None
        self._idle_bytes = 0

    @property
    def last_event_id(self) -> str:
        """The stream's last event id so far (what a reconnect sends as ``Last-Event-ID``)."""
        return self._last_id

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """The events that ``data`` completes, in order; raises :class:`SSEError` past a bound."""
        if not self._started:
            self._partial += data
            if len(self._partial) < len(_BOM) and _BOM.startswith(self._partial):
                return []  # too short yet to say whether it starts with a BOM
            self._started = True
            data = bytes(self._partial)
            self._partial.clear()
            if data.startswith(_BOM):
                data = data[len(_BOM) :]
        events: list[ServerSentEvent] = []
        if not data:  # before the CR is forgotten: an empty feed may come between CR and LF
            return events
        if self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:  # no line ends here: the line goes on
            self._partial += data
            self._check_partial()
            return events
        if self._partial:
            self._partial += data[: cut + 1]
            whole = bytes(self._partial)
            self._partial.clear()
        else:
            whole = data[: cut + 1]
        self._partial += data[cut + 1 :]
        self._check_partial()
        if data.endswith(b"\r"):
            self._skip_lf = True  # a CR LF split between two feeds is one line end
        for line in whole.splitlines():  # bytes split on CR LF, LF and CR alone
            if len(line) > self._max_line_bytes:
                raise SSEError(
                    f"a line of {len(line)} bytes, over the {self._max_line_bytes}-byte bound"
                )
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _check_partial(self) -> None:
        if len(self._partial) > self._max_line_bytes:
            raise SSEError(f"a line longer than the {self._max_line_bytes}-byte bound")

    def _line(self, line: bytes) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        colon = line.find(b":")
        if colon == 0:
            self._idle(len(line))
            return None
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            # The event's data as dispatched: each line, and the LF between two.
            self._data_bytes += len(value) + (1 if self._data else 0)
            if self._data_bytes > self._max_data_bytes:
                raise SSEError(f"an event's data is over the {self._max_data_bytes}-byte bound")
            self._data.append(value.decode("utf-8", "replace"))
            return None
        # Any other field adds no data: "event: ping" sent forever must end as comments do.
        self._idle(len(line))
        if name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\x00" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit() and len(value) <= _MAX_RETRY_DIGITS:
            # bytes.isdigit: ASCII digits only, and not b"". A longer value is ignored, not
            # read: int() refuses over 4,300 digits (a ValueError out of feed), or is slow.
            self._retry = int(value)
        return None

    def _idle(self, size: int) -> None:
        self._idle_bytes += size + 1
        if self._idle_bytes > self._max_idle_bytes:
            raise SSEError(f"over {self._max_idle_bytes} bytes of comments or fields with no event")

    def _dispatch(self) -> ServerSentEvent | None:
        data, event, retry = self._data, self._event, self._retry
        self._data, self._data_bytes, self._event, self._retry = [], 0, "", None
        if not data:
            self._idle(0)
            return None
        self._idle_bytes = 0
        return ServerSentEvent("\n".join(data), event or "message", self._last_id, retry)
