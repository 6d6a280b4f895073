"""The write-once stores: `ObjectStore`, `FilesystemStore`, `MemoryStore`.

As docs/design.md, "Stores: write-once", describes them.

Every store: put/get/list round-trip, sorted prefix listings, write-once with
exactly one winner among racing writers, typed errors for missing objects and bad
keys. The filesystem store also never shows half an object, never reaches outside
its root, and turns OS failures into :class:`follower.StoreError`. ``S3Store`` runs
the same contract on the S3 server of tests/stores/test_s3_store.py.

These run in real time on the default backends: the filesystem store works in
worker threads, which virtual clocks would time out.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import follower
from follower import (
    FilesystemStore,
    FollowerError,
    InvalidArgumentError,
    InvalidKeyError,
    MemoryStore,
    ObjectConflictError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectStore,
    StoreError,
    StoreEscapeError,
    UsageError,
)
from follower._stores import list_keys
from follower.s3 import S3Store

from .test_s3_store import new_bucket, running_s3_server

pytestmark = pytest.mark.anyio

JSON = "application/json"
TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{32}\.tmp")

BAD_KEYS = [
    pytest.param("", id="empty"),
    pytest.param("/a", id="leading-slash"),
    pytest.param("a/", id="trailing-slash"),
    pytest.param("a//b", id="empty-segment"),
    pytest.param("./a", id="dot"),
    pytest.param("a/../b", id="dotdot"),
    pytest.param("..", id="dotdot-alone"),
    pytest.param("a\\b", id="backslash"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\nb", id="newline"),
    pytest.param("a\x7fb", id="del"),
]

BAD_LIST_PREFIXES = [
    pytest.param("/", id="slash-only"),
    pytest.param("/a", id="leading-slash"),
    pytest.param("a//", id="empty-segment"),
    pytest.param("./", id="dot"),
    pytest.param("../a", id="dotdot"),
    pytest.param("a/../", id="dotdot-inside"),
    pytest.param("a\\", id="backslash"),
    pytest.param("a\x00", id="nul"),
]


@pytest.fixture(scope="module")
def s3_client() -> Iterator[Any]:
    with running_s3_server() as server:
        client = server.client(max_pool_connections=20)
        yield client
        client.close()


@pytest.fixture(params=["memory", "filesystem-path", "filesystem-str", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "s3":
        # The server starts for the first S3 test only; each test has a bucket of its own.
        client = request.getfixturevalue("s3_client")
        return S3Store(new_bucket(client), client=client)
    root = tmp_path / "store"
    return FilesystemStore(root if request.param == "filesystem-path" else str(root))


def files_under(root: Path) -> list[str]:
    """Every file under ``root``, temporary or not, as a sorted list of relative paths."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir())


# --- every store ----------------------------------------------------------------------


async def test_the_store_satisfies_the_protocol(store: ObjectStore) -> None:
    assert isinstance(store, follower.ObjectStore)


async def test_put_then_get_returns_the_body(store: ObjectStore) -> None:
    with anyio.fail_after(10):
        every_byte = bytes(range(256))
        await store.put("steps/s1/body.bin", every_byte, content_type="application/octet-stream")
        await store.put("empty", b"", content_type=JSON)
        assert await store.get("steps/s1/body.bin") == every_byte
        assert await store.get("empty") == b""


async def test_list_is_sorted_whatever_the_write_order(store: ObjectStore) -> None:
    with anyio.fail_after(10):
        # "a/b-c" < "a/b.c" < "a/b/c" as strings, though a folder walk meets "a/b/" first.
        keys = ["z", "a/b/c", "a/b-c", "a/b.c", "a/b/a/x", "b", "a/a", "a/b0"]
        for key in keys:
            await store.put(key, key.encode(), content_type=JSON)
        assert await store.list("") == sorted(keys)


async def test_list_filters_by_prefix_even_one_that_is_not_a_folder(store: ObjectStore) -> None:
    with anyio.fail_after(10):
        keys = ["a/bc", "a/b/c", "a/bd/e", "a/c", "ab", "b/a"]
        for key in keys:
            await store.put(key, b"x", content_type=JSON)
        assert await store.list("a/b") == ["a/b/c", "a/bc", "a/bd/e"]
        assert await store.list("a/b/") == ["a/b/c"]
        assert await store.list("a/bc") == ["a/bc"]
        assert await store.list("a/") == ["a/b/c", "a/bc", "a/bd/e", "a/c"]
        assert await store.list("a") == ["a/b/c", "a/bc", "a/bd/e", "a/c", "ab"]
        assert await store.list("") == sorted(keys)
        assert await store.list("zzz") == []
        assert await store.list("nowhere/deep/") == []


# Keys whose order a folder walk would not give: "a/b!" < "a/b-c" < "a/b/..." < "a/b0".
LISTED_KEYS = ["a/b!", "a/b-c", "a/b/c", "a/b/a/x", "a/b0", "a/bc/d", "a/c", "ab", "b/a", "z"]
START_AFTERS = [
    "",
    "a",
    "a/",
    "a/b",
    "a/b!",
    "a/b\x00",
    "a/b\ud800",
    "a/b.",
    "a/b/",
    "a/b/a",
    "a/b/a/x",
    "a/b/b",
    "a/b0",
    "a/bc",
    "a/bc/",
    "a/c",
    "ab",
    "b",
    "é",
    "zz",
]


async def test_list_starts_after_any_string_under_any_prefix(store: ObjectStore) -> None:
    with anyio.fail_after(30):
        for key in LISTED_KEYS:
            await store.put(key, b"x", content_type=JSON)
        for prefix in ["", "a", "a/", "a/b", "a/b/", "a/bc/", "b/", "zzz"]:
            under = [key for key in sorted(LISTED_KEYS) if key.startswith(prefix)]
            assert await store.list(prefix, start_after=None) == under
            for start_after in START_AFTERS:
                listed = await store.list(prefix, start_after=start_after)
                assert listed == [key for key in under if key > start_after], (prefix, start_after)


async def test_list_refuses_a_start_after_that_is_not_a_string(store: ObjectStore) -> None:
    with anyio.fail_after(10), pytest.raises(InvalidArgumentError):
        await store.list("", start_after=b"a")  # type: ignore[arg-type]


class OldProtocolStore:
    """A store written before ``start_after``: ``list(prefix)`` only."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.listed: list[str] = []

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await self.inner.put(key, body, content_type=content_type)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def list(self, prefix: str) -> list[str]:
        keys = await self.inner.list(prefix)
        self.listed.extend(keys)
        return keys


async def test_a_store_of_the_old_protocol_lists_after_a_key_through_a_whole_listing() -> None:
    old = OldProtocolStore()
    for key in LISTED_KEYS:
        await old.put(key, b"x", content_type=JSON)
    assert isinstance(old, follower.ObjectStore)
    assert await list_keys(old, "a/", start_after="a/b0") == ["a/bc/d", "a/c"]  # type: ignore[arg-type]
    assert old.listed == [key for key in sorted(LISTED_KEYS) if key.startswith("a/")]
    assert await list_keys(old, "a/") == await old.inner.list("a/")  # type: ignore[arg-type]


async def test_a_store_of_the_new_protocol_is_asked_for_what_sorts_after() -> None:
    class Counting(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[str | None] = []

        async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
            self.asked.append(start_after)
            return await super().list(prefix, start_after=start_after)

    store = Counting()
    for key in LISTED_KEYS:
        await store.put(key, b"x", content_type=JSON)
    assert await list_keys(store, "a/", start_after="a/b0") == ["a/bc/d", "a/c"]
    assert store.asked == ["a/b0"]


async def test_the_memory_store_keeps_a_bytes_body_without_a_copy_and_copies_a_bytearray() -> None:
    store = MemoryStore()
    body = b"x" * 1000
    await store.put("k", body, content_type=JSON)
    assert await store.get("k") is body
    buffer = bytearray(b"abc")
    await store.put("b", buffer, content_type=JSON)  # type: ignore[arg-type]
    buffer[0] = ord("z")
    assert await store.get("b") == b"abc"


async def test_list_of_an_empty_store_is_empty(store: ObjectStore) -> None:
    with anyio.fail_after(10):
        assert await store.list("") == []


async def test_a_second_put_of_other_bytes_conflicts_and_the_first_body_stays(
    store: ObjectStore,
) -> None:
    with anyio.fail_after(10):
        await store.put("once", b"first", content_type=JSON)
        with pytest.raises(ObjectConflictError, match="other bytes"):
            await store.put("once", b"second", content_type=JSON)
        with pytest.raises(ObjectConflictError):
            await store.put("once", b"firs", content_type=JSON)
        assert await store.get("once") == b"first"
        assert await store.list("") == ["once"]


async def test_a_second_put_of_the_same_bytes_is_done(store: ObjectStore) -> None:
    with anyio.fail_after(10):
        await store.put("once", b"first", content_type=JSON)
        await store.put("once", b"first", content_type=JSON)
        await store.put("once", bytearray(b"first"), content_type=JSON)
        assert await store.get("once") == b"first"
        assert await store.list("") == ["once"]


async def test_get_of_a_missing_key_raises_object_not_found(store: ObjectStore) -> None:
    with anyio.fail_after(10):
        await store.put("a/b", b"x", content_type=JSON)
        for missing in ["nothing", "a/c", "a", "a/b/c", "x/y/z"]:
            with pytest.raises(ObjectNotFoundError):
                await store.get(missing)


@pytest.mark.parametrize("key", BAD_KEYS)
async def test_put_refuses_bad_keys_and_writes_nothing(store: ObjectStore, key: str) -> None:
    with anyio.fail_after(10):
        with pytest.raises(InvalidKeyError):
            await store.put(key, b"x", content_type=JSON)
        assert await store.list("") == []


@pytest.mark.parametrize("key", BAD_KEYS)
async def test_get_refuses_bad_keys(store: ObjectStore, key: str) -> None:
    with anyio.fail_after(10):
        await store.put("a/b", b"x", content_type=JSON)
        with pytest.raises(InvalidKeyError):
            await store.get(key)


@pytest.mark.parametrize("prefix", BAD_LIST_PREFIXES)
async def test_list_refuses_bad_prefixes(store: ObjectStore, prefix: str) -> None:
    with anyio.fail_after(10):
        await store.put("a/b", b"x", content_type=JSON)
        with pytest.raises(InvalidKeyError):
            await store.list(prefix)


def racer_body(writer: int) -> bytes:
    return f"writer {writer} ".encode() * 4096


async def race(store: ObjectStore, key: str, writers: int) -> dict[int, str]:
    """Start ``writers`` puts of one key at once; return each writer's outcome."""
    outcomes: dict[int, str] = {}
    go = anyio.Event()

    async def write(writer: int) -> None:
        await go.wait()
        try:
            await store.put(key, racer_body(writer), content_type=JSON)
        except ObjectExistsError:
            outcomes[writer] = "refused"
        else:
            outcomes[writer] = "won"

    async with anyio.create_task_group() as tg:
        for writer in range(writers):
            tg.start_soon(write, writer)
        go.set()
    return outcomes


async def test_exactly_one_of_many_concurrent_writers_wins(store: ObjectStore) -> None:
    with anyio.fail_after(10):
        for round_ in range(5):
            key = f"race/{round_}/key"
            outcomes = await race(store, key, 16)
            assert len(outcomes) == 16
            winners = [writer for writer, outcome in outcomes.items() if outcome == "won"]
            assert len(winners) == 1, outcomes
            assert await store.get(key) == racer_body(winners[0])
            assert await store.list(f"race/{round_}/") == [key]


# --- the memory store -----------------------------------------------------------------


async def test_the_memory_store_remembers_the_content_type() -> None:
    with anyio.fail_after(10):
        store = MemoryStore()
        await store.put("a.jsonl", b"1\n", content_type="application/jsonl")
        assert store.content_type("a.jsonl") == "application/jsonl"
        with pytest.raises(ObjectNotFoundError):
            store.content_type("b.jsonl")


@pytest.mark.parametrize("kind", [MemoryStore, FilesystemStore, S3Store])
def test_the_stores_are_final_attrs_resources_equal_only_to_themselves(
    kind: type[Any], tmp_path: Path
) -> None:
    assert attrs.has(kind)
    assert getattr(kind, "__final__", False)
    made = {
        MemoryStore: MemoryStore,
        FilesystemStore: lambda: FilesystemStore(tmp_path),
        S3Store: lambda: S3Store("bucket"),
    }[kind]
    one, other = made(), made()
    # Two stores of the same settings are two stores: each holds its own state (objects, a client).
    assert one == one
    assert one != other
    assert len({one, other}) == 2


def test_the_sink_shows_its_endpoint_without_its_password() -> None:
    sink = follower.lowlevel.LiveTrajectoryChunks(
        MemoryStore(), "steps/s1/", "turn-1", task_id="t1", endpoint="https://u:hunter2@agent/"
    )
    assert attrs.has(follower.lowlevel.LiveTrajectoryChunks)
    assert getattr(follower.lowlevel.LiveTrajectoryChunks, "__final__", False)
    assert "hunter2" not in repr(sink)
    assert "turn-1" in repr(sink)


# --- the filesystem store -------------------------------------------------------------


async def test_each_object_is_a_file_under_the_root(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = FilesystemStore(tmp_path)
        await store.put("steps/s1/end.json", b'{"next":0}', content_type=JSON)
        assert (tmp_path / "steps" / "s1" / "end.json").read_bytes() == b'{"next":0}'
        assert files_under(tmp_path) == ["steps/s1/end.json"]


def test_the_root_is_resolved_whether_given_as_str_or_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    assert FilesystemStore(tmp_path / "alias").root == (tmp_path / "real").resolve()
    assert FilesystemStore(str(tmp_path / "alias")).root == (tmp_path / "real").resolve()


async def test_a_store_whose_root_is_a_symlink_works(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        (tmp_path / "real").mkdir()
        (tmp_path / "alias").symlink_to(tmp_path / "real")
        store = FilesystemStore(tmp_path / "alias")
        await store.put("a/b", b"x", content_type=JSON)
        assert await store.get("a/b") == b"x"
        assert await store.list("") == ["a/b"]
        assert (tmp_path / "real" / "a" / "b").read_bytes() == b"x"


async def test_a_missing_root_is_created_on_the_first_put(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = FilesystemStore(tmp_path / "not" / "yet")
        assert await store.list("") == []
        with pytest.raises(ObjectNotFoundError):
            await store.get("a")
        await store.put("a", b"x", content_type=JSON)
        assert await store.get("a") == b"x"


async def test_racing_writers_leave_no_temporary_file_behind(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        outcomes = await race(FilesystemStore(tmp_path), "race/key", 16)
        assert sorted(outcomes.values()) == ["refused"] * 15 + ["won"]
        assert files_under(tmp_path) == ["race/key"]


async def test_readers_never_see_half_an_object(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = FilesystemStore(tmp_path)
        bodies = {f"big/{n}": bytes([n + 1]) * (4 * 1024 * 1024) for n in range(8)}
        writing = True
        looks = 0

        async def write_all() -> None:
            nonlocal writing
            try:
                for key, body in bodies.items():
                    await store.put(key, body, content_type="application/octet-stream")
            finally:
                writing = False

        async def look_while_writing() -> None:
            nonlocal looks
            whole: set[str] = set()  # write-once: a key seen whole stays whole
            while writing:
                listed = await store.list("")
                # Temporary files exist for the whole of each write: a listing
                # that showed them would show a key nobody wrote.
                assert set(listed) <= set(bodies), listed
                for key in sorted(set(bodies) - whole):
                    try:
                        seen = await store.get(key)
                    except ObjectNotFoundError:
                        assert key not in listed
                    else:
                        assert seen == bodies[key], f"{key}: {len(seen)} of {len(bodies[key])}"
                        whole.add(key)
                looks += 1

        async with anyio.create_task_group() as tg:
            tg.start_soon(look_while_writing)
            tg.start_soon(write_all)

        assert looks > 0
        assert await store.list("") == sorted(bodies)
        assert files_under(tmp_path) == sorted(bodies)


async def test_temporary_files_are_neither_listed_nor_readable_as_keys(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = FilesystemStore(tmp_path)
        await store.put("turn/end.json", b"{}", content_type=JSON)
        temp_name = ".next.json.0123456789abcdef0123456789abcdef.tmp"
        assert TEMP_NAME.fullmatch(temp_name)
        (tmp_path / "turn" / temp_name).write_bytes(b'{"tu')
        assert await store.list("") == ["turn/end.json"]
        assert await store.list("turn/.") == []
        with pytest.raises(InvalidKeyError):
            await store.get(f"turn/{temp_name}")
        with pytest.raises(InvalidKeyError):
            await store.put(f"turn/{temp_name}", b"x", content_type=JSON)


@pytest.fixture
def escape(tmp_path: Path) -> tuple[FilesystemStore, Path]:
    """A store whose root holds ``link`` -> a folder outside it, and ``secret`` -> a file."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret")
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "secret").symlink_to(outside / "secret.txt")
    return FilesystemStore(root), outside


@pytest.mark.parametrize("key", ["link/new", "link/secret.txt", "link/sub/new", "link/a/b/c"])
async def test_put_through_a_symlink_out_of_the_root_is_refused_and_writes_nothing(
    escape: tuple[FilesystemStore, Path], key: str
) -> None:
    with anyio.fail_after(10):
        store, outside = escape
        # The key is valid: what the store's folder holds is at fault, so a store error.
        with pytest.raises(StoreEscapeError) as caught:
            await store.put(key, b"written", content_type=JSON)
        assert isinstance(caught.value, StoreError)
        assert not isinstance(caught.value, UsageError)
        # Nothing outside the root: no file, and no folder either.
        assert sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*")) == [
            "secret.txt"
        ]
        assert (outside / "secret.txt").read_bytes() == b"secret"


@pytest.mark.parametrize("key", ["link/secret.txt", "secret"])
async def test_get_through_a_symlink_out_of_the_root_is_refused(
    escape: tuple[FilesystemStore, Path], key: str
) -> None:
    with anyio.fail_after(10):
        store, _outside = escape
        with pytest.raises(StoreEscapeError, match="symbolic link"):
            await store.get(key)


async def test_put_onto_a_symlink_to_a_file_outside_leaves_that_file_alone(
    escape: tuple[FilesystemStore, Path],
) -> None:
    with anyio.fail_after(10):
        store, outside = escape
        with pytest.raises(StoreEscapeError):
            await store.put("secret", b"written", content_type=JSON)
        assert (outside / "secret.txt").read_bytes() == b"secret"


async def test_list_does_not_reach_through_a_symlink_out_of_the_root(
    escape: tuple[FilesystemStore, Path],
) -> None:
    with anyio.fail_after(10):
        store, _outside = escape
        assert await store.list("link/") == []
        assert "link/secret.txt" not in await store.list("")
        assert "link/secret.txt" not in await store.list("link")


async def test_a_root_that_is_a_regular_file_gives_store_errors(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        root = tmp_path / "a-file"
        root.write_bytes(b"not a folder")
        store = FilesystemStore(root)
        with pytest.raises(StoreError) as caught:
            await store.put("k", b"x", content_type=JSON)
        # The key is not taken: the store failed.
        assert not isinstance(caught.value, ObjectExistsError)
        assert isinstance(caught.value.__cause__, OSError)
        with pytest.raises(StoreError):
            await store.get("k")
        assert root.read_bytes() == b"not a folder"


async def test_a_segment_of_255_bytes_is_stored_and_one_of_256_refused_on_every_store(
    tmp_path: Path,
) -> None:
    # The temporary file's name does not grow with the key's: 255 bytes fit beside it.
    with anyio.fail_after(10):
        for store in (MemoryStore(), FilesystemStore(tmp_path)):
            longest = "a/" + "é" * 127 + "x"  # 255 bytes of UTF-8
            await store.put(longest, b"x", content_type=JSON)
            assert await store.get(longest) == b"x"
            assert await store.list("a/") == [longest]
            with pytest.raises(InvalidKeyError, match="255"):
                await store.put(longest + "x", b"x", content_type=JSON)
            with pytest.raises(InvalidKeyError, match="1024"):
                await store.put("/".join(["k" * 200] * 6), b"x", content_type=JSON)


async def test_a_path_too_long_for_the_filesystem_gives_store_errors(tmp_path: Path) -> None:
    # A valid key under a root deep enough that the whole path passes the system's limit.
    with anyio.fail_after(10):
        root = tmp_path.joinpath(*["d" * 250] * 14)
        store = FilesystemStore(root)
        key = "/".join(["k" * 250] * 4)
        with pytest.raises(StoreError) as caught:
            await store.put(key, b"x", content_type=JSON)
        assert not isinstance(caught.value, ObjectExistsError)
        assert isinstance(caught.value.__cause__, OSError)
        with pytest.raises(StoreError):
            await store.get(key)
        with pytest.raises(StoreError):
            await store.list(key + "/")


async def test_a_key_no_file_name_can_hold_gives_a_typed_error(tmp_path: Path) -> None:
    # A lone surrogate passes the key rules, but cannot be encoded as a file name.
    with anyio.fail_after(10):
        store = FilesystemStore(tmp_path)
        with pytest.raises(FollowerError):
            await store.put("a\ud800", b"x", content_type=JSON)
        with pytest.raises(FollowerError):
            await store.get("a\ud800")


# --- any valid key, on every store ----------------------------------------------------

segments = st.text(
    alphabet=st.characters(exclude_characters="/\\", exclude_categories=("Cc", "Cs")),
    min_size=1,
    max_size=16,
).filter(lambda segment: segment not in (".", "..") and not TEMP_NAME.fullmatch(segment))
keys = st.lists(segments, min_size=1, max_size=4).map("/".join)


@settings(max_examples=40, deadline=None)
@given(key=keys, body=st.binary(max_size=64))
async def test_any_valid_key_round_trips_on_every_store(key: str, body: bytes) -> None:
    with anyio.fail_after(10):
        with tempfile.TemporaryDirectory() as root:
            for store in (MemoryStore(), FilesystemStore(root)):
                await store.put(key, body, content_type=JSON)
                assert await store.get(key) == body
                assert await store.list("") == [key]
                assert await store.list(key) == [key]
                if body != b"again":
                    with pytest.raises(ObjectConflictError):
                        await store.put(key, b"again", content_type=JSON)
                await store.put(key, body, content_type=JSON)
                assert await store.get(key) == body


@settings(max_examples=60, deadline=None)
@given(
    stored=st.lists(keys, max_size=8, unique=True),
    prefix=st.sampled_from(["", "a", "a/", "a/b"]) | segments.map(lambda s: s[:2]),
    start_after=st.none() | st.text(max_size=6) | keys,
)
async def test_list_after_is_the_whole_listing_from_that_point_on(
    stored: list[str], prefix: str, start_after: str | None
) -> None:
    with anyio.fail_after(10), tempfile.TemporaryDirectory() as root:
        for store in (MemoryStore(), FilesystemStore(root)):
            for key in stored:
                # A file where another key needs a folder ("a" and "a/b") fails on disk.
                with contextlib.suppress(FollowerError):
                    await store.put(key, b"x", content_type=JSON)
            whole = await store.list(prefix)
            listed = await store.list(prefix, start_after=start_after)
            assert listed == [k for k in whole if start_after is None or k > start_after]


# --- names a folder store cannot tell apart --------------------------------------------


async def test_a_put_onto_a_folder_of_keys_agrees_with_get_that_no_object_is_there(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(10):
        store = FilesystemStore(tmp_path)
        await store.put("a/b", b"x", content_type=JSON)
        with pytest.raises(ObjectNotFoundError, match="folder"):
            await store.get("a")
        # Not "exists" (nothing is there to be the same bytes or a conflict): the store
        # cannot hold an object and keys under it at one name.
        with pytest.raises(StoreError, match="folder of other keys") as caught:
            await store.put("a", b"x", content_type=JSON)
        assert not isinstance(caught.value, ObjectExistsError | ObjectNotFoundError)
        assert await store.list("") == ["a/b"]


async def test_a_symlink_that_stays_inside_the_root_is_followed(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = FilesystemStore(tmp_path)
        await store.put("real/x", b"x", content_type=JSON)
        (tmp_path / "alias").symlink_to(tmp_path / "real" / "x")
        assert await store.get("alias") == b"x"
        assert "alias" in await store.list("")


@pytest.fixture
def case_blind_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``os.link`` behave as on a case-insensitive filesystem (macOS's, Windows').

    Linux has none to test on without mounting one, so only the link, where the
    filesystem decides that a name is taken, is simulated: a name taken under any
    spelling that folds to the same is taken. Everything else is the real folder.
    """
    real_link = os.link

    def link(source: Any, target: Any) -> None:
        target = Path(target)
        folded = unicodedata.normalize("NFD", target.name).casefold()
        for name in os.listdir(target.parent):
            if unicodedata.normalize("NFD", name).casefold() == folded:
                raise FileExistsError(errno.EEXIST, "File exists", str(target))
        real_link(source, target)

    monkeypatch.setattr(os, "link", link)


@pytest.mark.usefixtures("case_blind_links")
@pytest.mark.parametrize(
    ("first", "second"),
    [("turn/Live", "turn/live"), ("turn/caf\u00e9", "turn/cafe\u0301")],
    ids=["case", "unicode-normalisation"],
)
async def test_keys_that_one_file_would_hold_conflict_at_put_even_with_the_same_bytes(
    tmp_path: Path, first: str, second: str
) -> None:
    with anyio.fail_after(10):
        store = FilesystemStore(tmp_path)
        await store.put(first, b"x", content_type=JSON)
        with pytest.raises(ObjectConflictError, match="case-sensitive") as caught:
            await store.put(second, b"x", content_type=JSON)
        assert repr(first.split("/")[1]) in str(caught.value)
        # The first key's own retry is still done, as write-once says.
        await store.put(first, b"x", content_type=JSON)
        assert await store.list("turn/") == [first]


async def test_a_put_onto_a_link_to_a_folder_inside_the_root_is_a_folder_too(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(10):
        store = FilesystemStore(tmp_path)
        await store.put("real/x", b"x", content_type=JSON)
        (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
        with pytest.raises(StoreError, match="folder of other keys") as caught:
            await store.put("alias", b"x", content_type=JSON)
        assert not isinstance(caught.value, ObjectExistsError | ObjectNotFoundError)
        with pytest.raises(ObjectNotFoundError):
            await store.get("alias")
