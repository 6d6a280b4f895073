"""A lean HTTP/1.1 response parser: its head, then its body's framing, strictly bounded.

Pure (no I/O): :class:`ResponseParser` is fed the bytes that arrive and hands
back the response's head and its body's pieces, chunked bodies included (their
size lines, chunks a call and trailers bounded). The library's transport does
the I/O; requests are :mod:`follower._http._request`'s.

It replaces h11 on the hot path, where h11 cost more than the socket work.
It is never more lenient than h11 (the tests hold it to that, h11 as their
oracle), and stricter where a follower has no use for leniency:

- only ``HTTP/1.1`` and ``HTTP/1.0`` status lines, only CRLF line ends;
- the head is bounded (``MAX_HEAD_BYTES`` in all, ``MAX_HEADERS`` fields);
  obs-fold, a field name that is no token, a line without a colon, and any
  control character but HTAB are refused;
- interim (1xx) answers are skipped, except ``101`` (nobody asked to switch);
- bodies are framed by ``Transfer-Encoding: chunked``, ``Content-Length``
  (digits only; several must agree) or the end of the connection; a response
  with both framings is refused, as request smuggling's favourite trick;
- a connection may carry another exchange only for HTTP/1.1 without
  ``Connection: close`` on either side, after a body read exactly to its end
  with nothing received past it.

Protocol errors are httpx's own type, ``httpx.RemoteProtocolError``.
"""

from __future__ import annotations

import enum
import re
from typing import Final, final

import httpx

from ._head import (
    BAD_IN_HEAD,
    FRAMING_FIELDS,
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    ResponseHead,
    bad_byte_message,
    fields_of,
    framing,
    head_lines,
)

# A chunk-size line: the size and extensions we ignore, bounded all the same.
MAX_CHUNK_LINE_BYTES: Final = 4096
# Chunks parsed by one body_into call, about a millisecond's work: a receive of
# 1-byte chunks holds 10,000 of them, and parsed in one go it held the loop 25 ms.
MAX_CHUNKS_A_CALL: Final = 1024
# Interim answers are skipped; a server that sends them without end is refused.
MAX_INTERIM_RESPONSES: Final = 16
_NO_BODY_STATUSES: Final = frozenset({204, 304})
_CHUNK_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[\t\x20-\x7e\x80-\xff]*|[ \t]*)")


class Signal(enum.Enum):
    """What :meth:`ResponseParser.next_body` returns when it has no bytes to give."""

    NEED_DATA = enum.auto()  # feed what arrives next
    END = enum.auto()  # the body is complete
    PAUSE = enum.auto()  # body_into parsed its share of chunks: let others run, call again


NEED_DATA: Final = Signal.NEED_DATA
END: Final = Signal.END
PAUSE: Final = Signal.PAUSE


# Where the parser is: plain ints, compared on every call.
_HEAD = 0  # no final head yet
_LENGTH = 1  # Content-Length bytes to go
_CHUNK_LINE = 2  # a chunk-size line next
_CHUNK_DATA = 3  # a chunk's bytes to go
_CHUNK_END = 4  # the CRLF after a chunk's bytes
_TRAILERS = 5  # the trailer section after the last chunk
_UNTIL_EOF = 6  # everything until the server closes
_DONE = 7


@final
class ResponseParser:
    """One response, parsed from the bytes fed to it as they arrive.

    Call :meth:`next_head` until it returns the head (``None``: feed more), then
    :meth:`next_body` until it returns :data:`END` (:data:`NEED_DATA`: feed more).
    Feed ``b""`` for the end of the connection. Then :attr:`reusable` says
    whether the connection may carry another exchange.
    """

    # Not attrs: one is made for every exchange, and attrs' __init__ looks up each
    # field's default in its field table (1.4 to 2.2 us a parser, measured).

    __slots__ = (
        "_at",
        "_buffer",
        "_checked",
        "_close",
        "_eof",
        "_http11",
        "_interim",
        "_no_body",
        "_remaining",
        "_state",
        "chunks",
    )

    def __init__(self, *, head_request: bool = False, request_close: bool = False) -> None:
        self._buffer: bytes | bytearray = b""
        self._at = 0  # where the unparsed bytes start in the buffer
        self._checked = 0  # how far an incomplete head has been checked
        self._eof = False
        self._state = _HEAD
        self._remaining = 0
        self._no_body = head_request
        self._close = request_close
        self._http11 = False
        self._interim = 0
        self.chunks = 0  # the chunked body's chunks parsed so far

    def feed(self, data: bytes) -> None:
        """Bytes received, in order; ``b""`` when the server closed the connection.

        Feed only when :meth:`next_head` or the body asked for data: the parser
        then holds what it has not parsed (at most a head, a chunk-size line or
        the trailers, each bounded) and ``data``, never what it parsed before.
        """
        if not data:
            self._eof = True
            return
        buffer, at = self._buffer, self._at
        if at >= len(buffer):
            # The common case: nothing left over, so no copy.
            self._buffer, self._at, self._checked = data, 0, 0
            return
        if isinstance(buffer, bytearray):
            # Amortised (a head or chunk line trickling in), and what was parsed is
            # dropped: kept, a body of 4 KiB chunk lines each before one byte grew
            # the buffer by all the agent sent until the read's deadline.
            del buffer[:at]  # CPython moves the array's start: no copy
            buffer += data
        else:
            left = bytearray(memoryview(buffer)[at:])
            left += data
            self._buffer = left
        self._checked = max(0, self._checked - at)
        self._at = 0

    @property
    def buffered(self) -> int:
        """How many bytes were fed and not parsed yet."""
        return len(self._buffer) - self._at

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry another exchange after this one."""
        return (
            self._state == _DONE
            and self._http11
            and not self._close
            and not self._eof
            and self._at >= len(self._buffer)
        )

    def next_head(self) -> ResponseHead | None:
        """The final response's head, once it has arrived (interim answers skipped)."""
        while self._state == _HEAD:
            head = self._parse_head()
            if head is None:
                return None
            if head.status >= 200:
                self._frame_body(head)
                return head
            if head.status == 101:
                raise httpx.RemoteProtocolError("101 Switching Protocols, which was not asked for")
            framing(head)  # checked as any head is, then skipped with its fields
            self._interim += 1
            if self._interim > MAX_INTERIM_RESPONSES:
                raise httpx.RemoteProtocolError(
                    f"over {MAX_INTERIM_RESPONSES} interim (1xx) answers"
                )
        raise RuntimeError("next_head() after the head")  # pragma: no cover - misuse

    def next_body(self) -> bytes | Signal:
        """The next piece of the body (never empty), :data:`NEED_DATA` or :data:`END`."""
        while True:
            state = self._state
            if state in (_LENGTH, _CHUNK_DATA):
                available = len(self._buffer) - self._at
                if not available:
                    return self._need_data()
                piece = self._take(min(available, self._remaining))
                self._remaining -= len(piece)
                if not self._remaining:
                    self._state = _DONE if state == _LENGTH else _CHUNK_END
                return piece
            if state == _DONE:
                return END
            if state == _UNTIL_EOF:
                if len(self._buffer) > self._at:
                    return self._take(len(self._buffer) - self._at)
                return self._need_data()
            if not self._advance_chunked(state):
                return self._need_data()

    def body_into(self, out: bytearray, room: int) -> Signal:
        """Append the body's bytes that have arrived to ``out``, at most ``room`` of them.

        :data:`END` once the whole body is in ``out``; :data:`NEED_DATA` when
        more must be fed, or when ``room`` ran out first (the body is longer);
        :data:`PAUSE` after ``MAX_CHUNKS_A_CALL`` chunks, to be called again.
        One buffer for the whole body, however it is chunked: a piece a chunk
        would cost a ``bytes`` object each, 34 bytes for a chunk of one.
        """
        stop = self.chunks + MAX_CHUNKS_A_CALL
        while room > 0:
            state = self._state
            if state in (_LENGTH, _CHUNK_DATA, _UNTIL_EOF):
                buffer, at = self._buffer, self._at
                size = min(len(buffer) - at, room)
                if state != _UNTIL_EOF:
                    size = min(size, self._remaining)
                    self._remaining -= size
                    if not self._remaining:
                        self._state = _DONE if state == _LENGTH else _CHUNK_END
                if not size:
                    return self._need_data()
                out += memoryview(buffer)[at : at + size]
                self._at = at + size
                room -= size
            elif state == _DONE:
                return END
            elif self.chunks >= stop:
                return PAUSE
            elif not self._advance_chunked(state):
                return self._need_data()
        return END if self._state == _DONE else NEED_DATA

    def _need_data(self) -> Signal:
        """NEED_DATA, or the end of a body that the server's close ends or cuts short."""
        if not self._eof:
            return NEED_DATA
        if self._state == _UNTIL_EOF:
            self._state = _DONE
            return END
        if self._state in (_LENGTH, _CHUNK_DATA):
            raise httpx.RemoteProtocolError(
                "the server closed the connection in the middle of the body"
            )
        raise httpx.RemoteProtocolError(
            "the server closed the connection in the middle of a chunked body"
        )

    # --- the head ---

    def _parse_head(self) -> ResponseHead | None:
        buffer, at = self._buffer, self._at
        end = buffer.find(b"\r\n\r\n", max(at, self._checked - 3))
        if end < 0:
            self._check_partial_head()
            return None
        if end + 4 - at > MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError(f"the response head is over {MAX_HEAD_BYTES} bytes")
        lines = head_lines(buffer, max(at, self._checked), at, end)
        self._at = self._checked = end + 4
        status_line = lines[0]
        version = status_line[:9]
        if version == b"HTTP/1.1 ":
            http11 = True
        elif version == b"HTTP/1.0 ":
            http11 = False
        else:
            raise httpx.RemoteProtocolError(f"not an HTTP/1.1 or 1.0 status line: {status_line!r}")
        code = status_line[9:12]
        if not (len(code) == 3 and code.isdigit() and b"1" <= code[:1] <= b"5") or (
            status_line[12:13] not in (b"", b" ")
        ):
            raise httpx.RemoteProtocolError(f"a malformed status line: {status_line!r}")
        if len(lines) - 1 > MAX_HEADERS:
            raise httpx.RemoteProtocolError(f"over {MAX_HEADERS} header fields")
        headers = fields_of(lines, 1)
        self._http11 = http11
        return ResponseHead(
            int(code), status_line[13:], b"HTTP/1.1" if http11 else b"HTTP/1.0", headers
        )

    def _check_partial_head(self) -> None:
        """Refuse an incomplete head as soon as it cannot become a valid one."""
        buffer, at = self._buffer, self._at
        size = len(buffer) - at
        if not size:
            if self._eof:
                raise httpx.RemoteProtocolError(
                    "the server closed the connection without answering"
                )
            return
        prefix = b"HTTP/1."
        if buffer[at : at + len(prefix)] != prefix[:size]:
            raise httpx.RemoteProtocolError(
                f"not an HTTP/1.x response: {bytes(buffer[at : at + 16])!r}"
            )
        if size > MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError(f"the response head is over {MAX_HEAD_BYTES} bytes")
        # Checked as it arrives, so a bare LF is refused at once, not at the deadline;
        # a trailing CR waits for its LF.
        stop = len(buffer) - 1 if buffer[-1:] == b"\r" else len(buffer)
        bad = BAD_IN_HEAD.search(buffer, max(at, self._checked), stop)
        if bad is not None:
            raise httpx.RemoteProtocolError(bad_byte_message(bad.group()))
        self._checked = stop
        if self._eof:
            raise httpx.RemoteProtocolError(
                "the server closed the connection in the middle of the response head"
            )

    def _frame_body(self, head: ResponseHead) -> None:
        length, chunked, close = framing(head)
        self._close = self._close or close
        if chunked and not self._http11:
            raise httpx.RemoteProtocolError("a chunked HTTP/1.0 response")
        if self._no_body or head.status in _NO_BODY_STATUSES:
            self._state = _DONE
        elif chunked:
            self._state = _CHUNK_LINE
        elif length is not None:
            self._remaining = length
            self._state = _LENGTH if length else _DONE
        else:
            self._state = _UNTIL_EOF
            self._close = True  # only the connection's end ends this body

    # --- chunked bodies ---

    def _advance_chunked(self, state: int) -> bool:
        """Parse a chunk line, a chunk's CRLF or the trailers; False: more bytes needed."""
        buffer, at = self._buffer, self._at
        if state == _CHUNK_END:
            if len(buffer) - at < 2:
                if buffer[at : at + 1] not in (b"", b"\r"):
                    raise httpx.RemoteProtocolError("a chunk not followed by CRLF")
                return False
            if buffer[at : at + 2] != b"\r\n":
                raise httpx.RemoteProtocolError("a chunk not followed by CRLF")
            self._at = at + 2
            self._state = _CHUNK_LINE
            return True
        if state == _CHUNK_LINE:
            end = buffer.find(b"\r\n", at, at + MAX_CHUNK_LINE_BYTES)
            if end < 0:
                if len(buffer) - at >= MAX_CHUNK_LINE_BYTES:
                    raise httpx.RemoteProtocolError(
                        f"a chunk-size line over {MAX_CHUNK_LINE_BYTES} bytes"
                    )
                return False
            match = _CHUNK_SIZE_LINE.fullmatch(buffer, at, end)
            if match is None:
                raise httpx.RemoteProtocolError(
                    f"a malformed chunk-size line: {bytes(buffer[at:end])[:64]!r}"
                )
            size = int(match.group(1), 16)
            self._at = end + 2
            self.chunks += 1
            if size:
                self._remaining = size
                self._state = _CHUNK_DATA
            else:
                self._state = _TRAILERS
            return True
        # The trailer section: fields up to an empty line, read and dropped.
        if buffer[at : at + 2] == b"\r\n":
            self._at = at + 2
            self._state = _DONE
            return True
        end = buffer.find(b"\r\n\r\n", at)
        if end < 0:
            if len(buffer) - at > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError(f"trailers over {MAX_HEAD_BYTES} bytes")
            return False
        if end + 4 - at > MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError(f"trailers over {MAX_HEAD_BYTES} bytes")
        lines = head_lines(buffer, at, at, end)
        if len(lines) > MAX_HEADERS:
            raise httpx.RemoteProtocolError(f"over {MAX_HEADERS} trailer fields")
        for name, _ in fields_of(lines, 0):
            if name.lower() in FRAMING_FIELDS:
                raise httpx.RemoteProtocolError(f"a {name.decode()} trailer")
        self._at = end + 4
        self._state = _DONE
        return True

    def _take(self, size: int) -> bytes:
        buffer, at = self._buffer, self._at
        self._at = at + size
        if at == 0 and size == len(buffer) and type(buffer) is bytes:
            return buffer  # a whole receive: no copy
        return bytes(buffer[at : at + size])
