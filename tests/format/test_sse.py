"""The server-sent-events decoder (``follower._format._sse``): each rule, its bounds, and
httpx-sse as the oracle.

Unit tests state each rule of the module's docstring, as the HTML standard's
"Interpreting an event stream" words it, and each bound. The differential test
holds ``SSEDecoder``, fed in arbitrary pieces, to httpx-sse 0.4.3 driven as its
``EventSource.iter_sse`` drives it over a response's bytes (httpx's text decoder,
then httpx-sse's ``SSELineDecoder`` and ``SSEDecoder``).

httpx-sse departs from the standard in three places, so the comparison leaves
each out and a test here states the standard's rule there instead:

- it dispatches a block with no ``data`` line when the block set ``event``,
  ``id`` or ``retry`` (and, once any ``id`` was seen, every blank line), with
  empty data; the standard dispatches nothing while the data buffer is empty.
  The oracle's dispatch is dropped where its data buffer was empty
  (``test_a_block_with_no_data_is_not_dispatched``).
- it reads ``retry`` with ``int()``, which also takes ``+5``, ``-5``, `` 5``,
  ``5 ``, ``1_000`` and other scripts' digits; the standard takes ASCII digits
  only. The streams' ``retry`` values are those both read alike
  (``test_retry_is_ascii_digits_only``).
- it keeps a leading byte-order mark (httpx decodes with ``utf-8``, where the
  standard's UTF-8 decode drops one), which spoils the first line's field name.
  The oracle gets the stream without it (``test_a_leading_bom_is_dropped_once``).

``test_the_oracles_departures_are_still_there`` pins the three: if httpx-sse
changes, it fails, and the comparison can take that part in. Where the two agree
with the standard (line ends, comments, fields, ``id`` with NUL, invalid UTF-8,
events cut off by the end) they agree on every stream tried, split anywhere.

Pure code, no I/O: plain (sync) tests.
"""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Iterable

import httpx
import pytest
from httpx_sse._api import _iter_sse_lines
from httpx_sse._decoders import SSEDecoder as OracleDecoder
from hypothesis import given
from hypothesis import strategies as st

from follower._format._sse import ServerSentEvent, SSEDecoder, SSEError

from ..support.hypothesis_profiles import property_settings, share_seed

BOM = b"\xef\xbb\xbf"
ROOMY = 1 << 20  # bounds no stream of the rule tests comes near

Event = tuple[str, str, str, int | None]  # type, data, last event id, retry


def events(
    *pieces: bytes,
    max_line_bytes: int = ROOMY,
    max_data_bytes: int = ROOMY,
    max_idle_bytes: int = ROOMY,
) -> list[ServerSentEvent]:
    """What one decoder makes of ``pieces``, fed in turn."""
    decoder = SSEDecoder(
        max_line_bytes=max_line_bytes, max_data_bytes=max_data_bytes, max_idle_bytes=max_idle_bytes
    )
    return [event for piece in pieces for event in decoder.feed(piece)]


def ours(pieces: Iterable[bytes]) -> list[Event]:
    return [(e.event, e.data, e.id, e.retry) for e in events(*pieces)]


def datas(*pieces: bytes) -> list[str]:
    return [event.data for event in events(*pieces)]


def oracle(stream: bytes) -> list[Event]:
    """httpx-sse's events for ``stream``, where the standard would dispatch one (see above)."""
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream)
    decoder = OracleDecoder()
    found = []
    for line in _iter_sse_lines(response):  # what EventSource.iter_sse reads
        had_data = bool(decoder._data)
        sse = decoder.decode(line.rstrip("\n"))
        if sse is not None and had_data:
            found.append((sse.event, sse.data, sse.id, sse.retry))
    return found


def byte_by_byte(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


# --- streams of SSE-ish pieces ---------------------------------------------------------

LINE_ENDS = [b"\n", b"\r", b"\r\n"]
# Characters that end a line for str.splitlines but not for the event-stream format, the
# byte-order mark, NUL, a colon, and multi-byte UTF-8 of two, three and four bytes.
ODD_CHARACTERS = "ab :\x00\x0b\x0c\x1c\x85\u2028\ufeffé€😀"
NAMES = [b"data", b"event", b"id", b"retry", b"Data", b"dat", b"datax", b"data ", b" data"]
NAMES += [b"foo", b"", b"\xffdata", BOM + b"data"]
# retry values both read alike: ASCII digits, and what int() refuses too.
RETRY_VALUES = [b"", b"0", b"007", b"1500", b"abc", b"5x", b"x5", b"1.5", b"1e3", b"\x00"]


def text_value() -> st.SearchStrategy[bytes]:
    odd = st.sampled_from(ODD_CHARACTERS)
    anything = st.characters(exclude_categories=["Cs"], exclude_characters="\r\n")
    return st.text(odd | anything, max_size=12).map(str.encode)


def raw_value() -> st.SearchStrategy[bytes]:
    """Bytes that may be no UTF-8 at all: cut sequences, stray continuations, surrogates."""
    pieces = st.sampled_from([b"\xff", b"\x80", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80"])
    return st.lists(pieces | st.binary(max_size=3), max_size=4).map(
        lambda parts: b"".join(parts).replace(b"\r", b"").replace(b"\n", b"")
    )


@st.composite
def field_line(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(NAMES))
    if name == b"retry":  # never "retry:  5": int(" 5") is 5, the standard ignores it
        colon = draw(st.sampled_from([b":", b": ", None]))
        value = draw(
            st.sampled_from(RETRY_VALUES) | st.integers(0, 10**12).map(lambda n: str(n).encode())
        )
    else:
        colon = draw(st.sampled_from([b":", b": ", b":  ", None]))
        value = draw(text_value() | raw_value())
    return name if colon is None else name + colon + value


def comment_line() -> st.SearchStrategy[bytes]:
    return (text_value() | raw_value()).map(lambda value: b":" + value)


def line() -> st.SearchStrategy[bytes]:
    # A blank line dispatches: as likely as a field line, so most streams have events.
    return st.one_of(field_line(), st.just(b""), comment_line(), field_line(), st.just(b""))


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """An event stream: lines, each with its own line end, perhaps a BOM, perhaps cut off."""
    lines = draw(st.lists(st.tuples(line(), st.sampled_from(LINE_ENDS)), max_size=25))
    stream = b"".join(text + end for text, end in lines)
    tail = draw(st.sampled_from([b"", b"", b"data: cut off", b"\r"]))
    return (BOM if draw(st.booleans()) else b"") + stream + tail


@st.composite
def split(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    """``stream`` in pieces cut anywhere, empty ones included.

    Many cuts fall just after a CR (between a CR and its LF, where a decoder must
    remember the CR) or inside the BOM, and some twice (an empty feed there).
    """
    after_cr = [i + 1 for i, byte in enumerate(stream) if byte == 0x0D]
    marks = [at for at in [*after_cr, 1, 2] if at <= len(stream)]
    cut = st.integers(0, len(stream)) | (st.sampled_from(marks) if marks else st.nothing())
    cuts = draw(st.lists(cut, max_size=12))
    cuts += draw(st.lists(st.sampled_from(cuts), max_size=2)) if cuts else []
    if draw(st.booleans()):  # an empty feed after every CR
        cuts += after_cr * 2
    cuts.sort()
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


# --- httpx-sse as the oracle -----------------------------------------------------------


@share_seed
@property_settings(500, shared=True)
@given(st.data())
def test_any_stream_in_any_pieces_gives_the_events_httpx_sse_gives(data: st.DataObject) -> None:
    stream = data.draw(streams(), label="stream")
    pieces = data.draw(split(stream), label="pieces")
    assert ours(pieces) == oracle(stream.removeprefix(BOM))


@pytest.mark.parametrize(
    "stream",
    [
        b"data: a\r\ndata: b\r\n\r\nid: 7\rdata: c\r\r",
        b"event: x\ndata\n\n:comment\ndata:  two spaces\ndata:\n\n",
        b"id: a\x00b\ndata: \xff\xe2\x82\n\nretry: 1500\ndata: x\n\ndata: y\n\n",
        b"data: \xe2\x82\xac\r\n\r\ndata: cut off",
    ],
)
def test_httpx_sse_agrees_on_these_in_every_two_pieces(stream: bytes) -> None:
    expected = oracle(stream)
    assert expected, "a stream the oracle dispatches nothing of tests too little"
    for cut in range(len(stream) + 1):
        assert ours([stream[:cut], stream[cut:]]) == expected, cut
    assert ours(byte_by_byte(stream)) == expected


def test_the_oracles_departures_are_still_there() -> None:
    # If one of these fails, httpx-sse changed: widen the comparison above to match.
    assert oracle(b"event: x\n\n") == []  # dropped by oracle(), but ...
    itself = OracleDecoder()
    assert itself.decode("event: x") is None
    dispatched = itself.decode("")  # ... httpx-sse itself dispatches it
    assert dispatched is not None
    assert (dispatched.event, dispatched.data) == ("x", "")
    for value in ("+5", "-5", " 5", "5 ", "1_000", "\u0665"):
        decoder = OracleDecoder()
        decoder.decode(f"retry: {value}")
        decoder.decode("data: x")
        sse = decoder.decode("")
        assert sse is not None
        assert sse.retry is not None, value  # int() read what the standard ignores
    assert oracle(BOM + b"data: x\n\n") == []  # the BOM stays, "\ufeffdata" is unknown


# --- splitting never changes the events ---------------------------------------------------


@share_seed
@property_settings(300, shared=True)
@given(st.data())
def test_how_a_stream_is_split_never_changes_its_events(data: st.DataObject) -> None:
    stream = data.draw(streams(), label="stream")
    one = data.draw(split(stream), label="one")
    other = data.draw(split(stream), label="other")
    assert ours(one) == ours(other) == ours([stream])


def test_a_cr_lf_cut_between_two_feeds_is_one_line_end() -> None:
    assert datas(b"data: a\r", b"\ndata: b\r\n\r\n") == ["a\nb"]
    assert datas(b"data: a\r", b"\n", b"data: b\r", b"\n\r", b"\n") == ["a\nb"]


def test_a_lf_after_a_feed_that_ends_inside_a_line_is_a_line_end() -> None:
    # The feed's last line end is a CR, but a line has begun after it: the next feed's
    # LF ends that line, it is no CR LF.
    assert datas(b"data: a\rdata: b", b"\ndata: c\n\n") == ["a\nb\nc"]
    assert datas(b"data: a\r\ndata: b", b"\n\n") == ["a\nb"]


def test_a_cr_lf_cut_by_empty_feeds_is_still_one_line_end() -> None:
    assert datas(b"data: a\r", b"", b"\ndata: b\r\n\r\n") == ["a\nb"]
    assert datas(b"data: a\r", b"", b"", b"\n", b"", b"\r\n") == ["a"]


def test_a_cr_then_another_cr_in_the_next_feed_is_a_blank_line() -> None:
    assert datas(b"data: a\r", b"\r") == ["a"]


# --- the rules, one by one -------------------------------------------------------------------


@pytest.mark.parametrize(
    "stream",
    [b"data: a\n\n", b"data: a\r\r", b"data: a\r\n\r\n", b"data: a\r\n\r", b"data: a\n\r\n"],
)
def test_lines_end_with_cr_lf_lf_or_cr(stream: bytes) -> None:
    assert datas(stream) == ["a"]
    assert datas(*byte_by_byte(stream)) == ["a"]


def test_line_ends_mix_within_one_stream() -> None:
    assert datas(b"data: a\r\ndata: b\rdata: c\n\r\n") == ["a\nb\nc"]


def test_a_cr_dispatches_at_once_without_waiting_for_a_lf() -> None:
    decoder = SSEDecoder(max_line_bytes=ROOMY, max_data_bytes=ROOMY)
    assert decoder.feed(b"data: a\n") == []
    assert [e.data for e in decoder.feed(b"\r")] == ["a"]


@pytest.mark.parametrize("char", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028"])
def test_other_unicode_line_breaks_are_data(char: str) -> None:
    assert datas(f"data: a{char}b\n\n".encode()) == [f"a{char}b"]


def test_a_leading_bom_is_dropped_once() -> None:
    assert datas(BOM + b"data: a\n\n") == ["a"]
    assert datas(*byte_by_byte(BOM + b"data: a\n\n")) == ["a"]
    assert datas(BOM, b"data: a\n\n") == ["a"]
    # A second one is the first line's: "\ufeffdata" is no field the standard knows.
    assert datas(BOM + BOM + b"data: a\n\ndata: b\n\n") == ["b"]
    # Anywhere else it is text.
    assert datas(b"data: a\n\n" + BOM + b"data: b\n\n") == ["a"]
    assert datas(b"data: " + BOM + b"a\n\n") == ["\ufeffa"]


@pytest.mark.parametrize(
    "start", [b"\xef", b"\xef\xbb", b"\xef\xbbx", b"\xefdata: a\n\n", b"\xbb\xbf"]
)
def test_a_start_that_is_not_a_bom_is_kept(start: bytes) -> None:
    stream = start + b"\ndata: b\n\n"
    assert datas(stream) == ["b"]
    assert datas(*byte_by_byte(stream)) == ["b"]
    assert events(b"\xef\xbb") == []  # still deciding: nothing yet


def test_a_line_starting_with_a_colon_is_a_comment() -> None:
    assert datas(b":\n: data: x\n:data: y\n\n") == []
    assert datas(b"data: a\n: keep-alive\ndata: b\n\n") == ["a\nb"]


def test_data_lines_join_with_lf() -> None:
    assert datas(b"data: a\ndata: b\ndata: c\n\n") == ["a\nb\nc"]
    assert datas(b"data: a\ndata\ndata:\n\n") == ["a\n\n"]


def test_one_space_after_the_colon_is_dropped_and_no_more() -> None:
    assert datas(b"data:a\n\ndata: a\n\ndata:  a\n\ndata:\ta\n\n") == ["a", "a", " a", "\ta"]
    assert datas(b"data: a: b\n\n") == ["a: b"]  # only the first colon splits


def test_a_line_without_a_colon_is_a_field_with_an_empty_value() -> None:
    assert datas(b"data\n\n") == [""]
    assert events(b"event\ndata: x\n\n")[0].event == "message"


def test_an_event_of_empty_data_is_dispatched() -> None:
    assert datas(b"data:\n\n") == [""]
    assert datas(b"data\ndata\n\n") == ["\n"]


def test_the_event_type_is_message_unless_set_and_lasts_one_event() -> None:
    found = events(b"data: a\n\nevent: ping\ndata: b\n\nevent:\ndata: c\n\ndata: d\n\n")
    assert [e.event for e in found] == ["message", "ping", "message", "message"]
    # A block with no data resets it too.
    assert [e.event for e in events(b"event: ping\n\ndata: a\n\n")] == ["message"]
    assert [e.event for e in events(b"event: a\nevent: b\ndata: x\n\n")] == ["b"]


def test_field_names_are_exact_and_unknown_ones_ignored() -> None:
    stream = b"Data: a\ndata : b\n data: c\ndatax: d\nfoo: e\ndata: f\n\n"
    assert datas(stream) == ["f"]


def test_the_last_event_id_lasts_until_changed() -> None:
    decoder = SSEDecoder(max_line_bytes=ROOMY, max_data_bytes=ROOMY)
    found = decoder.feed(b"id: 1\ndata: a\n\ndata: b\n\ndata: c\nid: 2\n\nid\ndata: d\n\n")
    assert [e.id for e in found] == ["1", "1", "2", ""]
    assert decoder.last_event_id == ""
    # Set by a block with no data as well: the id is the stream's, not the event's.
    decoder.feed(b"id: 3\n\n")
    assert decoder.last_event_id == "3"
    assert [e.id for e in decoder.feed(b"data: e\n\n")] == ["3"]


def test_an_id_holding_nul_is_ignored() -> None:
    found = events(b"id: 1\ndata: a\n\nid: 2\x00\ndata: b\n\nid: \x003\ndata: c\n\n")
    assert [e.id for e in found] == ["1", "1", "1"]


def test_retry_belongs_to_the_event_whose_lines_set_it() -> None:
    found = events(b"retry: 1500\ndata: a\n\ndata: b\n\nretry:0\ndata: c\n\n")
    assert [e.retry for e in found] == [1500, None, 0]
    assert events(b"retry: 007\ndata: a\n\n")[0].retry == 7


@pytest.mark.parametrize(
    "value", ["+5", "-5", " 5", "5 ", "1_000", "1.5", "5x", "", "\u0665", "\uff15", "\u00b2"]
)
def test_retry_is_ascii_digits_only(value: str) -> None:
    stream = f"retry: {value}\ndata: a\n\n".encode()
    assert events(stream)[0].retry is None
    assert events(*byte_by_byte(stream))[0].retry is None


def test_a_retry_of_more_digits_than_python_reads_is_ignored_not_raised() -> None:
    # int() refuses over 4,300 digits with ValueError: an agent must not crash the decoder.
    stream = b"retry: " + b"1" * 5000 + b"\ndata: a\n\nretry: 250\ndata: b\n\n"
    assert [e.retry for e in events(stream)] == [None, 250]
    # Up to 18 digits (over 31 million years) is read; past that, ignored.
    assert events(b"retry: " + b"9" * 18 + b"\ndata: a\n\n")[0].retry == 10**18 - 1
    assert events(b"retry: " + b"9" * 19 + b"\ndata: a\n\n")[0].retry is None


@pytest.mark.parametrize(
    "stream",
    [
        b"event: x\n\n",
        b"id: 1\n\n",
        b"retry: 5\n\n",
        b": comment\n\n",
        b"\n\n\n",
        b"foo: bar\n\n",
        b"id: 1\n\n\n\n",
    ],
)
def test_a_block_with_no_data_is_not_dispatched(stream: bytes) -> None:
    assert events(stream) == []
    # What it set is reset (the id, the stream's, stays).
    after = events(stream + b"data: a\n\n")
    assert [(e.event, e.data, e.retry) for e in after] == [("message", "a", None)]


@pytest.mark.parametrize(
    "stream",
    [b"data: a", b"data: a\n", b"data: a\r\n", b"data: a\ndata: b", b"data: a\n\ndata: b\n"],
)
def test_an_event_cut_off_by_the_end_of_the_stream_is_discarded(stream: bytes) -> None:
    expected = ["a"] if stream.startswith(b"data: a\n\n") else []
    assert datas(stream) == expected
    assert datas(*byte_by_byte(stream)) == expected


def test_multi_byte_text_cut_between_feeds_is_whole() -> None:
    stream = "event: é\nid: €\ndata: 😀 et €\n\n".encode()
    for pieces in (byte_by_byte(stream), [stream[:9], stream[9:17], stream[17:]]):
        assert events(*pieces) == [ServerSentEvent("😀 et €", event="é", id="€")]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (b"a\xffb", "a\ufffdb"),
        (b"\xe2\x82", "\ufffd"),  # a cut sequence is one replacement
        (b"\xe2\x82\xe2\x82\xac", "\ufffd€"),
        (b"\xf0\x9f\x98", "\ufffd"),
        (b"\xed\xa0\x80", "\ufffd\ufffd\ufffd"),  # a surrogate's bytes are no UTF-8
        (b"\xc0\xaf", "\ufffd\ufffd"),  # nor an overlong form
        (b"\x80", "\ufffd"),
    ],
)
def test_invalid_utf_8_is_replaced_as_the_standard_decodes(value: bytes, text: str) -> None:
    found = events(b"event: " + value + b"\nid: " + value + b"\ndata: " + value + b"\n\n")
    assert found == [ServerSentEvent(text, event=text, id=text)]
    assert oracle(b"data: " + value + b"\n\n") == [("message", text, "", None)]


def test_invalid_utf_8_in_a_field_name_is_no_known_field() -> None:
    assert datas(b"dat\xe1: a\ndata\xff: b\ndata: c\n\n") == ["c"]


# --- bounds ------------------------------------------------------------------------------------

LINE_BOUND = 4096


def line_of(size: int, end: bytes = b"\n") -> bytes:
    """A data line of exactly ``size`` bytes before its line end."""
    return b"data: " + b"x" * (size - 6) + end


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("feed", ["whole", "byte-by-byte"])
def test_a_line_of_max_line_bytes_is_read_and_one_more_is_refused(feed: str, end: bytes) -> None:
    def pieces(stream: bytes) -> list[bytes]:
        return [stream] if feed == "whole" else byte_by_byte(stream)

    fitting = line_of(LINE_BOUND, end) + end
    found = events(*pieces(fitting), max_line_bytes=LINE_BOUND)
    assert [e.data for e in found] == ["x" * (LINE_BOUND - 6)]
    with pytest.raises(SSEError, match=f"{LINE_BOUND}-byte bound"):
        events(*pieces(line_of(LINE_BOUND + 1, end) + end), max_line_bytes=LINE_BOUND)


@pytest.mark.parametrize("line", [b"data: ", b": ", b"foo: ", b"id: "])
def test_a_long_line_of_any_field_is_refused(line: bytes) -> None:
    with pytest.raises(SSEError):
        events(line + b"x" * LINE_BOUND + b"\n", max_line_bytes=LINE_BOUND)


@pytest.mark.parametrize(
    ("bound", "feed_bytes", "before"),
    [
        (256 * 1024, 4096, b""),
        (256 * 1024, 4096, b"data: a\n\ndata: "),  # a line end, then the line that never ends
        (16 * 1024, 1, b""),
        (16 * 1024, 1, b"data: a\r"),
    ],
    ids=["4k-reads", "4k-reads-after-an-event", "1-byte-reads", "1-byte-reads-after-a-cr"],
)
def test_a_line_that_never_ends_is_refused_within_the_bound_plus_one_feed(
    bound: int, feed_bytes: int, before: bytes
) -> None:
    decoder = SSEDecoder(max_line_bytes=bound, max_data_bytes=ROOMY)
    decoder.feed(before)
    piece = b"x" * feed_bytes
    fed = 0
    tracemalloc.start()
    try:
        with pytest.raises(SSEError, match="line longer than"):
            while fed < 40 * bound:  # far past the bound: a decoder that never refuses
                decoder.feed(piece)
                fed += feed_bytes
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert fed <= bound + feed_bytes
    # The buffer held: the bound and one feed, with the growth slack of a bytearray.
    assert peak <= 1.25 * (bound + feed_bytes) + 4096, peak


def test_a_line_buffered_after_a_line_end_in_one_feed_is_bounded_at_once() -> None:
    decoder = SSEDecoder(max_line_bytes=LINE_BOUND, max_data_bytes=ROOMY)
    with pytest.raises(SSEError):
        decoder.feed(b"data: a\n\n" + b"x" * (LINE_BOUND + 1))


DATA_BOUND = 1000


def data_lines(sizes: Iterable[int], text: bytes = b"x") -> bytes:
    return b"".join(b"data: " + text * size + b"\n" for size in sizes)


@pytest.mark.parametrize(
    "sizes",
    [[DATA_BOUND], [499, 500], [0] * (DATA_BOUND + 1), [10] * 91],
    ids=["one-line", "two-lines", "empty-lines", "many-lines"],
)
def test_data_of_max_data_bytes_is_read_and_one_more_is_refused(sizes: list[int]) -> None:
    # The bound is on the event's data as dispatched: the lines and the LFs between them.
    fitting = data_lines(sizes) + b"\n"
    (event,) = events(fitting, max_data_bytes=DATA_BOUND)
    assert len(event.data.encode()) == DATA_BOUND
    longer = data_lines([*sizes[:-1], sizes[-1] + 1]) + b"\n"
    with pytest.raises(SSEError, match=f"{DATA_BOUND}-byte bound"):
        events(longer, max_data_bytes=DATA_BOUND)
    with pytest.raises(SSEError, match=f"{DATA_BOUND}-byte bound"):
        events(*byte_by_byte(longer), max_data_bytes=DATA_BOUND)


def test_the_data_bound_counts_bytes_not_characters() -> None:
    with pytest.raises(SSEError):
        events(data_lines([DATA_BOUND // 3 + 1], "€".encode()), max_data_bytes=DATA_BOUND)


def test_data_that_never_dispatches_is_refused_before_the_blank_line() -> None:
    decoder = SSEDecoder(max_line_bytes=LINE_BOUND, max_data_bytes=64 * 1024)
    line = data_lines([1000])
    fed = 0
    with pytest.raises(SSEError, match="data is over"):
        while fed < 100 * 64 * 1024:
            decoder.feed(line)
            fed += len(line)
    assert fed <= 64 * 1024 + len(line)


def test_the_data_bound_is_per_event() -> None:
    stream = (data_lines([DATA_BOUND]) + b"\n") * 50
    assert len(events(stream, max_data_bytes=DATA_BOUND)) == 50


IDLE_BOUND = 1000


@pytest.mark.parametrize(
    "chatter",
    [b": keep-alive\n", b":\n", b"\n", b"foo: bar\n", b"event: ping\n", b"id: 7\n", b"retry: 9\n"],
    ids=["comment", "empty-comment", "blank", "unknown-field", "event", "id", "retry"],
)
def test_chatter_with_no_event_is_refused_past_max_idle_bytes(chatter: bytes) -> None:
    decoder = SSEDecoder(max_line_bytes=LINE_BOUND, max_data_bytes=ROOMY, max_idle_bytes=IDLE_BOUND)
    fed = 0
    with pytest.raises(SSEError, match=f"over {IDLE_BOUND} bytes"):
        while fed < 1000 * IDLE_BOUND:
            decoder.feed(chatter)
            fed += len(chatter)
    assert fed <= IDLE_BOUND < fed + len(chatter)


def test_chatter_of_max_idle_bytes_is_allowed_and_one_byte_more_is_not() -> None:
    chatter = b":" + b"c" * 98 + b"\n"  # 100 bytes
    stream = chatter * (IDLE_BOUND // 100) + b"data: a\n\n"
    assert [e.data for e in events(stream, max_idle_bytes=IDLE_BOUND)] == ["a"]
    with pytest.raises(SSEError):
        events(b":\n" + stream, max_idle_bytes=IDLE_BOUND)


def test_blank_lines_between_chatter_do_not_reset_the_idle_count() -> None:
    with pytest.raises(SSEError):
        events(b": keep-alive\n\n" * IDLE_BOUND, max_idle_bytes=IDLE_BOUND)


def test_an_honest_stream_with_keep_alives_never_trips_the_idle_bound() -> None:
    # 10,000 events, each after keep-alives of half the bound and its own event and id
    # lines: 5 MB of chatter in all, 5,000 times the bound, but never that much in one gap.
    keep_alives = b": keep-alive\n" * (IDLE_BOUND // 2 // 13)
    frame = b'event: message\nid: %d\ndata: {"n": %d}\n\n'
    stream = b"".join(keep_alives + frame % (n, n) for n in range(10_000))
    decoder = SSEDecoder(max_line_bytes=LINE_BOUND, max_data_bytes=ROOMY, max_idle_bytes=IDLE_BOUND)
    found = []
    for at in range(0, len(stream), 4096):
        found += decoder.feed(stream[at : at + 4096])
    assert [e.id for e in found] == [str(n) for n in range(10_000)]
    assert found[-1].data == '{"n": 9999}'
