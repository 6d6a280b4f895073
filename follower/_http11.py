"""A lean HTTP/1.1 client codec: requests out, responses in, strictly bounded.

Pure (no I/O): :class:`RequestWriter` turns a request into bytes and
:class:`ResponseParser` is fed the bytes that arrive and hands back the
response's head and its body's pieces. The library's transport does the I/O.

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

Protocol errors are httpx's own types: ``httpx.RemoteProtocolError`` for what
the server sent, ``httpx.LocalProtocolError`` for a request that cannot be sent.
"""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Final, final

import httpx

if TYPE_CHECKING:
    from collections.abc import Sequence

    _Head = tuple[bytes, bool, bool, int | None]

MAX_HEAD_BYTES: Final = 64 * 1024
MAX_HEADERS: Final = 128
# A chunk-size line: the size and extensions we ignore, bounded all the same.
MAX_CHUNK_LINE_BYTES: Final = 4096
# Chunks parsed by one body_into call, about a millisecond's work: a receive of
# 1-byte chunks holds 10,000 of them, and parsed in one go it held the loop 25 ms.
MAX_CHUNKS_A_CALL: Final = 1024
# Interim answers are skipped; a server that sends them without end is refused.
MAX_INTERIM_RESPONSES: Final = 16
_MAX_LENGTH_DIGITS: Final = 18  # a Content-Length up to an exabyte
_NO_BODY_STATUSES: Final = frozenset({204, 304})

_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
# What a field value (or a reason phrase) may hold: HTAB, SP, VCHAR, obs-text.
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
# In a head: a control character other than HTAB, or a CR or LF not in a CRLF.
_BAD_IN_HEAD = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|(?<!\r)\n")
_CHUNK_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[\t\x20-\x7e\x80-\xff]*|[ \t]*)")
_FRAMING_FIELDS = (b"content-length", b"transfer-encoding")
_REQUEST_FIELDS_READ = frozenset({*_FRAMING_FIELDS, b"connection", b"host"})
# In a head, besides CRLFs: a control character other than HTAB.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Signal(enum.Enum):
    """What :meth:`ResponseParser.next_body` returns when it has no bytes to give."""

    NEED_DATA = enum.auto()  # feed what arrives next
    END = enum.auto()  # the body is complete
    PAUSE = enum.auto()  # body_into parsed its share of chunks: let others run, call again


NEED_DATA: Final = Signal.NEED_DATA
END: Final = Signal.END
PAUSE: Final = Signal.PAUSE


# --- requests -----------------------------------------------------------------------


@final
class RequestWriter:
    """One request's bytes: its head, checked, and its body framed as the head says.

    The body is framed by the head's ``Content-Length`` (the bytes sent must
    match it), its ``Transfer-Encoding: chunked``, or, with neither, must be
    empty. CR, LF, NUL (any control but HTAB) in a field, a field name that is
    no token, and a method or target that cannot be sent raise
    ``httpx.LocalProtocolError``.
    """

    __slots__ = ("_length", "_sent", "chunked", "close", "head", "method")

    def __init__(
        self,
        method: bytes,
        target: bytes,
        headers: Sequence[tuple[bytes, bytes]],
        *,
        known_heads: KnownHeads | None = None,
    ) -> None:
        if known_heads is None:
            known = _checked_head(method, target, headers)
        else:
            known = known_heads.checked(method, target, headers)
        self.head, self.chunked, self.close, self._length = known
        self.method = method
        self._sent = 0

    def whole(self, body: bytes) -> bytes:
        """The head and the whole body, framed: one send for a small request."""
        return self.head + self.piece(body) + self.end()

    def piece(self, data: bytes) -> bytes:
        """One piece of a body sent in pieces, framed."""
        if self._length is not None:
            self._sent += len(data)
            if self._sent > self._length:
                raise httpx.LocalProtocolError(
                    f"more body than the declared Content-Length of {self._length}"
                )
            return data
        if not data:
            return b""  # an empty chunk would end the body
        return b"%x\r\n%b\r\n" % (len(data), data)

    def end(self) -> bytes:
        """What ends the body."""
        if self._length is not None:
            if self._sent != self._length:
                raise httpx.LocalProtocolError(
                    f"{self._sent} bytes of body for a declared Content-Length of {self._length}"
                )
            return b""
        return b"0\r\n\r\n"


@final
class KnownHeads:
    """Request heads checked already, so a head sent over and over is checked once.

    A follower sends the same head read after read (only a Content-Length
    changes, now and then). Keyed by (method, target, fields): the head's bytes,
    whether its body is chunked, whether it says close, and its Content-Length.
    The fields hold credentials (``Authorization``), so the heads belong to
    whoever owns the connections, the transport, and go with it: :meth:`clear`
    when it closes. At most ``MAX_KNOWN_HEADS``, then it starts afresh.
    """

    __slots__ = ("_heads",)

    def __init__(self) -> None:
        self._heads: dict[tuple[bytes, bytes, tuple[tuple[bytes, bytes], ...]], _Head] = {}

    def __len__(self) -> int:
        return len(self._heads)

    def checked(
        self, method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]]
    ) -> _Head:
        key = (method, target, tuple(headers))
        known = self._heads.get(key)
        if known is None:
            known = _checked_head(method, target, headers)
            if len(self._heads) >= MAX_KNOWN_HEADS:
                self._heads.clear()
            self._heads[key] = known
        return known

    def clear(self) -> None:
        self._heads.clear()


MAX_KNOWN_HEADS: Final = 256


def _checked_head(method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]]) -> _Head:
    if _TOKEN.fullmatch(method) is None:
        raise httpx.LocalProtocolError(f"the method {method!r} is not a token")
    if method == b"CONNECT":
        raise httpx.LocalProtocolError("CONNECT is not supported")
    if not target or _has_byte_outside(target, 0x21, 0x7E):
        raise httpx.LocalProtocolError(f"the request target {target!r} cannot be sent")
    _check_fields(headers)
    length: int | None = None
    chunked = close = has_host = False
    lines = [method, b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        lines += (name, b": ", value, b"\r\n")
        lowered = name.lower()
        if lowered not in _REQUEST_FIELDS_READ:
            continue
        if lowered == b"content-length":
            declared = value.strip(b" \t")
            if not declared.isdigit() or len(declared) > _MAX_LENGTH_DIGITS:
                raise httpx.LocalProtocolError(f"bad Content-Length {value!r}")
            if length is not None and int(declared) != length:
                raise httpx.LocalProtocolError("conflicting Content-Length headers")
            length = int(declared)
        elif lowered == b"transfer-encoding":
            if chunked or value.strip(b" \t").lower() != b"chunked":
                raise httpx.LocalProtocolError("only Transfer-Encoding: chunked is supported")
            chunked = True
        elif lowered == b"connection":
            close = close or b"close" in _tokens(value)
        else:
            has_host = True
    if chunked and length is not None:
        raise httpx.LocalProtocolError("both Content-Length and Transfer-Encoding")
    if not has_host:
        raise httpx.LocalProtocolError("an HTTP/1.1 request needs a Host header")
    lines.append(b"\r\n")
    return b"".join(lines), chunked, close, None if chunked else (length or 0)


# --- responses -----------------------------------------------------------------------


@final
class ResponseHead:
    """A response's status line and fields, as received (names keep their case)."""

    __slots__ = ("headers", "http_version", "reason", "status")

    def __init__(
        self, status: int, reason: bytes, http_version: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None:
        self.status = status
        self.reason = reason
        self.http_version = http_version
        self.headers = headers

    def __repr__(self) -> str:
        return f"ResponseHead({self.status}, {self.reason!r}, {self.http_version!r})"


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
            _framing(head)  # checked as any head is, then skipped with its fields
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
        lines = _head_lines(buffer, max(at, self._checked), at, end)
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
        headers = _fields(lines, 1)
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
        bad = _BAD_IN_HEAD.search(buffer, max(at, self._checked), stop)
        if bad is not None:
            raise httpx.RemoteProtocolError(_bad_byte_message(bad.group()))
        self._checked = stop
        if self._eof:
            raise httpx.RemoteProtocolError(
                "the server closed the connection in the middle of the response head"
            )

    def _frame_body(self, head: ResponseHead) -> None:
        length, chunked, close = _framing(head)
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
        lines = _head_lines(buffer, at, at, end)
        if len(lines) > MAX_HEADERS:
            raise httpx.RemoteProtocolError(f"over {MAX_HEADERS} trailer fields")
        for name, _ in _fields(lines, 0):
            if name.lower() in _FRAMING_FIELDS:
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


def _head_lines(buffer: bytes | bytearray, unchecked: int, at: int, end: int) -> list[bytes]:
    """The head's lines, refused if it holds a control character or a bare CR or LF."""
    bad = _CONTROL.search(buffer, unchecked, end)
    if bad is not None:
        raise httpx.RemoteProtocolError(_bad_byte_message(bad.group()))
    head = bytes(buffer[at:end])
    lines = head.split(b"\r\n")
    # Split at every CRLF, so any CR or LF left is a bare one.
    if head.count(b"\r") >= len(lines) or head.count(b"\n") >= len(lines):
        raise httpx.RemoteProtocolError(_bad_byte_message(b"\r"))
    return lines


def _fields(lines: list[bytes], start: int) -> list[tuple[bytes, bytes]]:
    """Field lines (already free of bad bytes) as (name, value), names as sent."""
    fields = []
    for index in range(start, len(lines)):
        line = lines[index]
        if line[:1] in (b" ", b"\t"):
            raise httpx.RemoteProtocolError("a folded header line (obs-fold)")
        colon = line.find(b":")
        if colon <= 0:
            if colon < 0:
                raise httpx.RemoteProtocolError(f"a header line without a colon: {line[:64]!r}")
            raise httpx.RemoteProtocolError("a header line with an empty name")
        name = line[:colon]
        if _TOKEN.fullmatch(name) is None:
            if b" " in name or b"\t" in name:
                raise httpx.RemoteProtocolError(f"a header name with whitespace: {name!r}")
            raise httpx.RemoteProtocolError(f"a header name that is not a token: {name!r}")
        fields.append((name, line[colon + 1 :].strip(b" \t")))
    return fields


def _framing(head: ResponseHead) -> tuple[int | None, bool, bool]:
    """The head's Content-Length, whether it is chunked, whether it says close; checked."""
    length: int | None = None
    declared = b""
    chunked = close = False
    for name, value in head.headers:
        lowered = name.lower()
        if lowered == b"content-length":
            if not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                raise httpx.RemoteProtocolError(f"a bad Content-Length: {value!r}")
            # Several must be the same text, not just the same number ("0" and "00"
            # disagree): a proxy in between may read either, as h11 refuses them.
            if length is not None and value != declared:
                raise httpx.RemoteProtocolError("conflicting Content-Length headers")
            length, declared = int(value), value
        elif lowered == b"transfer-encoding":
            if chunked:
                raise httpx.RemoteProtocolError("several Transfer-Encoding headers")
            if value.lower() != b"chunked":
                raise httpx.RemoteProtocolError(
                    f"a Transfer-Encoding other than chunked: {value!r}"
                )
            chunked = True
        elif lowered == b"connection":
            close = close or b"close" in _tokens(value)
    if chunked and length is not None:
        raise httpx.RemoteProtocolError("both Transfer-Encoding and Content-Length")
    return length, chunked, close


def _check_fields(headers: Sequence[tuple[bytes, bytes]]) -> None:
    """Refuse a request field that cannot be sent as it is."""
    # Token characters joined are a token, field-value characters joined a value:
    # two matches for all the fields; the loop only names the culprit.
    names = b"".join(name for name, _ in headers)
    values = b"".join(value for _, value in headers)
    if (
        (_TOKEN.fullmatch(names) is not None or not headers)
        and _FIELD_VALUE.fullmatch(values) is not None
        and all(name for name, _ in headers)
    ):
        return
    for name, value in headers:
        if _TOKEN.fullmatch(name) is None:
            raise httpx.LocalProtocolError(f"the header name {name!r} is not a token")
        if _FIELD_VALUE.fullmatch(value) is None:
            raise httpx.LocalProtocolError(
                f"the value of header {name.decode()!r} holds CR, LF, NUL "
                "or another control character"
            )
    raise AssertionError("unreachable")  # pragma: no cover


def _tokens(value: bytes) -> list[bytes]:
    return [token.strip(b" \t").lower() for token in value.split(b",")]


def _has_byte_outside(data: bytes, low: int, high: int) -> bool:
    return min(data) < low or max(data) > high


def _bad_byte_message(found: bytes) -> str:
    if found in (b"\r", b"\n"):
        return "a CR or LF that is not part of a CRLF in the response head"
    return f"a control character {found!r} in the response head"
