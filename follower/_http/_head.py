"""The grammar of an HTTP/1.1 head, both ways: fields, the framing they declare, a response's head.

Pure and sync. :mod:`follower._http._request` checks a request's fields with it
and :mod:`follower._http._response` a response's; what is refused is listed
there. Errors are httpx's own: ``httpx.RemoteProtocolError`` for what the
server sent.
"""

from __future__ import annotations

import re
from typing import Final, final

import attrs
import httpx

MAX_HEAD_BYTES: Final = 64 * 1024
MAX_HEADERS: Final = 128
MAX_LENGTH_DIGITS: Final = 18  # a Content-Length up to an exabyte

TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
# What a field value (or a reason phrase) may hold: HTAB, SP, VCHAR, obs-text.
FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
# In a head: a control character other than HTAB, or a CR or LF not in a CRLF.
BAD_IN_HEAD = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|(?<!\r)\n")
FRAMING_FIELDS = (b"content-length", b"transfer-encoding")
# In a head, besides CRLFs: a control character other than HTAB.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@final
@attrs.define(eq=False)
class ResponseHead:
    """A response's status line and fields, as received (names keep their case)."""

    status: int
    reason: bytes
    http_version: bytes
    headers: list[tuple[bytes, bytes]]

    def __repr__(self) -> str:
        return f"ResponseHead({self.status}, {self.reason!r}, {self.http_version!r})"


def head_lines(buffer: bytes | bytearray, unchecked: int, at: int, end: int) -> list[bytes]:
    """The head's lines, refused if it holds a control character or a bare CR or LF."""
    bad = _CONTROL.search(buffer, unchecked, end)
    if bad is not None:
        raise httpx.RemoteProtocolError(bad_byte_message(bad.group()))
    head = bytes(buffer[at:end])
    lines = head.split(b"\r\n")
    # Split at every CRLF, so any CR or LF left is a bare one.
    if head.count(b"\r") >= len(lines) or head.count(b"\n") >= len(lines):
        raise httpx.RemoteProtocolError(bad_byte_message(b"\r"))
    return lines


def fields_of(lines: list[bytes], start: int) -> list[tuple[bytes, bytes]]:
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
        if TOKEN.fullmatch(name) is None:
            if b" " in name or b"\t" in name:
                raise httpx.RemoteProtocolError(f"a header name with whitespace: {name!r}")
            raise httpx.RemoteProtocolError(f"a header name that is not a token: {name!r}")
        fields.append((name, line[colon + 1 :].strip(b" \t")))
    return fields


def framing(head: ResponseHead) -> tuple[int | None, bool, bool]:
    """The head's Content-Length, whether it is chunked, whether it says close; checked."""
    length: int | None = None
    declared = b""
    chunked = close = False
    for name, value in head.headers:
        lowered = name.lower()
        if lowered == b"content-length":
            if not value.isdigit() or len(value) > MAX_LENGTH_DIGITS:
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
            close = close or b"close" in tokens(value)
    if chunked and length is not None:
        raise httpx.RemoteProtocolError("both Transfer-Encoding and Content-Length")
    return length, chunked, close


def tokens(value: bytes) -> list[bytes]:
    return [token.strip(b" \t").lower() for token in value.split(b",")]


def bad_byte_message(found: bytes) -> str:
    if found in (b"\r", b"\n"):
        return "a CR or LF that is not part of a CRLF in the response head"
    return f"a control character {found!r} in the response head"
