"""An HTTP/1.1 request's bytes: its head checked once, its body framed as the head says.

Pure (no I/O): the library's transport sends what :class:`RequestWriter` makes.
A request that cannot be sent as it is (CR, LF, NUL or any control but HTAB in
a field, a field name that is no token, a method or target that cannot be sent,
framing fields that disagree) raises ``httpx.LocalProtocolError`` before a
connection is taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import attrs
import httpx

from ._head import FIELD_VALUE, FRAMING_FIELDS, MAX_LENGTH_DIGITS, TOKEN, tokens

if TYPE_CHECKING:
    from collections.abc import Sequence

    _Head = tuple[bytes, bool, bool, int | None]

_REQUEST_FIELDS_READ = frozenset({*FRAMING_FIELDS, b"connection", b"host"})


@final
class RequestWriter:
    """One request's bytes: its head, checked, and its body framed as the head says.

    The body is framed by the head's ``Content-Length`` (the bytes sent must
    match it), its ``Transfer-Encoding: chunked``, or, with neither, must be
    empty. CR, LF, NUL (any control but HTAB) in a field, a field name that is
    no token, and a method or target that cannot be sent raise
    ``httpx.LocalProtocolError``.
    """

    # Not attrs: one is made for every request, from a head its __init__ checks; attrs
    # would add a named constructor's call to each.
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
@attrs.define(eq=False)
class KnownHeads:
    """Request heads checked already, so a head sent over and over is checked once.

    A follower sends the same head read after read (only a Content-Length
    changes, now and then). Keyed by (method, target, fields): the head's bytes,
    whether its body is chunked, whether it says close, and its Content-Length.
    The fields hold credentials (``Authorization``), so the heads belong to
    whoever owns the connections, the transport, and go with it: :meth:`clear`
    when it closes. At most ``MAX_KNOWN_HEADS``, then it starts afresh.
    """

    _heads: dict[tuple[bytes, bytes, tuple[tuple[bytes, bytes], ...]], _Head] = attrs.field(
        factory=dict, init=False
    )

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
    if TOKEN.fullmatch(method) is None:
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
            if not declared.isdigit() or len(declared) > MAX_LENGTH_DIGITS:
                raise httpx.LocalProtocolError(f"bad Content-Length {value!r}")
            if length is not None and int(declared) != length:
                raise httpx.LocalProtocolError("conflicting Content-Length headers")
            length = int(declared)
        elif lowered == b"transfer-encoding":
            if chunked or value.strip(b" \t").lower() != b"chunked":
                raise httpx.LocalProtocolError("only Transfer-Encoding: chunked is supported")
            chunked = True
        elif lowered == b"connection":
            close = close or b"close" in tokens(value)
        else:
            has_host = True
    if chunked and length is not None:
        raise httpx.LocalProtocolError("both Content-Length and Transfer-Encoding")
    if not has_host:
        raise httpx.LocalProtocolError("an HTTP/1.1 request needs a Host header")
    lines.append(b"\r\n")
    return b"".join(lines), chunked, close, None if chunked else (length or 0)


def _check_fields(headers: Sequence[tuple[bytes, bytes]]) -> None:
    """Refuse a request field that cannot be sent as it is."""
    # Token characters joined are a token, field-value characters joined a value:
    # two matches for all the fields; the loop only names the culprit.
    names = b"".join(name for name, _ in headers)
    values = b"".join(value for _, value in headers)
    if (
        (TOKEN.fullmatch(names) is not None or not headers)
        and FIELD_VALUE.fullmatch(values) is not None
        and all(name for name, _ in headers)
    ):
        return
    for name, value in headers:
        if TOKEN.fullmatch(name) is None:
            raise httpx.LocalProtocolError(f"the header name {name!r} is not a token")
        if FIELD_VALUE.fullmatch(value) is None:
            raise httpx.LocalProtocolError(
                f"the value of header {name.decode()!r} holds CR, LF, NUL "
                "or another control character"
            )
    raise AssertionError("unreachable")  # pragma: no cover


def _has_byte_outside(data: bytes, low: int, high: int) -> bool:
    return min(data) < low or max(data) > high
