"""Stored data read back is never trusted: whatever a store returns, a typed error or the events.

A store is shared, and can be written by anyone, or damaged. Deep nesting (which
made Python's decoder raise a bare ``RecursionError``), bodies that are not
UTF-8 or not JSON, marks of the wrong types, chunks whose line count is not
their name's, a ``get`` that returns no bytes and a listing of other folders'
keys: each is a :class:`follower.CorruptObjectError` naming the key, from the
reader (``read_live_trajectory``), from entering a stored turn
(``read_stored_turn``), and from ``follower tail``, which exits 6 with one line.
Hypothesis then throws any bytes at every stored object.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from follower import (
    CorruptObjectError,
    FilesystemStore,
    MemoryStore,
    ReaderIdleError,
    StoreEscapeError,
    read_live_trajectory,
)
from follower._cli._main import EXIT_BAD_STORE
from follower._format._layout import TurnKeys
from follower._format._nesting import MAX_JSON_DEPTH, json_depth, nests_too_deep, too_deep_lines
from follower._storing._stored_turn import read_stored_turn

from ..support.cli import assert_one_line_error, run_cli
from ..support.hypothesis_profiles import property_settings, share_seed

pytestmark = pytest.mark.anyio

JSON = "application/json"
KEYS = TurnKeys("step/", "t1")
CHUNK = KEYS.chunk(0, 1)
END = b'{"state":"completed","next":1,"complete":true}'
NEXT = b'{"turn":null}'
# Far past any recursion limit: this is what raised a bare RecursionError before.
HOSTILE_DEPTH = 100_000


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def deep_object(depth: int) -> bytes:
    """A JSON object ``depth`` levels deep, its last field a deep list."""
    return b'{"state":"completed","next":1,"x":' + nested(depth - 1) + b"}"


TASK = b'{"task_id":"k","endpoint":"e","started_at":"s"}'


async def stored_turn(
    chunk: bytes = b"{}\n",
    end: bytes = END,
    link: bytes = NEXT,
    store: Any = None,
    task: bytes = TASK,
) -> Any:
    store = MemoryStore() if store is None else store
    await store.put(KEYS.task, task, content_type=JSON)
    await store.put(CHUNK, chunk, content_type="application/jsonl")
    await store.put(KEYS.end, end, content_type=JSON)
    await store.put(KEYS.next, link, content_type=JSON)
    return store


async def read_all(store: Any) -> list[Any]:
    with anyio.fail_after(10):
        return [
            e.event
            async for e in read_live_trajectory(store, "step/", "t1", poll_interval_seconds=0.01)
        ]


# --- the depth limit ------------------------------------------------------------------


def test_the_depth_is_counted_on_structure_not_on_strings() -> None:
    assert json_depth(b"1") == 0
    assert json_depth(b"[]") == 1
    assert json_depth(b'{"a":[1,{"b":[]}]}') == 4
    # Brackets inside strings, escaped quotes and backslashes are no nesting.
    assert json_depth(b'["[[[[", "\\"[[[", "\\\\", "]]]"]') == 1
    assert json_depth(b'["\\\\\\"[[[["]') == 1
    many = b'["' + b"[" * 10_000 + b'"]'
    assert not nests_too_deep(many)
    assert json.loads(many)  # and it is valid JSON


def test_exactly_the_limit_is_accepted_and_one_more_refused() -> None:
    assert not nests_too_deep(nested(MAX_JSON_DEPTH))
    assert nests_too_deep(nested(MAX_JSON_DEPTH + 1))
    # Many lines at the limit are fine; one line over it is found by its index.
    lines = b"\n".join([nested(MAX_JSON_DEPTH)] * 50 + [nested(MAX_JSON_DEPTH + 1), b"[]"])
    assert too_deep_lines(lines) == [50]
    assert too_deep_lines(b"\n".join([nested(MAX_JSON_DEPTH)] * 50)) == []


def test_closers_hidden_in_strings_cannot_mask_depth() -> None:
    # Each level opens 100 lists and holds a string of 100 closers: blind counting
    # would never pass 100; the real depth is 100 x 5.
    level = b"[" * 100 + b'"' + b"]" * 100 + b'",'
    document = level * 5 + b"0" + b"]" * 500  # 500 levels: too deep to decode and check here
    assert json_depth(document) > MAX_JSON_DEPTH
    assert nests_too_deep(document)
    # Below the limit the count is exact: 25 levels of 4.
    level = b"[" * 25 + b'"' + b"]" * 25 + b'",'
    document = level * 4 + b"0" + b"]" * 100
    assert json_loads_depth(document) == json_depth(document) == 100
    assert not nests_too_deep(document)


def value_depth(value: Any) -> int:
    """How deeply a decoded JSON value nests: ``[]`` is 1, a scalar 0."""
    if isinstance(value, list):
        return 1 + max(map(value_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(value_depth, value.values()), default=0)
    return 0


def json_loads_depth(document: bytes) -> int:
    """The depth of what json.loads makes of ``document`` (shallow enough to decode)."""
    return value_depth(json.loads(document))


@property_settings(100)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
    )
)
def test_the_depth_of_any_json_value_is_its_nesting(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert json_depth(text.encode()) == value_depth(value)


nasty_strings = st.text(alphabet='[]{}"\\ab', max_size=6)


@st.composite
def near_the_limit(draw: st.DrawFn) -> Any:
    """A value nested 100 to 160 levels, with bracket-laden strings and siblings on the way."""
    value: Any = draw(nasty_strings)
    for _ in range(draw(st.integers(100, 160))):
        siblings = draw(st.lists(nasty_strings | st.just([[]]), max_size=2))
        value = draw(st.sampled_from([[*siblings, value], {"k": value, "s": siblings}]))
    return value


# Each value is 100 to 160 levels deep, so drawing one is slow on a busy machine: the
# profile's settings (derandomized, no health check on the time a draw takes), not
# Hypothesis's defaults, under which a loaded CI runner failed it for slowness alone.
# The slowest property of this file: its budget is shared by make test's Pythons.
@share_seed
@property_settings(100, shared=True)
@given(near_the_limit())
def test_near_the_limit_the_verdict_is_exact(value: Any) -> None:
    depth = depth_of(value)
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
        assert json_depth_of_text(text) == depth  # the slow oracle agrees with the value
        assert nests_too_deep(text.encode()) == (depth > MAX_JSON_DEPTH)
        if depth <= MAX_JSON_DEPTH:
            assert json_depth(text.encode()) == depth
        else:
            assert json_depth(text.encode()) > MAX_JSON_DEPTH


def depth_of(value: Any) -> int:
    """Nesting of a decoded value, without recursion (the values here are deep)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()  # level: the containers around item
        if isinstance(item, list | dict):
            deepest = max(deepest, level + 1)
            stack.extend(
                (v, level + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def json_depth_of_text(text: str) -> int:
    """The nesting of ``text`` by a plain character scan, strings skipped: the slow oracle."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


# --- deep objects, from the reader and from entering a turn ---------------------------


@pytest.mark.parametrize(
    ("where", "depth"),
    [
        ("chunk", MAX_JSON_DEPTH + 1),
        ("chunk", HOSTILE_DEPTH),
        ("end", MAX_JSON_DEPTH + 1),
        ("end", HOSTILE_DEPTH),
        ("next", HOSTILE_DEPTH),
    ],
)
async def test_a_deep_stored_object_is_a_corrupt_object_naming_its_key(
    where: str, depth: int
) -> None:
    chunk, end, link = b"{}\n", END, NEXT
    if where == "chunk":
        chunk = b"{}\n" * 0 + nested(depth) + b"\n"
    elif where == "end":
        end = deep_object(depth)
    else:
        link = b'{"turn":' + nested(depth) + b"}"
    store = await stored_turn(chunk, end, link)
    key = {"chunk": CHUNK, "end": KEYS.end, "next": KEYS.next}[where]
    with pytest.raises(
        CorruptObjectError, match=f"{key!r}.*deeper than {MAX_JSON_DEPTH}"
    ) as caught:
        await read_all(store)
    assert not isinstance(caught.value.__cause__, RecursionError)
    if where != "chunk":  # entering a stored turn reads its marks, never its chunks
        with pytest.raises(CorruptObjectError, match="deeper"):
            await read_stored_turn(store, KEYS)


async def test_a_chunk_at_the_depth_limit_is_read() -> None:
    store = await stored_turn(nested(MAX_JSON_DEPTH) + b"\n")
    assert len(await read_all(store)) == 1


# --- garbage of every other kind -------------------------------------------------------

CORRUPT_CHUNKS = [
    pytest.param(b"\xff\xfe{}\n", id="not-utf8"),
    pytest.param("{}\n".encode("utf-16-le"), id="utf16"),  # json.loads(bytes) would accept it
    pytest.param(b'"\xed\xa0\x80"\n', id="encoded-surrogate"),
    pytest.param(b"{\n", id="not-json"),
    pytest.param(b"{}\n{}\n", id="two-lines-named-one"),
    pytest.param(b"\n", id="no-line-named-one"),
    pytest.param(b"{} {}\n", id="two-values-on-a-line"),
]


@pytest.mark.parametrize("chunk", CORRUPT_CHUNKS)
async def test_a_chunk_that_is_not_its_events_is_corrupt(chunk: bytes) -> None:
    store = await stored_turn(chunk)
    with pytest.raises(CorruptObjectError, match=repr(CHUNK)):
        await read_all(store)


CORRUPT_MARKS = [
    pytest.param("end", b'{"state":"completed","next":"1"}', id="end-next-a-string"),
    pytest.param("end", b'{"state":"completed","next":true}', id="end-next-a-boolean"),
    pytest.param("end", b'{"state":"completed","next":-1}', id="end-next-negative"),
    pytest.param("end", b'{"state":"completed","next":1.0}', id="end-next-a-float"),
    pytest.param("end", b'{"state":"running","next":1}', id="end-state-not-terminal"),
    pytest.param("end", b'{"state":"completed","next":NaN}', id="end-nan"),
    pytest.param("end", b'{"state":"completed","next":1,"complete":"yes"}', id="end-complete"),
    pytest.param("end", b"[]", id="end-a-list"),
    pytest.param("end", b"\xc3\x28", id="end-not-utf8"),
    pytest.param("next", b'{"turn":7}', id="next-turn-a-number"),
    pytest.param("next", b'{"turn":"a/b"}', id="next-turn-two-segments"),
    pytest.param("next", b'{"turn":"' + b"t" * 256 + b'"}', id="next-turn-too-long"),
    pytest.param("next", b"{}", id="next-no-turn"),
    pytest.param("task", b'{"task_id":1,"endpoint":"e","started_at":"s"}', id="task-id-a-number"),
    pytest.param(
        "task",
        b'{"task_id":"k","endpoint":"e","started_at":"s","heartbeat_seconds":-1}',
        id="task-heartbeat-negative",
    ),
]


@pytest.mark.parametrize(("mark", "body"), CORRUPT_MARKS)
async def test_a_mark_of_the_wrong_shape_is_corrupt(mark: str, body: bytes) -> None:
    store = MemoryStore()
    key = getattr(KEYS, mark)
    await store.put(key, body, content_type=JSON)
    with pytest.raises(CorruptObjectError, match=repr(key)):
        await read_stored_turn(store, KEYS)
    # The reader reads task.json too: it names the writer's heartbeat interval.
    store = await stored_turn(
        end=body if mark == "end" else END,
        link=body if mark == "next" else NEXT,
        task=body if mark == "task" else TASK,
    )
    with pytest.raises(CorruptObjectError, match=repr(key)):
        await read_all(store)


class GarbageStore(MemoryStore):
    """A store that answers a get with something that is not bytes, or lists strays."""

    def __init__(self, *, body: object = None, strays: list[Any] | None = None) -> None:
        super().__init__()
        self.body, self.strays = body, strays

    async def get(self, key: str) -> bytes:
        stored = await super().get(key)
        return stored if self.body is None or not key.endswith(".jsonl") else self.body  # type: ignore[return-value]

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        keys = await super().list(prefix, start_after=start_after)
        return keys if self.strays is None else [*keys, *self.strays]


@pytest.mark.parametrize("body", ["{}\n", 7, [b"{}"]], ids=["str", "int", "list"])
async def test_a_get_that_returns_no_bytes_is_corrupt(body: object) -> None:
    store = await stored_turn(store=GarbageStore(body=body))
    with pytest.raises(CorruptObjectError, match="not bytes"):
        await read_all(store)


@pytest.mark.parametrize(
    "stray",
    ["elsewhere/x", "step/t1/live0", KEYS.live, "step/t1/livex/y", 7, ""],
    ids=["other-folder", "next-folder", "the-folder-itself", "longer-folder", "int", "empty"],
)
async def test_a_listing_of_keys_outside_the_folder_is_corrupt(stray: object) -> None:
    store = await stored_turn(store=GarbageStore(strays=[stray]))
    with pytest.raises(CorruptObjectError, match="not a key under it"):
        await read_all(store)
    with pytest.raises(CorruptObjectError, match="not a key under it"):
        await read_stored_turn(store, KEYS)


async def test_a_chunk_name_with_a_position_too_long_to_parse_is_no_chunk() -> None:
    # int() refuses over 4,300 digits: such a name (listed by a store that allows it)
    # is simply not a chunk's.
    huge = KEYS.live + "9" * 5000 + "-" + "9" * 5000 + ".jsonl"
    store = await stored_turn(store=GarbageStore(strays=[huge]))
    assert await read_all(store) == [{}]
    assert (await read_stored_turn(store, KEYS)).chunks == ((0, 1),)


# --- any bytes at all ------------------------------------------------------------------

STORED_BODIES = st.one_of(
    st.binary(max_size=64),
    st.builds(nested, st.integers(0, 300)),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
    ).map(lambda value: json.dumps(value).encode()),
)


@property_settings(150)
@given(
    where=st.sampled_from(["chunk", "end", "next", "task"]),
    body=STORED_BODIES,
    lines=st.integers(1, 3),
)
def test_any_stored_bytes_give_events_or_a_corrupt_object(
    where: str, body: bytes, lines: int
) -> None:
    async def main() -> None:
        chunk = b"\n".join([body] * lines) + b"\n" if where == "chunk" else b"{}\n"
        store = MemoryStore()
        await store.put(
            KEYS.task,
            body if where == "task" else b'{"task_id":"k","endpoint":"e","started_at":"s"}',
            content_type=JSON,
        )
        await store.put(KEYS.chunk(0, lines if where == "chunk" else 1), chunk, content_type=JSON)
        await store.put(
            KEYS.end,
            body
            if where == "end"
            else END.replace(b'"next":1', b'"next":%d' % (lines if where == "chunk" else 1)),
            content_type=JSON,
        )
        await store.put(KEYS.next, body if where == "next" else NEXT, content_type=JSON)
        with contextlib.suppress(CorruptObjectError):
            await read_stored_turn(store, KEYS)
        # A turn it cannot end (a link to a turn never written) is idle: anything
        # but these two is a bug.
        with contextlib.suppress(CorruptObjectError, ReaderIdleError), anyio.fail_after(10):
            async for _ in read_live_trajectory(
                store, "step/", "t1", poll_interval_seconds=0.001, idle_timeout_seconds=0.05
            ):
                pass

    for backend in ("asyncio", "trio"):
        anyio.run(main, backend=backend)


# --- follower tail: one line, exit 6 ---------------------------------------------------


def write_turn(root: Path, chunk: bytes) -> None:
    async def write() -> None:
        await stored_turn(chunk, store=FilesystemStore(root))

    anyio.run(write)


def test_tail_of_a_deep_chunk_exits_6_in_one_line(tmp_path: Path) -> None:
    write_turn(tmp_path / "store", nested(HOSTILE_DEPTH) + b"\n")
    result = run_cli(["tail", "store", "step/", "t1"], tmp_path)
    message = assert_one_line_error(result, EXIT_BAD_STORE)
    assert CHUNK in message
    assert "deeper than 128" in message


def test_tail_of_a_chunk_linked_out_of_the_store_exits_6_in_one_line(tmp_path: Path) -> None:
    write_turn(tmp_path / "store", b"{}\n")
    chunk = tmp_path / "store" / CHUNK
    chunk.unlink()
    (tmp_path / "secret").write_bytes(b'{"secret":1}\n')
    chunk.symlink_to(tmp_path / "secret")
    with pytest.raises(StoreEscapeError):
        anyio.run(FilesystemStore(tmp_path / "store").get, CHUNK)
    result = run_cli(["tail", "store", "step/", "t1"], tmp_path)
    message = assert_one_line_error(result, EXIT_BAD_STORE)
    assert "symbolic link" in message
    assert "secret" not in result.stdout
