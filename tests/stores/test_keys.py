"""The key rules (docs/protocol.md, "Keys") and the stored layout's names and bodies.

Keys are segments separated by ``/``: no empty, ``.`` or ``..`` segment, no
leading ``/``, no backslash, no control character; at most 1024 bytes of UTF-8,
255 a segment. A prefix is empty or a key followed by ``/``; a listing prefix is
any start of a valid key. A turn id (and a task id in a default prefix) is one
segment, and a turn's prefix and id leave room for its longest key.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import follower
from follower import CorruptObjectError, FollowerError, InvalidKeyError, UsageError
from follower._format._layout import (
    LONGEST_NAME,
    TurnKeys,
    chunk_name,
    decode_events,
    decode_json_object,
    default_prefix,
    encode_events,
    parse_chunk_name,
    turn_prefix,
)
from follower._stores._keys import (
    MAX_KEY_BYTES,
    MAX_SEGMENT_BYTES,
    check_key,
    check_list_prefix,
    check_prefix,
    check_turn_id,
)

# Every character a key may not hold: backslash, the C0 controls and DEL.
ASCII_FORBIDDEN = ["\\", "\x7f", *(chr(code) for code in range(0x20))]

segments = st.text(
    # Cc: control characters; Cs: lone surrogates, which no store can encode.
    alphabet=st.characters(exclude_characters="/\\", exclude_categories=("Cc", "Cs")),
    min_size=1,
    max_size=12,
).filter(lambda segment: segment not in (".", ".."))
keys = st.lists(segments, min_size=1, max_size=5).map("/".join)


# --- the error's place in the tree ----------------------------------------------------


def test_invalid_key_error_is_a_follower_error_and_a_value_error() -> None:
    with pytest.raises(InvalidKeyError) as caught:
        check_key("a//b")
    assert isinstance(caught.value, FollowerError)
    assert isinstance(caught.value, UsageError)
    assert isinstance(caught.value, ValueError)
    assert follower.InvalidKeyError is InvalidKeyError


# --- check_key ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["a", "a/b", "steps/s1/turn-1/live/00000000-00000002.jsonl", "...", "a/.b", "a/..b", "é/ü ∂"],
)
def test_valid_keys_are_returned_unchanged(key: str) -> None:
    assert check_key(key) == key


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("", id="empty"),
        pytest.param("/a", id="leading-slash"),
        pytest.param("/", id="slash-only"),
        pytest.param("a/", id="trailing-slash"),
        pytest.param("a//b", id="empty-segment"),
        pytest.param(".", id="dot"),
        pytest.param("..", id="dotdot"),
        pytest.param("a/./b", id="dot-segment"),
        pytest.param("a/../b", id="dotdot-segment"),
        pytest.param("../a", id="leading-dotdot"),
        pytest.param("a/..", id="trailing-dotdot"),
        pytest.param("a\\b", id="backslash"),
        pytest.param("a\x00b", id="nul"),
        pytest.param("a\nb", id="newline"),
        pytest.param("a\tb", id="tab"),
        pytest.param("a\rb", id="carriage-return"),
        pytest.param("a\x1fb", id="unit-separator"),
        pytest.param("a\x7fb", id="del"),
    ],
)
def test_invalid_keys_are_refused(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        check_key(key)


@pytest.mark.parametrize("key", [None, b"a/b", 3])
def test_a_key_that_is_not_a_string_is_refused(key: Any) -> None:
    with pytest.raises(InvalidKeyError):
        check_key(key)


def refuses(check: Any, text: str) -> bool:
    try:
        check(text)
    except InvalidKeyError:
        return True
    return False


def test_c1_control_characters_are_refused() -> None:
    # docs/protocol.md ("Keys") forbids "control characters": Unicode's control characters
    # (category Cc) are U+0000-U+001F, U+007F *and* U+0080-U+009F (NEL, CSI...).
    c1 = [chr(code) for code in range(0x80, 0xA0)]
    assert all(unicodedata.category(char) == "Cc" for char in c1)
    accepted = [f"U+{ord(char):04X}" for char in c1 if not refuses(check_key, f"a{char}b")]
    assert accepted == []


@given(keys)
def test_any_key_of_valid_segments_is_accepted(key: str) -> None:
    assert check_key(key) == key
    assert check_prefix(key + "/") == key + "/"


@given(keys, st.data())
def test_a_forbidden_character_anywhere_is_refused(key: str, data: st.DataObject) -> None:
    char = data.draw(st.sampled_from(ASCII_FORBIDDEN), label="char")
    at = data.draw(st.integers(0, len(key)), label="at")
    bad = key[:at] + char + key[at:]
    with pytest.raises(InvalidKeyError):
        check_key(bad)
    with pytest.raises(InvalidKeyError):
        check_prefix(bad + "/")
    with pytest.raises(InvalidKeyError):
        check_list_prefix(bad)


@given(st.lists(segments, min_size=1, max_size=5), st.data())
def test_an_empty_or_dot_segment_anywhere_is_refused(parts: list[str], data: st.DataObject) -> None:
    bad_segment = data.draw(st.sampled_from(["", ".", ".."]), label="segment")
    at = data.draw(st.integers(0, len(parts)), label="at")
    bad = "/".join([*parts[:at], bad_segment, *parts[at:]])
    with pytest.raises(InvalidKeyError):
        check_key(bad)
    with pytest.raises(InvalidKeyError):
        check_prefix(bad + "/")


@given(keys)
def test_a_leading_or_trailing_slash_is_refused(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        check_key("/" + key)
    with pytest.raises(InvalidKeyError):
        check_key(key + "/")


# --- check_prefix ---------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "a/", "steps/s1/", "a/..b/"])
def test_valid_prefixes_are_returned_unchanged(prefix: str) -> None:
    assert check_prefix(prefix) == prefix


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param("a", id="no-trailing-slash"),
        pytest.param("steps/s1", id="folder-without-slash"),
        pytest.param("/", id="slash-only"),
        pytest.param("/a/", id="leading-slash"),
        pytest.param("a//", id="empty-segment"),
        pytest.param("./", id="dot"),
        pytest.param("a/../", id="dotdot"),
        pytest.param("a\\/", id="backslash"),
        pytest.param("a\x00/", id="nul"),
        pytest.param(None, id="none"),
    ],
)
def test_invalid_prefixes_are_refused(prefix: Any) -> None:
    with pytest.raises(InvalidKeyError):
        check_prefix(prefix)


# --- check_list_prefix ----------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "a", "a/", "a/b", "a/bc/", "a/.", "a/..", "..x"])
def test_any_start_of_a_valid_key_is_a_listing_prefix(prefix: str) -> None:
    assert check_list_prefix(prefix) == prefix


@given(keys, st.data())
def test_every_start_of_a_valid_key_is_a_listing_prefix(key: str, data: st.DataObject) -> None:
    end = data.draw(st.integers(0, len(key)), label="end")
    assert check_list_prefix(key[:end]) == key[:end]


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param("/", id="slash-only"),
        pytest.param("/a", id="leading-slash"),
        pytest.param("a//", id="empty-segment"),
        pytest.param("a//b", id="empty-segment-inside"),
        pytest.param("./", id="dot-folder"),
        pytest.param("../a", id="dotdot-folder"),
        pytest.param("a/../", id="dotdot-inside"),
        pytest.param("a\\", id="backslash"),
        pytest.param("a\x00", id="nul"),
        pytest.param("\n", id="newline"),
        pytest.param(None, id="none"),
    ],
)
def test_invalid_listing_prefixes_are_refused(prefix: Any) -> None:
    with pytest.raises(InvalidKeyError):
        check_list_prefix(prefix)


# --- check_turn_id --------------------------------------------------------------------


@given(segments)
def test_any_valid_segment_is_a_turn_id(turn_id: str) -> None:
    assert check_turn_id(turn_id) == turn_id


@pytest.mark.parametrize("turn_id", ["", ".", "..", "a/b", "a/", "/a", "a\\b", "a\x00", None, 1])
def test_invalid_turn_ids_are_refused(turn_id: Any) -> None:
    with pytest.raises(InvalidKeyError):
        check_turn_id(turn_id)


# --- the layout's names -----------------------------------------------------------------


def test_turn_prefix_is_the_turns_live_folder() -> None:
    assert turn_prefix("steps/s1/", "turn-1") == "steps/s1/turn-1/live/"
    assert turn_prefix("", "turn-1") == "turn-1/live/"


@pytest.mark.parametrize(
    ("prefix_key", "turn_id"),
    [("steps", "t"), ("/steps/", "t"), ("steps/", "a/b"), ("steps/", ".."), ("steps/", "")],
)
def test_turn_prefix_refuses_bad_prefixes_and_turn_ids(prefix_key: str, turn_id: str) -> None:
    with pytest.raises(InvalidKeyError):
        turn_prefix(prefix_key, turn_id)


def test_chunk_names_are_zero_padded_to_eight_digits() -> None:
    assert chunk_name(0, 3) == "00000000-00000003.jsonl"
    assert chunk_name(12, 1000) == "00000012-00001000.jsonl"
    assert chunk_name(99999999, 123456789) == "99999999-123456789.jsonl"


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=10**12))
def test_a_chunk_name_parses_back(after: int, next_: int) -> None:
    assert parse_chunk_name(chunk_name(after, next_)) == (after, next_)


def test_chunk_names_sort_in_cursor_order_below_10_to_the_8() -> None:
    names = [chunk_name(a, b) for a, b in [(0, 9), (9, 10), (10, 100), (100, 12345678)]]
    assert sorted(names) == names


@pytest.mark.parametrize(
    "name",
    [
        "meta.json",
        "end.json",
        "next.json",
        "0-3.jsonl",
        "0000000-00000003.jsonl",
        "00000000-00000003.json",
        "00000000_00000003.jsonl",
        "00000000-00000003.jsonl.tmp",
        ".00000000-00000003.jsonl.0123456789abcdef0123456789abcdef.tmp",
        "x00000000-00000003.jsonl",
        "00000000-00000003.jsonlx",
        "sub/00000000-00000003.jsonl",
        "-0000000-00000003.jsonl",
        "00000000-00000003.jsonl\n",
        "",
    ],
)
def test_other_names_are_not_chunks(name: str) -> None:
    assert parse_chunk_name(name) is None


def test_names_with_non_ascii_digits_are_not_chunks() -> None:
    # The library writes ASCII digits only (`:08d`); `\d` in a str pattern also
    # matches other scripts' digits, which int() then accepts.
    arabic_indic = "".join(chr(0x0660 + int(d)) for d in "00000000")
    name = f"{arabic_indic}-{arabic_indic[:-1]}\u0663.jsonl"
    assert parse_chunk_name(name) is None


# --- the layout's bodies ----------------------------------------------------------------


def test_events_are_compact_json_one_per_line() -> None:
    events: tuple[Any, ...] = (
        {"kind": "msg", "parts": [1, 2.5, None]},
        "line\nbreak",
        [],
        True,
        None,
        "é",
    )
    assert encode_events(events) == (
        b'{"kind":"msg","parts":[1,2.5,null]}\n"line\\nbreak"\n[]\ntrue\nnull\n"\\u00e9"\n'
    )


def test_no_events_encode_to_an_empty_body() -> None:
    assert encode_events(()) == b""


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(st.lists(json_values, max_size=6).map(tuple))
def test_each_event_takes_exactly_one_line_and_decodes_back(events: tuple[Any, ...]) -> None:
    body = encode_events(events)
    lines = body.split(b"\n")
    assert lines[-1] == b""
    assert len(lines) - 1 == len(events)
    for line, event in zip(lines, events, strict=False):
        assert line == json.dumps(event, separators=(",", ":")).encode()
    assert decode_events(body, "k") == list(events)


def test_a_chunk_line_that_is_not_json_is_a_corrupt_object() -> None:
    with pytest.raises(CorruptObjectError, match=r"steps/x\.jsonl"):
        decode_events(b'{"a":1}\nnot json\n', "steps/x.jsonl")


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"text"', b"null", b"\xff"])
def test_a_stored_object_must_be_a_json_object(body: bytes) -> None:
    with pytest.raises(CorruptObjectError, match=r"end\.json"):
        decode_json_object(body, "t/live/end.json")


def test_a_stored_json_object_decodes() -> None:
    assert decode_json_object(b'{"state":"completed","next":3}', "k") == {
        "state": "completed",
        "next": 3,
    }


# --- lengths ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [MAX_SEGMENT_BYTES - 1, MAX_SEGMENT_BYTES])
def test_a_segment_up_to_the_limit_is_a_key_a_turn_id_and_a_task_id(size: int) -> None:
    for segment in ("t" * size, "\u00e9" * (size // 2) + "t" * (size % 2)):
        assert check_key(f"a/{segment}/b") == f"a/{segment}/b"
        assert check_turn_id(segment) == segment
        assert default_prefix(segment) == f"follow/{segment}/"


@pytest.mark.parametrize(
    "segment",
    ["t" * (MAX_SEGMENT_BYTES + 1), "\u00e9" * 128, "t" * 1_000_000],
    ids=["ascii", "two-byte", "a-million"],
)
def test_a_segment_over_the_limit_is_refused_everywhere(segment: str) -> None:
    with pytest.raises(InvalidKeyError, match=r"over the (255|1024)"):
        check_key(f"a/{segment}")
    with pytest.raises(InvalidKeyError, match="invalid turn id"):
        check_turn_id(segment)
    with pytest.raises(InvalidKeyError, match="invalid turn id"):
        TurnKeys("p/", segment)
    with pytest.raises(InvalidKeyError, match="invalid task id"):
        default_prefix(segment)
    with pytest.raises(InvalidKeyError):
        check_prefix(f"{segment}/")
    # One line, however long the id: an error message never carries all of it.
    with pytest.raises(InvalidKeyError) as caught:
        check_turn_id(segment)
    assert len(str(caught.value)) < 200


def test_a_key_over_1024_bytes_is_refused() -> None:
    key = "/".join(["k" * 100] * 10) + "/" + "k" * 14
    assert len(key) == MAX_KEY_BYTES
    assert check_key(key) == key
    with pytest.raises(InvalidKeyError, match="over the 1024"):
        check_key(key + "k")


@pytest.mark.parametrize("task_id", ["a/b", "..", ".", "", "a\\b", "a\nb", 7], ids=repr)
def test_a_task_id_in_a_default_prefix_is_one_segment(task_id: Any) -> None:
    with pytest.raises(InvalidKeyError, match="invalid task id"):
        default_prefix(task_id)


def test_a_turns_prefix_and_id_leave_room_for_its_longest_key() -> None:
    room = MAX_KEY_BYTES - len("/live/") - LONGEST_NAME
    turn_id = "t" * 200
    prefix = "/".join(["p" * 100] * 10)[: room - len(turn_id) - 1] + "/"
    keys = TurnKeys(prefix, turn_id)
    assert len((prefix + turn_id).encode()) == room
    assert check_key(keys.chunk(10**18 - 1, 10**18 - 1))
    with pytest.raises(InvalidKeyError, match="too long"):
        TurnKeys(prefix, turn_id + "t")
