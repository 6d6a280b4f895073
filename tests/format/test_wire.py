"""The wire types: what a page must look like, and the typed error for each way it can be wrong."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from follower import (
    AgentError,
    FollowerError,
    MalformedPageReason,
    TrajectoryState,
)
from follower._format._layout import encode_events
from follower._format._wire import Page
from follower.lowlevel import TrajectoryBatch

from ..support.malformed import raises_malformed

TASK = "task-1"
AFTER = 5
STATES = ["pending", "running", "completed", "failed", "canceled"]
TERMINAL = {"completed", "failed", "canceled"}


def page_body(**fields: Any) -> dict[str, Any]:
    """A valid page read from ``AFTER`` (two events), with ``fields`` replaced."""
    body: dict[str, Any] = {
        "context_id": "ctx-1",
        "task_id": TASK,
        "state": "running",
        "format": "agentenv.events/v1",
        "events": [{"n": 5}, {"n": 6}],
        "next": AFTER + 2,
        "has_more": False,
    }
    body.update(fields)
    return body


def without(name: str) -> dict[str, Any]:
    body = page_body()
    del body[name]
    return body


def parse(body: Any, *, after: int = AFTER) -> Page:
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    return Page.from_json(raw, task_id=TASK, after=after)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=8,
)
event_lists = st.lists(json_values, max_size=5)
afters = st.integers(min_value=0, max_value=10**9)


# --- valid pages ----------------------------------------------------------------------


def test_valid_page_keeps_every_field() -> None:
    page = parse(page_body())
    assert page == Page(
        task_id=TASK,
        context_id="ctx-1",
        state=TrajectoryState.RUNNING,
        format="agentenv.events/v1",
        after=AFTER,
        events=({"n": 5}, {"n": 6}),
        next=AFTER + 2,
        has_more=False,
    )


@pytest.mark.parametrize("state", STATES)
def test_each_wire_state_is_read(state: str) -> None:
    assert parse(page_body(state=state)).state is TrajectoryState(state)


@pytest.mark.parametrize("fmt", [None, "agentenv.events/v2"])
def test_format_may_be_null_or_a_string(fmt: str | None) -> None:
    assert parse(page_body(format=fmt)).format == fmt


def test_context_id_may_be_null() -> None:
    assert parse(page_body(context_id=None)).context_id is None


def test_bytes_and_str_bodies_give_the_same_page() -> None:
    text = json.dumps(page_body())
    assert Page.from_json(text.encode(), task_id=TASK, after=AFTER) == parse(text)


@pytest.mark.parametrize("has_more", [False, True])
@pytest.mark.parametrize("state", STATES)
def test_last_means_terminal_and_not_has_more(state: str, has_more: bool) -> None:
    page = parse(page_body(state=state, has_more=has_more))
    assert page.last == (state in TERMINAL and not has_more)


def test_empty_terminal_page_is_last() -> None:
    page = parse(page_body(state="completed", events=[], next=AFTER))
    assert page.last
    assert page.events == ()


def test_to_batch_carries_the_page() -> None:
    page = parse(page_body(state="failed", format=None))
    assert page.to_batch() == TrajectoryBatch(
        after=AFTER,
        next=AFTER + 2,
        events=({"n": 5}, {"n": 6}),
        format=None,
        state=TrajectoryState.FAILED,
        last=True,
    )


def test_to_batch_of_a_page_that_is_not_last() -> None:
    assert not parse(page_body(state="completed", has_more=True)).to_batch().last


@given(
    after=afters,
    events=event_lists,
    state=st.sampled_from(STATES),
    fmt=st.none() | st.text(),
    context_id=st.none() | st.text(),
    has_more=st.booleans(),
)
def test_any_valid_page_round_trips(
    after: int,
    events: list[Any],
    state: str,
    fmt: str | None,
    context_id: str | None,
    has_more: bool,
) -> None:
    has_more = has_more and bool(events)
    body = page_body(
        events=events,
        next=after + len(events),
        state=state,
        format=fmt,
        context_id=context_id,
        has_more=has_more,
    )
    batch = parse(body, after=after).to_batch()
    assert batch.after == after
    assert batch.next == after + len(events)
    assert batch.events == tuple(events)
    assert batch.format == fmt
    assert batch.state == TrajectoryState(state)
    assert batch.last == (state in TERMINAL and not has_more)


# --- malformed pages ------------------------------------------------------------------


MALFORMED: list[Any] = [
    # not JSON, or not a JSON object
    pytest.param(b"not json", MalformedPageReason.NOT_AN_OBJECT, id="not-json"),
    pytest.param("", MalformedPageReason.NOT_AN_OBJECT, id="empty"),
    pytest.param('{"task_id": "task-1"', MalformedPageReason.NOT_AN_OBJECT, id="truncated"),
    pytest.param(b"\x80{}", MalformedPageReason.NOT_AN_OBJECT, id="invalid-utf8-bytes"),
    pytest.param(b"\xff\xfe\xfd", MalformedPageReason.NOT_AN_OBJECT, id="invalid-utf16-bytes"),
    pytest.param("[]", MalformedPageReason.NOT_AN_OBJECT, id="empty-list"),
    pytest.param([page_body()], MalformedPageReason.NOT_AN_OBJECT, id="list-of-a-page"),
    pytest.param("42", MalformedPageReason.NOT_AN_OBJECT, id="number"),
    pytest.param('"page"', MalformedPageReason.NOT_AN_OBJECT, id="string"),
    pytest.param("null", MalformedPageReason.NOT_AN_OBJECT, id="null"),
    # a field missing or of the wrong type
    pytest.param(without("events"), MalformedPageReason.BAD_FIELD, id="no-events"),
    pytest.param(without("next"), MalformedPageReason.BAD_FIELD, id="no-next"),
    pytest.param(without("has_more"), MalformedPageReason.BAD_FIELD, id="no-has_more"),
    pytest.param(without("state"), MalformedPageReason.BAD_FIELD, id="no-state"),
    pytest.param(without("task_id"), MalformedPageReason.BAD_FIELD, id="no-task_id"),
    pytest.param(page_body(next="7"), MalformedPageReason.BAD_FIELD, id="next-string"),
    pytest.param(page_body(next=True), MalformedPageReason.BAD_FIELD, id="next-true"),
    pytest.param(page_body(next=7.0), MalformedPageReason.BAD_FIELD, id="next-float"),
    pytest.param(page_body(events=[], next=-1), MalformedPageReason.BAD_FIELD, id="next-negative"),
    pytest.param(page_body(has_more=1), MalformedPageReason.BAD_FIELD, id="has_more-int"),
    pytest.param(page_body(has_more="false"), MalformedPageReason.BAD_FIELD, id="has_more-string"),
    pytest.param(page_body(task_id=1), MalformedPageReason.BAD_FIELD, id="task_id-int"),
    pytest.param(page_body(events={"n": 5}), MalformedPageReason.BAD_FIELD, id="events-object"),
    pytest.param(page_body(state=1), MalformedPageReason.BAD_FIELD, id="state-int"),
    pytest.param(page_body(format=2), MalformedPageReason.BAD_FIELD, id="format-int"),
    pytest.param(page_body(context_id=3), MalformedPageReason.BAD_FIELD, id="context_id-int"),
    # an unknown state
    pytest.param(page_body(state="done"), MalformedPageReason.UNKNOWN_STATE, id="state-done"),
    pytest.param(
        page_body(state="COMPLETED"), MalformedPageReason.UNKNOWN_STATE, id="state-upper-case"
    ),
    pytest.param(
        page_body(state="cancelled"), MalformedPageReason.UNKNOWN_STATE, id="state-cancelled"
    ),
    pytest.param(page_body(state=""), MalformedPageReason.UNKNOWN_STATE, id="state-empty"),
    # a cursor that does not add up
    pytest.param(
        page_body(next=AFTER + 1), MalformedPageReason.CURSOR_MISMATCH, id="next-one-short"
    ),
    pytest.param(
        page_body(next=AFTER + 3), MalformedPageReason.CURSOR_MISMATCH, id="next-one-over"
    ),
    pytest.param(page_body(next=2), MalformedPageReason.CURSOR_MISMATCH, id="next-from-zero"),
    pytest.param(
        page_body(events=[], next=AFTER + 1),
        MalformedPageReason.CURSOR_MISMATCH,
        id="next-no-events",
    ),
    # another task's page
    pytest.param(page_body(task_id="task-2"), MalformedPageReason.TASK_MISMATCH, id="other-task"),
    pytest.param(page_body(task_id=""), MalformedPageReason.TASK_MISMATCH, id="empty-task"),
    # more claimed, no progress
    pytest.param(
        page_body(events=[], next=AFTER, has_more=True),
        MalformedPageReason.NO_PROGRESS,
        id="has_more-no-events",
    ),
]


@pytest.mark.parametrize(("body", "reason"), MALFORMED)
def test_malformed_page_raises_the_malformed_page_error_with_its_reason(
    body: Any, reason: MalformedPageReason
) -> None:
    with raises_malformed(reason) as info:
        parse(body)
    assert isinstance(info.value, AgentError)
    assert isinstance(info.value, FollowerError)
    assert info.value.reason == reason.value  # a StrEnum: its string compares equal


def test_every_reason_is_a_stable_lower_case_string() -> None:
    assert all(reason.value == reason.name.lower() for reason in MalformedPageReason)
    assert len(MalformedPageReason) == 11


def test_not_json_keeps_the_decoder_error_as_its_cause() -> None:
    with raises_malformed(MalformedPageReason.NOT_AN_OBJECT) as info:
        parse("{oops")
    assert isinstance(info.value.__cause__, ValueError)


def test_deeply_nested_body_is_a_typed_error() -> None:
    # A hostile agent's body well under max_page_bytes must not escape as RecursionError.
    depth = 100_000
    with raises_malformed(MalformedPageReason.TOO_DEEP) as raised:
        parse("[" * depth + "]" * depth)
    assert (raised.value.task_id, raised.value.after) == ("task-1", 5)


@given(after=afters, events=event_lists, next_=st.integers(min_value=0))
def test_any_other_next_is_a_cursor_mismatch(after: int, events: list[Any], next_: int) -> None:
    assume(next_ != after + len(events))
    with raises_malformed(MalformedPageReason.CURSOR_MISMATCH):
        parse(page_body(events=events, next=next_), after=after)


@given(task_id=st.text())
def test_any_other_task_id_is_a_task_mismatch(task_id: str) -> None:
    assume(task_id != TASK)
    with raises_malformed(MalformedPageReason.TASK_MISMATCH):
        parse(page_body(task_id=task_id))


@given(state=st.text())
def test_any_other_state_is_unknown(state: str) -> None:
    assume(state not in STATES)
    with raises_malformed(MalformedPageReason.UNKNOWN_STATE):
        parse(page_body(state=state))


# --- TrajectoryBatch ------------------------------------------------------------------


def batch(**fields: Any) -> TrajectoryBatch:
    values: dict[str, Any] = {
        "after": 3,
        "next": 5,
        "events": ["a", "b"],
        "format": None,
        "state": TrajectoryState.RUNNING,
        "last": False,
    }
    values.update(fields)
    return TrajectoryBatch(**values)


def test_batch_is_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        batch().next = 6  # type: ignore[misc]


def test_batch_events_become_a_tuple() -> None:
    assert batch(events=["a", "b"]).events == ("a", "b")


def test_batch_may_be_empty() -> None:
    assert batch(after=4, next=4, events=[], last=True).events == ()


@pytest.mark.parametrize("next_", [4, 6, 0])
def test_batch_refuses_next_that_does_not_add_up(next_: int) -> None:
    with pytest.raises(ValueError, match="next"):
        batch(after=3, next=next_, events=["a", "b"])


def test_batch_refuses_negative_after() -> None:
    with pytest.raises(ValueError, match="after"):
        batch(after=-1, next=-1, events=[])


@given(after=afters, events=event_lists, data=st.data())
def test_batch_accepts_exactly_next_equal_to_after_plus_events(
    after: int, events: list[Any], data: st.DataObject
) -> None:
    next_ = data.draw(st.integers(min_value=0, max_value=after + 10) | st.just(after + len(events)))
    if next_ == after + len(events):
        assert batch(after=after, next=next_, events=events).next == next_
    else:
        with pytest.raises(ValueError, match="next"):
            batch(after=after, next=next_, events=events)


# --- TrajectoryState ------------------------------------------------------------------


def test_state_values_are_the_wire_strings() -> None:
    assert [state.value for state in TrajectoryState] == STATES


@pytest.mark.parametrize(
    ("task_state", "expected"),
    [
        ("completed", TrajectoryState.COMPLETED),
        ("COMPLETED", TrajectoryState.COMPLETED),
        ("Completed", TrajectoryState.COMPLETED),
        ("canceled", TrajectoryState.CANCELED),
        ("cancelled", TrajectoryState.CANCELED),
        ("CANCELLED", TrajectoryState.CANCELED),
        ("Canceled", TrajectoryState.CANCELED),
        ("failed", TrajectoryState.FAILED),
        ("rejected", TrajectoryState.FAILED),
        ("", TrajectoryState.FAILED),
        ("auth-required", TrajectoryState.FAILED),
        ("input-required", TrajectoryState.FAILED),
        ("working", TrajectoryState.FAILED),
        (TrajectoryState.COMPLETED, TrajectoryState.COMPLETED),
        (TrajectoryState.CANCELED, TrajectoryState.CANCELED),
        (TrajectoryState.FAILED, TrajectoryState.FAILED),
        (TrajectoryState.RUNNING, TrajectoryState.FAILED),
        (TrajectoryState.PENDING, TrajectoryState.FAILED),
    ],
)
def test_from_task_state(task_state: str, expected: TrajectoryState) -> None:
    assert TrajectoryState.from_task_state(task_state) is expected


@given(word=st.sampled_from(["completed", "canceled", "cancelled"]), data=st.data())
def test_from_task_state_ignores_case(word: str, data: st.DataObject) -> None:
    upper = data.draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    mixed = "".join(c.upper() if up else c for c, up in zip(word, upper, strict=True))
    expected = TrajectoryState.COMPLETED if word == "completed" else TrajectoryState.CANCELED
    assert TrajectoryState.from_task_state(mixed) is expected


@given(task_state=st.text())
def test_from_task_state_maps_any_other_string_to_failed(task_state: str) -> None:
    assume(not any(word in task_state.casefold() for word in ("complet", "cancel")))
    assert TrajectoryState.from_task_state(task_state) is TrajectoryState.FAILED


# --- from the agent's bytes to the stored bytes ----------------------------------------

# Each event as the agent sends it (loosely spaced, as any JSON encoder may) and the line
# the chunk must hold: what json.dumps(..., separators=(",", ":")) writes for its value.
TRICKY_EVENTS = [
    ("123456789012345678901234567890", b"123456789012345678901234567890"),
    ("-123456789012345678901234567890", b"-123456789012345678901234567890"),
    ("1e16", b"1e+16"),
    ("10000000000000000.0", b"1e+16"),
    ("0.1", b"0.1"),
    ("-0.0", b"-0.0"),
    ("5e-324", b"5e-324"),
    ("1.7976931348623157e308", b"1.7976931348623157e+308"),
    ('"\\u00e9t\\u00e9 \\ud83d\\ude00"', b'"\\u00e9t\\u00e9 \\ud83d\\ude00"'),
    ('"été 😀"', b'"\\u00e9t\\u00e9 \\ud83d\\ude00"'),
    ('"\\u2028\\u2029"', b'"\\u2028\\u2029"'),
    ('"\\"\\\\\\/\\b\\f\\n\\r\\t"', b'"\\"\\\\/\\b\\f\\n\\r\\t"'),
    ('"\\u0000\\u001f\\u007f"', b'"\\u0000\\u001f\\u007f"'),
    ('{ "b" : [ 1 , 2.50 , null ] , "a" : { } }', b'{"b":[1,2.5,null],"a":{}}'),
    ('{"a": 1, "a": 2}', b'{"a":2}'),
    ("[true, false, []]", b"[true,false,[]]"),
]


def test_a_page_is_stored_with_exactly_the_bytes_the_stdlib_writes() -> None:
    events = ", ".join(text for text, _ in TRICKY_EVENTS)
    body = (
        '{"task_id": "task-1", "state": "running", "events": [' + events + "], "
        f'"next": {len(TRICKY_EVENTS)}, "has_more": false}}'
    ).encode()
    page = Page.from_json(body, task_id=TASK, after=0)
    stored = encode_events(page.to_batch().events)
    assert stored.split(b"\n") == [line for _, line in TRICKY_EVENTS] + [b""]
    expected = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in page.events)
    assert stored == expected.encode()


def test_nan_and_infinity_are_refused_on_read_and_never_stored() -> None:
    # Not JSON: a page holding them is refused (tests/hostile/test_page_limits.py has every number
    # case), and the chunk encoder refuses them too rather than write them verbatim.
    body = (
        b'{"task_id": "task-1", "state": "running", "events": [NaN, -Infinity], "next": 2, '
        b'"has_more": false}'
    )
    with raises_malformed(MalformedPageReason.BAD_NUMBER, match="NaN is not a JSON number"):
        Page.from_json(body, task_id=TASK, after=0)
    with pytest.raises(ValueError, match="not JSON compliant"):
        encode_events((float("nan"),))


def test_an_unencodable_event_fails_the_chunk_and_the_next_chunk_still_encodes() -> None:
    shared: list[Any] = []
    circular: list[Any] = [shared]
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):
        encode_events((circular,))
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_events(({"a": [shared, object()]},))
    # An encoder whose markers kept the failed event's containers would call these circular.
    assert encode_events(([shared, shared], {"a": shared})) == b"[[],[]]\n" + b'{"a":[]}\n'


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-be", "utf-32"])
def test_a_body_in_any_encoding_json_reads_is_read_as_json_reads_it(encoding: str) -> None:
    # The shared decoder reads bytes as json.loads does, encoding detection and all.
    text = json.dumps(page_body(events=[{"text": "d\u00e9j\u00e0 \U0001f600"}], next=AFTER + 1))
    page = parse(text.encode(encoding))
    assert page.events == tuple(json.loads(text.encode(encoding))["events"])


def test_a_byte_order_mark_in_a_text_body_is_refused_as_json_refuses_it() -> None:
    text = "\ufeff" + json.dumps(page_body())
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with raises_malformed(MalformedPageReason.NOT_AN_OBJECT, match="BOM"):
        parse(text)
