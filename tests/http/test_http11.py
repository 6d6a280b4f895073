"""The library's HTTP/1.1 codec (``follower._http``'s ``_request``, ``_head``, ``_response``):
each rule, and h11 as the oracle.

Unit tests state each rule of the module's docstring: what is framed, what is
refused, when a connection may carry another exchange. The differential tests
hold the codec to h11 (which the transport used before it):

- valid responses, cut into arbitrary pieces: both parsers agree on the status,
  headers, body and whether the connection may be reused;
- arbitrary and mutated bytes: whenever ours accepts a response, h11 accepts it
  too, with the same status, headers and body (ours is never more lenient);
- requests: what ours serialises, h11 parses as a server into the same method,
  target, headers and body.

Pure code, no I/O: these are plain (sync) tests.
"""

from __future__ import annotations

import re
import tracemalloc
from dataclasses import dataclass
from typing import Any

import h11
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from follower._http._head import MAX_HEAD_BYTES, MAX_HEADERS
from follower._http._request import MAX_KNOWN_HEADS, KnownHeads, RequestWriter
from follower._http._response import (
    END,
    MAX_CHUNK_LINE_BYTES,
    MAX_CHUNKS_A_CALL,
    MAX_INTERIM_RESPONSES,
    NEED_DATA,
    PAUSE,
    ResponseParser,
)


@dataclass
class Parsed:
    status: int
    reason: bytes
    version: bytes  # b"1.1" or b"1.0", as h11 names it
    headers: list[tuple[bytes, bytes]]  # names lowercased, as h11 gives them
    body: bytes
    reusable: bool


def parse(
    *pieces: bytes,
    head_request: bool = False,
    request_close: bool = False,
    eof: bool = True,
    into: bool = False,
) -> Parsed:
    """Feed ``pieces`` in turn, then the end of the connection if more is needed.

    The body is taken piece by piece (``next_body``), or with ``into`` into one
    buffer (``body_into``), as the transport reads a capped body.
    """
    parser = ResponseParser(head_request=head_request, request_close=request_close)
    feed = iter([*pieces, *([b""] if eof else [])])

    def more() -> None:
        try:
            parser.feed(next(feed))
        except StopIteration:
            raise AssertionError("the parser wants more than there is") from None

    while (head := parser.next_head()) is None:
        more()
    body: list[bytes] = []
    while into:
        buffer = bytearray()
        while (signal := parser.body_into(buffer, 1 << 40)) is not END:
            if signal is NEED_DATA:
                more()
        body.append(bytes(buffer))
        break
    while not into:
        piece = parser.next_body()
        if piece is NEED_DATA:
            more()
        elif piece is END:
            break
        else:
            assert piece, "an empty piece of body"
            body.append(piece)
    return Parsed(
        head.status,
        head.reason,
        head.http_version.removeprefix(b"HTTP/"),
        [(name.lower(), value) for name, value in head.headers],
        b"".join(body),
        parser.reusable,
    )


def refused(*pieces: bytes, match: str, **options: Any) -> None:
    with pytest.raises(httpx.RemoteProtocolError, match=match):
        parse(*pieces, **options)


def response(*lines: str, body: bytes = b"") -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# --- status lines ------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_http_1_1_and_1_0_status_lines_are_read(version: str) -> None:
    parsed = parse(response(f"HTTP/{version} 201 Created", "content-length: 2", body=b"ok"))
    assert (parsed.status, parsed.reason, parsed.version) == (201, b"Created", version.encode())
    assert parsed.body == b"ok"


def test_a_status_line_without_a_reason_is_read() -> None:
    assert parse(response("HTTP/1.1 204")).reason == b""
    assert parse(response("HTTP/1.1 204 ")).reason == b""


@pytest.mark.parametrize(
    "line",
    [
        "HTTP/2.0 200 OK",
        "HTTP/1.2 200 OK",
        "http/1.1 200 OK",
        "HTTP/1.1 20 OK",
        "HTTP/1.1 2000 OK",
        "HTTP/1.1 20x OK",
        "HTTP/1.1  200 OK",
        "HTTP/1.1 099 OK",
        "HTTP/1.1 600 OK",
        "ICY 200 OK",
    ],
)
def test_other_status_lines_are_refused(line: str) -> None:
    refused(response(line, "content-length: 0"), match="status line|not an HTTP")


def test_bytes_that_cannot_begin_a_response_are_refused_before_the_head_ends() -> None:
    # No blank line yet: refused now, not when the deadline comes.
    refused(b"SSH-2.0-OpenSSH", match="not an HTTP/1.x response", eof=False)
    refused(b"\r\nHTTP/1.1 200 OK\r\n", match="not an HTTP/1.x response", eof=False)


# --- the head's fields -------------------------------------------------------------------


def test_fields_keep_their_names_and_lose_the_whitespace_around_values() -> None:
    parser = ResponseParser()
    parser.feed(response("HTTP/1.1 200 OK", "X-Trace:  a b\t", "Content-Length: 0", "Empty:"))
    head = parser.next_head()
    assert head is not None
    assert head.headers == [(b"X-Trace", b"a b"), (b"Content-Length", b"0"), (b"Empty", b"")]


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (" folded: value", "obs-fold"),
        ("\tfolded: value", "obs-fold"),
        ("no colon here", "without a colon"),
        (": no name", "empty name"),
        ("spaced name: value", "whitespace"),
        ("name : value", "whitespace"),
        ("na(me): value", "not a token"),
        ("name: a\x00b", "control character"),
        ("name: a\x01b", "control character"),
        ("name: a\x7fb", "control character"),
        ("name: a\x0bb", "control character"),
        ("name: a\rb", "CR or LF"),
    ],
)
def test_malformed_header_lines_are_refused(line: str, match: str) -> None:
    refused(response("HTTP/1.1 200 OK", line, "content-length: 0"), match=match)


def test_a_bare_lf_is_refused_as_soon_as_it_arrives() -> None:
    refused(b"HTTP/1.1 200 OK\nContent-Length: 0\n", match="CR or LF", eof=False)
    refused(b"HTTP/1.1 200 OK\r\n\n", match="CR or LF", eof=False)


def test_a_trailing_cr_waits_for_its_lf() -> None:
    pieces = response("HTTP/1.1 200 OK", "content-length: 0")
    assert parse(*[pieces[i : i + 1] for i in range(len(pieces))]).status == 200


def test_obs_text_in_values_and_reasons_is_kept() -> None:
    parsed = parse(b"HTTP/1.1 200 \xe9t\xe9\r\nX: caf\xe9\r\ncontent-length: 0\r\n\r\n")
    assert parsed.reason == b"\xe9t\xe9"
    assert (b"x", b"caf\xe9") in parsed.headers


def test_the_head_is_bounded_in_size() -> None:
    filler = "x-filler: " + "a" * 1000
    lines = ["HTTP/1.1 200 OK"] + [filler] * (MAX_HEAD_BYTES // 1000)
    refused(response(*lines), match="over 65536 bytes")
    # Also while it is still arriving: never buffered without bound.
    refused(response(*lines)[:-4], match="over 65536 bytes", eof=False)


def test_the_head_is_bounded_in_fields() -> None:
    many = [f"x-{i}: v" for i in range(MAX_HEADERS)]
    assert parse(response("HTTP/1.1 200 OK", *many)).status == 200  # read to EOF
    refused(response("HTTP/1.1 200 OK", *many, "one-more: v"), match="over 128 header fields")


# --- interim answers -----------------------------------------------------------------------


def test_interim_answers_are_skipped() -> None:
    parsed = parse(
        response("HTTP/1.1 100 Continue"),
        response("HTTP/1.1 103 Early Hints", "link: </a.css>; rel=preload"),
        response("HTTP/1.1 200 OK", "content-length: 1", body=b"x"),
    )
    assert (parsed.status, parsed.body, parsed.reusable) == (200, b"x", True)
    assert parsed.headers == [(b"content-length", b"1")]


def test_101_switching_protocols_is_refused() -> None:
    refused(response("HTTP/1.1 101 Switching Protocols", "upgrade: h2c"), match="101")


def test_interim_answers_without_end_are_refused() -> None:
    interim = response("HTTP/1.1 100 Continue") * (MAX_INTERIM_RESPONSES + 1)
    refused(interim + response("HTTP/1.1 200 OK"), match="interim")


# --- body framing ----------------------------------------------------------------------------


def test_content_length_frames_the_body_and_leaves_the_connection_reusable() -> None:
    parsed = parse(response("HTTP/1.1 200 OK", "content-length: 5", body=b"hello"), eof=False)
    assert (parsed.body, parsed.reusable) == (b"hello", True)


def test_several_content_lengths_must_agree() -> None:
    agreed = response("HTTP/1.1 200 OK", "content-length: 3", "Content-Length: 3", body=b"abc")
    assert parse(agreed).body == b"abc"
    refused(
        response("HTTP/1.1 200 OK", "content-length: 3", "content-length: 4", body=b"abcd"),
        match="conflicting",
    )


@pytest.mark.parametrize("value", ["+5", "-1", "0x5", "5 5", "5,5", "five", "", "1" * 19])
def test_a_content_length_is_digits_only(value: str) -> None:
    refused(response("HTTP/1.1 200 OK", f"content-length: {value}", body=b"x" * 5), match="Length")


def test_chunked_bodies_are_read_extensions_ignored_trailers_dropped() -> None:
    parsed = parse(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n"
        b"0A\r\n0123456789\r\n"
        b"3  \r\nabc\r\n"
        b"0\r\nx-checksum: 1\r\nx-other: 2\r\n\r\n",
        eof=False,
    )
    assert parsed.body == b"hello0123456789abc"
    assert parsed.reusable
    assert parsed.headers == [(b"transfer-encoding", b"Chunked")]


@pytest.mark.parametrize(
    ("chunks", "match"),
    [
        (b"5\r\nhelloXX0\r\n\r\n", "not followed by CRLF"),
        (b"g\r\nx\r\n0\r\n\r\n", "malformed chunk-size"),
        (b" 5\r\nhello\r\n0\r\n\r\n", "malformed chunk-size"),
        (b"5 ;x\r\nhello\r\n0\r\n\r\n", "malformed chunk-size"),
        (b"-5\r\nhello\r\n0\r\n\r\n", "malformed chunk-size"),
        (b"1" * 17 + b"\r\n", "malformed chunk-size"),
        (b"5;\x00\r\nhello\r\n0\r\n\r\n", "malformed chunk-size"),
        (b"0\r\ncontent-length: 5\r\n\r\n", "trailer"),
        (b"0\r\ntransfer-encoding: chunked\r\n\r\n", "trailer"),
        (b"0\r\nbad trailer\r\n\r\n", "colon"),
    ],
)
def test_malformed_chunked_bodies_are_refused(chunks: bytes, match: str) -> None:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    refused(head + chunks, match=match)


def test_chunk_size_lines_are_bounded() -> None:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    line = b"5;" + b"e" * MAX_CHUNK_LINE_BYTES
    refused(head + line, match="chunk-size line over", eof=False)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (["transfer-encoding: gzip"], "other than chunked"),
        (["transfer-encoding: gzip, chunked"], "other than chunked"),
        (["transfer-encoding: chunked", "transfer-encoding: chunked"], "several"),
        (["transfer-encoding: chunked", "content-length: 5"], "both"),
    ],
)
def test_transfer_encodings_other_than_chunked_alone_are_refused(
    fields: list[str], match: str
) -> None:
    refused(response("HTTP/1.1 200 OK", *fields, body=b"5\r\nhello\r\n0\r\n\r\n"), match=match)


def test_a_chunked_http_1_0_response_is_refused() -> None:
    refused(response("HTTP/1.0 200 OK", "transfer-encoding: chunked"), match="HTTP/1.0")


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_without_framing_the_body_runs_to_eof_and_the_connection_is_not_reused(
    version: str,
) -> None:
    parsed = parse(response(f"HTTP/{version} 200 OK"), b"all ", b"of it")
    assert (parsed.body, parsed.reusable) == (b"all of it", False)


@pytest.mark.parametrize("status", [204, 304])
def test_204_and_304_have_no_body(status: int) -> None:
    parsed = parse(response(f"HTTP/1.1 {status} X", "content-length: 10"), eof=False)
    assert (parsed.body, parsed.reusable) == (b"", True)


def test_a_head_request_gets_no_body() -> None:
    answer = response("HTTP/1.1 200 OK", "content-length: 10")
    parsed = parse(answer, head_request=True, eof=False)
    assert (parsed.body, parsed.reusable) == (b"", True)


@pytest.mark.parametrize(
    ("piece", "match"),
    [
        (b"", "without answering"),
        (b"HTTP/1.1 200 OK\r\ncontent-le", "middle of the response head"),
        (response("HTTP/1.1 200 OK", "content-length: 10", body=b"short"), "middle of the body"),
        (
            response("HTTP/1.1 200 OK", "transfer-encoding: chunked", body=b"5\r\nhel"),
            "middle of the body",
        ),
        (
            response("HTTP/1.1 200 OK", "transfer-encoding: chunked", body=b"5\r\nhello"),
            "chunked body",
        ),
    ],
    ids=["before-the-head", "in-the-head", "in-a-length-body", "in-a-chunk", "before-a-crlf"],
)
def test_the_end_of_the_connection_mid_response_is_refused(piece: bytes, match: str) -> None:
    refused(piece, match=match)


# --- keep-alive --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "fields", "request_close", "reusable"),
    [
        ("1.1", [], False, True),
        ("1.1", ["connection: keep-alive"], False, True),
        ("1.1", ["connection: close"], False, False),
        ("1.1", ["Connection: keep-alive, Close"], False, False),
        ("1.1", [], True, False),
        ("1.0", [], False, False),
        ("1.0", ["connection: keep-alive"], False, False),
    ],
)
def test_only_http_1_1_without_connection_close_is_reused(
    version: str, fields: list[str], request_close: bool, reusable: bool
) -> None:
    answer = response(f"HTTP/{version} 200 OK", "content-length: 1", *fields, body=b"x")
    assert parse(answer, request_close=request_close, eof=False).reusable is reusable


def test_bytes_past_the_body_forbid_reuse() -> None:
    answer = response("HTTP/1.1 200 OK", "content-length: 1", body=b"x")
    assert parse(answer + b"HTTP/1.1 200 OK\r\n", eof=False).reusable is False


def test_a_body_not_read_to_its_end_forbids_reuse() -> None:
    parser = ResponseParser()
    parser.feed(response("HTTP/1.1 200 OK", "content-length: 10", body=b"12345"))
    assert parser.next_head() is not None
    assert parser.next_body() == b"12345"
    assert parser.reusable is False


def test_the_end_of_the_connection_after_the_body_forbids_reuse() -> None:
    parser = ResponseParser()
    parser.feed(response("HTTP/1.1 200 OK", "content-length: 1", body=b"x"))
    assert parser.next_head() is not None
    assert parser.next_body() == b"x"
    assert parser.next_body() is END
    parser.feed(b"")
    assert parser.reusable is False


def test_a_body_that_arrives_whole_is_handed_over_without_a_copy() -> None:
    parser = ResponseParser()
    parser.feed(response("HTTP/1.1 200 OK", "content-length: 1000"))
    assert parser.next_head() is not None
    body = b"x" * 1000
    parser.feed(body)
    assert parser.next_body() is body


def test_what_was_parsed_is_dropped_so_the_parser_holds_a_chunk_line_and_a_receive() -> None:
    # 16 MiB of 4 KiB chunk lines, each before one byte of body, fed as a socket
    # delivers it. The buffer kept everything fed once a line straddled two receives
    # (18 MiB held at the end); it holds at most a chunk line and the last receive.
    line = b"1;" + b"e" * (MAX_CHUNK_LINE_BYTES - 100) + b"\r\n"
    wire = (line + b"x\r\n") * 4200 + b"0\r\n\r\n"
    receive = 65536
    for into in (False, True):
        parser = ResponseParser()
        parser.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        assert parser.next_head() is not None
        body = bytearray()
        tracemalloc.start()
        try:
            for at in range(0, len(wire), receive):
                parser.feed(wire[at : at + receive])
                if into:
                    while parser.body_into(body, 1 << 30) is PAUSE:
                        pass
                else:
                    while isinstance(piece := parser.next_body(), bytes):
                        body += piece
                assert parser.buffered < MAX_CHUNK_LINE_BYTES
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert body == b"x" * 4200
        assert parser.next_body() is END
        assert peak < 4 * receive, (into, peak)


def test_body_into_fills_one_buffer_within_its_room_and_pauses_between_many_chunks() -> None:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    chunks = b"1\r\nx\r\n" * (MAX_CHUNKS_A_CALL + 10) + b"0\r\n\r\n"
    parser = ResponseParser()
    parser.feed(head + chunks)
    assert parser.next_head() is not None
    body = bytearray()
    assert parser.body_into(body, 1 << 30) is PAUSE  # its share of chunks parsed
    assert (len(body), parser.chunks) == (MAX_CHUNKS_A_CALL, MAX_CHUNKS_A_CALL)
    assert parser.body_into(body, 5) is NEED_DATA  # no room left: the body is longer
    assert len(body) == MAX_CHUNKS_A_CALL + 5
    assert parser.body_into(body, 1 << 30) is END
    assert body == b"x" * (MAX_CHUNKS_A_CALL + 10)
    assert parser.reusable
    # A Content-Length body that fills the room exactly is whole.
    parser = ResponseParser()
    parser.feed(response("HTTP/1.1 200 OK", "content-length: 5", body=b"hello"))
    assert parser.next_head() is not None
    body = bytearray()
    assert parser.body_into(body, 5) is END
    assert body == b"hello"


# --- requests ----------------------------------------------------------------------------


HOST = (b"Host", b"agent.example")


def test_a_request_with_a_content_length_body_is_one_buffer() -> None:
    writer = RequestWriter(b"POST", b"/ext/trajectory?x=1", [HOST, (b"Content-Length", b"2")])
    assert writer.whole(b"{}") == (
        b"POST /ext/trajectory?x=1 HTTP/1.1\r\nHost: agent.example\r\nContent-Length: 2\r\n\r\n{}"
    )


def test_known_heads_check_a_head_once_and_start_afresh_when_full() -> None:
    known = KnownHeads()
    fields = [HOST, (b"Content-Length", b"2")]
    first = RequestWriter(b"POST", b"/", fields, known_heads=known)
    again = RequestWriter(b"POST", b"/", list(fields), known_heads=known)
    assert again.head is first.head  # checked and joined once
    assert len(known) == 1
    for n in range(MAX_KNOWN_HEADS):
        RequestWriter(b"GET", f"/{n}".encode(), [HOST], known_heads=known)
    assert len(known) == 1  # full at MAX_KNOWN_HEADS: cleared, then the last one kept
    with pytest.raises(httpx.LocalProtocolError):  # a bad head is never kept
        RequestWriter(b"GET", b"/", [HOST, (b"X", b"a\nb")], known_heads=known)
    assert len(known) == 1
    known.clear()
    assert len(known) == 0


def test_a_streamed_body_is_chunked_when_the_head_says_so() -> None:
    writer = RequestWriter(b"POST", b"/", [HOST, (b"Transfer-Encoding", b"chunked")])
    sent = writer.head + writer.piece(b"hello") + writer.piece(b"") + writer.piece(b"!")
    assert sent + writer.end() == (
        b"POST / HTTP/1.1\r\nHost: agent.example\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n"
    )


@pytest.mark.parametrize(
    "field",
    [
        (b"X-Bad", b"a\r\nInjected: yes"),
        (b"X-Bad", b"a\nb"),
        (b"X-Bad", b"a\rb"),
        (b"X-Bad", b"a\x00b"),
        (b"X-Bad", b"a\x1bb"),
        (b"X-Bad\r\nInjected", b"yes"),
        (b"X Bad", b"v"),
        (b"X-Bad:", b"v"),
        (b"", b"v"),
    ],
)
def test_fields_that_cannot_be_sent_are_refused(field: tuple[bytes, bytes]) -> None:
    with pytest.raises(httpx.LocalProtocolError):
        RequestWriter(b"GET", b"/", [HOST, field])


@pytest.mark.parametrize(
    ("method", "target", "fields"),
    [
        (b"G ET", b"/", [HOST]),
        (b"CONNECT", b"agent.example:443", [HOST]),
        (b"GET", b"/a b", [HOST]),
        (b"GET", b"/a\r\nb", [HOST]),
        (b"GET", b"", [HOST]),
        (b"GET", b"/", []),
        (b"POST", b"/", [HOST, (b"Content-Length", b"x")]),
        (b"POST", b"/", [HOST, (b"Content-Length", b"1"), (b"Content-Length", b"2")]),
        (b"POST", b"/", [HOST, (b"Transfer-Encoding", b"gzip")]),
        (b"POST", b"/", [HOST, (b"Content-Length", b"1"), (b"Transfer-Encoding", b"chunked")]),
    ],
    ids=[
        "method",
        "connect",
        "target-space",
        "target-crlf",
        "empty-target",
        "no-host",
        "bad-length",
        "two-lengths",
        "gzip",
        "both-framings",
    ],
)
def test_requests_that_cannot_be_sent_are_refused(
    method: bytes, target: bytes, fields: list[tuple[bytes, bytes]]
) -> None:
    with pytest.raises(httpx.LocalProtocolError):
        RequestWriter(method, target, fields)


def test_the_body_must_match_its_content_length() -> None:
    writer = RequestWriter(b"POST", b"/", [HOST, (b"Content-Length", b"3")])
    with pytest.raises(httpx.LocalProtocolError, match="more body"):
        writer.whole(b"four")
    short = RequestWriter(b"POST", b"/", [HOST, (b"Content-Length", b"3")])
    short.piece(b"ab")
    with pytest.raises(httpx.LocalProtocolError, match="2 bytes of body"):
        short.end()
    with pytest.raises(httpx.LocalProtocolError):
        RequestWriter(b"POST", b"/", [HOST]).whole(b"unframed")


def test_connection_close_on_the_request_is_remembered() -> None:
    assert RequestWriter(b"GET", b"/", [HOST, (b"Connection", b"Close")]).close
    assert not RequestWriter(b"GET", b"/", [HOST, (b"Connection", b"keep-alive")]).close


# --- h11 as the oracle ---------------------------------------------------------------------

DIFFERENTIAL = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
FIELD_BYTES = [9, *range(0x20, 0x7F), *range(0x80, 0x100)]
FRAMING = {b"content-length", b"transfer-encoding", b"connection", b"host", b"expect"}


def field_value() -> st.SearchStrategy[bytes]:
    """A field value: allowed bytes, with no whitespace at either end."""
    return (
        st.lists(st.sampled_from(FIELD_BYTES), max_size=30)
        .map(bytes)
        .map(lambda v: v.strip(b" \t"))
    )


def field_name() -> st.SearchStrategy[bytes]:
    return (
        st.text(TOKEN_CHARS, min_size=1, max_size=20)
        .map(str.encode)
        .filter(lambda n: n.lower() not in FRAMING)
    )


fields = st.lists(st.tuples(field_name(), field_value()), max_size=8)
ows = st.sampled_from([b"", b" ", b"\t", b"  \t"])


@dataclass
class Message:
    pieces: list[bytes]
    head_request: bool
    request_close: bool


@st.composite
def valid_responses(draw: st.DrawFn) -> Message:
    """A valid response (after any interim ones), cut into arbitrary pieces."""
    version = draw(st.sampled_from([b"1.1", b"1.0"]))
    head_request = draw(st.booleans())
    status = draw(st.sampled_from([200, 201, 204, 206, 304, 404, 500, 503]))
    no_body = head_request or status in (204, 304)
    framing = draw(st.sampled_from(["length", "eof", *(["chunked"] if version == b"1.1" else [])]))
    body = b"" if no_body and framing != "length" else draw(st.binary(max_size=300))
    lines = [
        b"HTTP/" + version + b" %d" % status + draw(st.sampled_from([b"", b" ", b" OK", b" A b"]))
    ]
    extra = draw(fields)
    for name, value in extra:
        lines.append(name + b":" + draw(ows) + value + draw(ows))
    if draw(st.booleans()):
        lines.append(b"Connection: " + draw(st.sampled_from([b"close", b"keep-alive"])))
    if framing == "length":
        for _ in range(draw(st.integers(1, 2))):
            lines.append(b"Content-Length: %d" % len(body))
        payload = b"" if no_body else body
    elif framing == "chunked":
        lines.append(b"Transfer-Encoding: " + draw(st.sampled_from([b"chunked", b"CHUNKED"])))
        payload = b"" if no_body else draw(chunked_body(body))
    else:
        payload = b"" if no_body else body
    interim = b"".join(
        b"HTTP/1.1 %d Interim\r\nx-interim: 1\r\n\r\n" % code
        for code in draw(st.lists(st.sampled_from([100, 102, 103]), max_size=2))
    )
    data = interim + b"\r\n".join(lines) + b"\r\n\r\n" + payload
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return Message([p for p in pieces if p], head_request, draw(st.booleans()))


@st.composite
def chunked_body(draw: st.DrawFn, body: bytes) -> bytes:
    out = []
    at = 0
    while at < len(body):
        size = draw(st.integers(1, max(1, len(body) - at)))
        size_text = draw(st.sampled_from(["%x", "%X", "0%x"])) % size
        extension = draw(st.sampled_from([b"", b";a", b";a=b", b';n="v v"']))
        out.append(size_text.encode() + extension + b"\r\n" + body[at : at + size] + b"\r\n")
        at += size
    out.append(b"0\r\n")
    for name, value in draw(st.lists(st.tuples(field_name(), field_value()), max_size=2)):
        out.append(name + b": " + value + b"\r\n")
    out.append(b"\r\n")
    return b"".join(out)


class OracleRefused(Exception):
    pass


def h11_parse(pieces: list[bytes], *, head_request: bool, request_close: bool) -> Parsed:
    """What h11, as the client that sent the request, makes of the same bytes."""
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=4 * MAX_HEAD_BYTES)
    headers = [("Host", "agent.example")] + ([("Connection", "close")] if request_close else [])
    connection.send(
        h11.Request(method="HEAD" if head_request else "GET", target="/", headers=headers)
    )
    connection.send(h11.EndOfMessage())
    feed = iter([*pieces, b""])
    head: h11.Response | None = None
    body = []
    closed = False  # h11 still calls a connection DONE once the server closed it
    try:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = next(feed)
                closed = not data
                connection.receive_data(data)
            elif isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise OracleRefused("closed before the end of the message")
    except h11.ProtocolError as exc:
        raise OracleRefused(str(exc)) from exc
    assert head is not None
    return Parsed(
        head.status_code,
        bytes(head.reason),
        bytes(head.http_version),
        list(head.headers),
        b"".join(body),
        not closed and connection.our_state is h11.DONE and connection.their_state is h11.DONE,
    )


def comparable(parsed: Parsed) -> Parsed:
    """h11 keeps one of several equal Content-Lengths and lowercases Transfer-Encoding."""
    seen_length = False
    headers = []
    for name, value in parsed.headers:
        if name == b"content-length":
            if seen_length:
                continue
            seen_length = True
        headers.append((name, value.lower() if name == b"transfer-encoding" else value))
    return Parsed(
        parsed.status, parsed.reason, parsed.version, headers, parsed.body, parsed.reusable
    )


@DIFFERENTIAL
@given(valid_responses())
def test_valid_responses_parse_as_h11_parses_them(message: Message) -> None:
    options = {"head_request": message.head_request, "request_close": message.request_close}
    ours = parse(*message.pieces, **options)
    theirs = h11_parse(message.pieces, **options)
    assert comparable(ours) == comparable(theirs)
    assert parse(*message.pieces, into=True, **options) == ours


STRUCTURAL = frozenset(b"\r\n:; ")
# Weighted: most mutations keep a response whole enough to be accepted, or not.
INSERTED = [b" ", b"\t", b":", b";", b",", b"0", b"a", b"\x00", b"\x0b", b"\x7f", b"\x85"]
INSERTED += [b"\r\n", b"\r\n ", b"\r\n\r\n", b"\r", b"\n"]
MUTATIONS = ["insert"] * 4 + ["flip", "replace"] * 2 + ["delete", "huge", "truncate"]


def mutate(data: bytes, draw: st.DrawFn) -> bytes:
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        # Mostly next to the bytes that give a message its structure, where a
        # parser's leniency hides; otherwise anywhere.
        marks = [i for i, byte in enumerate(data) if byte in STRUCTURAL]
        if marks and draw(st.booleans()):
            where = draw(st.sampled_from(marks)) + draw(st.sampled_from([0, 1]))
        else:
            where = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(MUTATIONS))
        if kind == "truncate":
            data = data[:where]
        elif kind == "flip" and where < len(data):
            bit = 1 << draw(st.integers(0, 7))
            data = data[:where] + bytes([data[where] ^ bit]) + data[where + 1 :]
        elif kind == "insert":
            inserted = draw(st.sampled_from(INSERTED))
            data = data[:where] + inserted + data[where:]
        elif kind == "delete":
            data = data[:where] + data[where + draw(st.integers(1, 4)) :]
        elif kind == "huge":
            number = draw(
                st.sampled_from([b"9" * 19, b"9" * 40, b"f" * 17, b"18446744073709551616"])
            )
            data = data[:where] + number + data[where:]
        elif kind == "replace":
            data = data[:where] + draw(st.binary(max_size=4)) + data[where + 1 :]
    return data


@st.composite
def mutated_responses(draw: st.DrawFn) -> Message:
    if draw(st.integers(0, 9)) == 0:
        data = draw(st.binary(max_size=200))
        return Message([data] if data else [], draw(st.booleans()), draw(st.booleans()))
    message = draw(valid_responses())
    data = mutate(b"".join(message.pieces), draw)
    cut = draw(st.integers(0, len(data)))
    pieces = [piece for piece in (data[:cut], data[cut:]) if piece]
    return Message(pieces, message.head_request, message.request_close)


@settings(DIFFERENTIAL, max_examples=600)
@given(mutated_responses())
# Where a parser's leniency usually hides (h11 accepts some; ours must not differ).
@example(Message([b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello"], False, False))
@example(Message([b"HTTP/1.1 200 OK\r\nA: b\r\n folded: c\r\n\r\n"], False, False))
@example(Message([b"HTTP/1.1 200 OK\r\n folded: c\r\n\r\n"], False, False))
@example(Message([b"HTTP/1.1 200 OK\nContent-Length: 0\n\n"], False, False))
@example(Message([b"HTTP/1.1 200 OK\r\nA: b\x00c\r\nContent-Length: 0\r\n\r\n"], False, False))
@example(Message([b"HTTP/1.1 200 OK\r\nA : b\r\nContent-Length: 0\r\n\r\n"], False, False))
@example(Message([b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"], False, False))
@example(
    Message(
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1 ;x\r\na\r\n0\r\n\r\n"],
        False,
        False,
    )
)
@example(
    Message(
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n t: v\r\n\r\n"],
        False,
        False,
    )
)
def test_ours_is_never_more_lenient_than_h11(message: Message) -> None:
    options = {"head_request": message.head_request, "request_close": message.request_close}
    try:
        ours = parse(*message.pieces, **options)
    except httpx.RemoteProtocolError as exc:
        # Either way of taking the body refuses it alike.
        with pytest.raises(httpx.RemoteProtocolError, match=re.escape(str(exc))):
            parse(*message.pieces, into=True, **options)
        return  # refused: stricter than h11 is fine
    assert parse(*message.pieces, into=True, **options) == ours
    try:
        theirs = h11_parse(message.pieces, **options)
    except OracleRefused as exc:
        raise AssertionError(f"ours accepted what h11 refuses ({exc}): {ours}") from None
    ours, theirs = comparable(ours), comparable(theirs)
    assert (ours.status, ours.reason, ours.version, ours.headers, ours.body) == (
        theirs.status,
        theirs.reason,
        theirs.version,
        theirs.headers,
        theirs.body,
    )
    assert not ours.reusable or theirs.reusable


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, bytes, list[tuple[bytes, bytes]], list[bytes]]:
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE", b"PATCH", b"X-CUSTOM"]))
    target = b"/" + draw(st.lists(st.sampled_from(range(0x21, 0x7F)), max_size=40).map(bytes))
    headers = [(draw(st.sampled_from([b"Host", b"host", b"HOST"])), b"agent.example:8000")]
    headers += draw(fields)
    pieces = draw(st.lists(st.binary(max_size=50), max_size=4))
    if draw(st.booleans()):
        headers.append((b"Transfer-Encoding", b"chunked"))
    else:
        headers.append((b"Content-Length", b"%d" % sum(map(len, pieces))))
    if draw(st.booleans()):
        headers.append((b"Connection", b"close"))
    order = draw(st.permutations(range(len(headers))))
    return method, target, [headers[i] for i in order], pieces


@DIFFERENTIAL
@given(requests())
def test_h11_as_a_server_reads_what_ours_serialises(
    request: tuple[bytes, bytes, list[tuple[bytes, bytes]], list[bytes]],
) -> None:
    method, target, headers, pieces = request
    writer = RequestWriter(method, target, headers)
    data = writer.head + b"".join(writer.piece(piece) for piece in pieces) + writer.end()
    server = h11.Connection(h11.SERVER)
    server.receive_data(data)
    event = server.next_event()
    assert isinstance(event, h11.Request)
    assert (event.method, event.target, event.http_version) == (method, target, b"1.1")
    expected = [(name.lower(), value) for name, value in headers]
    assert list(event.headers) == expected
    body = []
    while not isinstance(event := server.next_event(), h11.EndOfMessage):
        assert isinstance(event, h11.Data)
        body.append(bytes(event.data))
    assert b"".join(body) == b"".join(pieces)
    assert server.next_event() is h11.NEED_DATA  # nothing past the end
    assert writer.close is (server.their_state is h11.MUST_CLOSE)
