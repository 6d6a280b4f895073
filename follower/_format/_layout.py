"""The stored layout of a turn's live trajectory, the compatibility contract readers rely on.

Under ``<prefix_key><turn_id>/live/`` (docs/protocol.md, "The stored layout"):

| object                           | content                                              |
| ``task.json``                    | ``{"task_id", "endpoint", "started_at"}``, first     |
|                                  | (and ``"heartbeat_seconds"`` from a writer that beats) |
| ``<after:08d>-<next:08d>.jsonl`` | one page's events, compact JSON, one per line        |
| ``meta.json``                    | ``{"format": ...}`` once a page names a format       |
| ``end.json``                     | ``{"state", "next": <at least stored>, "complete"}`` |
| ``next.json``                    | ``{"turn": <next turn id or null>}``                 |

and beside it, under ``<prefix_key><turn_id>/alive/``, the writer's heartbeats:
``<seq:08d>.json``, ``{"seq", "at", "heartbeat_seconds"}``, a new one every
``heartbeat_seconds`` while the turn is open (readers of the old layout never list them).

This module owns every name, content type, encoder and decoder of that layout;
the sink, the turns, the reader and the demo all go through it.
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
from datetime import UTC, datetime
from typing import Any

import attrs

from .._errors import CorruptObjectError, InvalidKeyError
from .._stores._keys import MAX_KEY_BYTES, check_prefix, check_segment, check_turn_id
from ._nesting import MAX_JSON_DEPTH, nests_too_deep, too_deep_lines
from ._wire import TrajectoryState, decode_strict_json

JSON = "application/json"
JSONL = "application/jsonl"
TASK = "task.json"
META = "meta.json"
END = "end.json"
NEXT = "next.json"
# Sequence numbers of up to 18 digits, as positions.
_HEARTBEAT = re.compile(r"([0-9]{8,18})\.json")
# Positions of up to 18 digits: any count of events, and never an int() too long to parse.
_CHUNK = re.compile(r"([0-9]{8,18})-([0-9]{8,18})\.jsonl")
# A reused encoder: the same bytes as json.dumps(..., separators=...), without building one a
# call, for every value JSON holds; NaN and the infinities, which it does not, are refused.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
# The C encoder that json.dumps runs under _ENCODER.encode, made once a chunk rather than
# once an event: that setup was half of a small event's cost. A fresh one a chunk, since its
# circular-reference markers are not cleared after an error. None where CPython's C
# accelerator is missing.
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)


def _valid_prefix(_: object, __: attrs.Attribute[str], value: str) -> None:
    check_prefix(value)


def _valid_turn_id(keys: TurnKeys, __: attrs.Attribute[str], value: str) -> None:
    check_turn_id(value)
    # Every key of the turn must fit: the longest is a chunk's, far into a long turn.
    size = len(keys.prefix_key.encode()) + len(value.encode()) + len(LIVE_FOLDER) + LONGEST_NAME
    if size > MAX_KEY_BYTES:
        raise InvalidKeyError(
            f"prefix {keys.prefix_key[:40]!r}... and turn id {value[:40]!r}... are too long: "
            f"together at most {MAX_KEY_BYTES - len(LIVE_FOLDER) - LONGEST_NAME} bytes of UTF-8, "
            f"so that every key of the turn fits in {MAX_KEY_BYTES}",
            turn_id=value,
            key=keys.prefix_key,
        )


@attrs.frozen
class TurnKeys:
    """The keys of one turn's objects; the prefix and turn id are validated once, here.

    The turn id is one key segment; the prefix and the turn id together leave room
    for the turn's longest key within the key limit (docs/protocol.md, "Keys").
    """

    prefix_key: str = attrs.field(validator=_valid_prefix)
    turn_id: str = attrs.field(validator=_valid_turn_id)

    @property
    def live(self) -> str:
        """The folder of the turn's live trajectory: every key below starts with it."""
        return f"{self.prefix_key}{self.turn_id}{LIVE_FOLDER}"

    @property
    def task(self) -> str:
        return self.live + TASK

    @property
    def meta(self) -> str:
        return self.live + META

    @property
    def end(self) -> str:
        return self.live + END

    @property
    def next(self) -> str:
        return self.live + NEXT

    def chunk(self, after: int, next_: int) -> str:
        return self.live + chunk_name(after, next_)

    @property
    def alive(self) -> str:
        """The folder of the writer's heartbeats, beside :attr:`live` (never inside it)."""
        return f"{self.prefix_key}{self.turn_id}{ALIVE_FOLDER}"

    def heartbeat(self, seq: int) -> str:
        return self.alive + heartbeat_name(seq)

    def names(self, keys: list[str]) -> list[str]:
        """The object names of listed ``keys`` (the part after :attr:`live`).

        A store that lists a key outside the folder it was asked for, or
        something that is no key, is broken: :class:`CorruptObjectError`.
        """
        live = self.live
        start = len(live)
        if not isinstance(keys, list):
            raise CorruptObjectError(
                f"listing {live!r} gave a {type(keys).__name__}, not a list of keys",
                key=live,
            )
        # C-speed bounds in place of a check a key: every string that starts with
        # live sorts after it and before live with its last character ("/") moved up one.
        if keys and (
            not all(issubclass(kind, str) for kind in set(map(type, keys)))
            or min(keys) <= live
            or max(keys) >= live[:-1] + "0"
        ):
            for key in keys:
                if not (isinstance(key, str) and key.startswith(live) and len(key) > start):
                    raise CorruptObjectError(
                        f"listing {live!r} gave what is not a key under it: {key!r:.200}",
                        key=live,
                    )
        return [key[start:] for key in keys]


def default_prefix(task_id: str) -> str:
    """``follow/<task_id>/``: where a command stores a task's turns unless told otherwise.

    The task id comes from the agent (or the user), so it must be one key segment.
    """
    return f"follow/{check_segment(task_id, 'task id', {'task_id': task_id})}/"


# --- chunks ---------------------------------------------------------------------------


def chunk_name(after: int, next_: int) -> str:
    return f"{after:08d}-{next_:08d}.jsonl"


LIVE_FOLDER = "/live/"
# Beside live/, not in it: a reader's listing of live/ (and an old reader's) never holds them.
ALIVE_FOLDER = "/alive/"
# The longest object name of a turn: a chunk's, at the largest positions a name can hold.
LONGEST_NAME = len(chunk_name(10**18 - 1, 10**18 - 1))


def parse_chunk_name(name: str) -> tuple[int, int] | None:
    """``(after, next)`` for a chunk's name, ``None`` for any other object."""
    match = _CHUNK.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def chunk_positions(names: list[str]) -> list[tuple[int, int, str]]:
    """``(after, next, name)`` of every chunk among ``names``, in order."""
    found = []
    for name in names:
        parsed = parse_chunk_name(name)
        if parsed is not None:
            found.append((*parsed, name))
    return sorted(found)


# --- heartbeats ------------------------------------------------------------------------


def heartbeat_name(seq: int) -> str:
    return f"{seq:08d}.json"


def parse_heartbeat_name(name: str) -> int | None:
    """A heartbeat's sequence number for its name, ``None`` for any other object."""
    match = _HEARTBEAT.fullmatch(name)
    return None if match is None else int(match.group(1))


def encode_events(events: tuple[Any, ...]) -> bytes:
    """A chunk's body: each event as compact JSON on its own line.

    The bytes are exactly ``json.dumps(event, separators=(",", ":"))`` a line
    (ASCII, numbers as Python writes them). A float that is NaN or infinite is
    no JSON: ``ValueError``, as for a circular reference, and nothing is written
    (a page read from an agent never holds one: docs/protocol.md, "Numbers").
    """
    if _C_MAKE_ENCODER is None:  # pragma: no cover - CPython always has it
        return "".join(_ENCODER.encode(event) + "\n" for event in events).encode()
    encode = _C_MAKE_ENCODER(
        {},
        _ENCODER.default,
        json.encoder.encode_basestring_ascii,
        None,
        _ENCODER.key_separator,
        _ENCODER.item_separator,
        _ENCODER.sort_keys,
        _ENCODER.skipkeys,
        _ENCODER.allow_nan,
    )
    join = "".join
    lines = [join(encode(event, 0)) for event in events]
    lines.append("")  # the last line ends with a newline too
    return "\n".join(lines).encode("ascii")


def decode_events(body: bytes, key: str) -> list[Any]:
    """A chunk's events, one JSON value a line; :class:`CorruptObjectError` for anything else.

    Lines end with ``\\n``; blank lines are skipped. The body must be UTF-8, and
    no line may nest deeper than :data:`~follower._format._nesting.MAX_JSON_DEPTH`.
    """
    data = _stored_bytes(body, key, "stored chunk")
    text = _utf8(data, key, "stored chunk")
    deep = too_deep_lines(data)
    if deep:
        raise CorruptObjectError(
            f"stored chunk {key!r}: line {deep[0] + 1} nests deeper than {MAX_JSON_DEPTH} levels",
            key=key,
        )
    try:
        return [decode_strict_json(line) for line in text.split("\n") if line.strip()]
    except ValueError as exc:
        raise CorruptObjectError(
            f"stored chunk {key!r} holds a line that is not JSON: {exc}",
            key=key,
        ) from exc


# --- marks ----------------------------------------------------------------------------


def encode_json(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def decode_json_object(body: bytes, key: str) -> dict[str, Any]:
    """A stored JSON object, or :class:`CorruptObjectError` naming the key.

    UTF-8, nested no deeper than :data:`~follower._format._nesting.MAX_JSON_DEPTH`, and
    strict JSON: ``NaN``, ``Infinity`` and floats past the double range are refused too.
    """
    data = _stored_bytes(body, key, "stored object")
    text = _utf8(data, key, "stored object")
    if nests_too_deep(data):
        raise CorruptObjectError(
            f"stored object {key!r} nests deeper than {MAX_JSON_DEPTH} levels", key=key
        )
    try:
        value = decode_strict_json(text)
    except ValueError as exc:
        raise CorruptObjectError(f"stored object {key!r} is not JSON: {exc}", key=key) from exc
    if not isinstance(value, dict):
        raise CorruptObjectError(f"stored object {key!r} is not a JSON object", key=key)
    return value


def _stored_bytes(body: object, key: str, what: str) -> bytes:
    """What a store's get returned, as bytes (not copied when it is bytes), or refused."""
    if not isinstance(body, bytes | bytearray | memoryview):
        raise CorruptObjectError(
            f"{what} {key!r} came back from the store as {type(body).__name__}, not bytes",
            key=key,
        )
    return bytes(body)


def _utf8(data: bytes, key: str, what: str) -> str:
    """A stored body as text: strict UTF-8 (so no UTF-16 and no encoded surrogate either)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptObjectError(f"{what} {key!r} is not UTF-8: {exc}", key=key) from exc


@attrs.frozen
class MetaMark:
    """``meta.json``: the format the turn's events are in."""

    format: str

    def encode(self) -> bytes:
        return encode_json({"format": self.format})

    @classmethod
    def decode(cls, body: bytes, key: str) -> MetaMark:
        fmt = decode_json_object(body, key).get("format")
        if not isinstance(fmt, str):
            raise CorruptObjectError(
                f"stored object {key!r} has no string 'format': {fmt!r:.100}", key=key
            )
        return cls(fmt)


@attrs.frozen
class TaskMark:
    """``task.json``: whose turn this is, written before its first chunk.

    ``heartbeat_seconds``: the writer stores a heartbeat that often while the
    turn is open (``None``: a writer from before heartbeats, or a sink with none).
    """

    task_id: str
    endpoint: str
    started_at: str  # RFC 3339, UTC
    heartbeat_seconds: float | None = None

    @classmethod
    def started_now(
        cls, task_id: str, endpoint: str, heartbeat_seconds: float | None = None
    ) -> TaskMark:
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        return cls(task_id, endpoint, now.replace("+00:00", "Z"), heartbeat_seconds)

    def encode(self) -> bytes:
        mark: dict[str, Any] = {
            "task_id": self.task_id,
            "endpoint": self.endpoint,
            "started_at": self.started_at,
        }
        if self.heartbeat_seconds is not None:
            mark["heartbeat_seconds"] = self.heartbeat_seconds
        return encode_json(mark)

    @classmethod
    def decode(cls, body: bytes, key: str) -> TaskMark:
        mark = decode_json_object(body, key)
        task_id, endpoint, started_at = (
            mark.get(name) for name in ("task_id", "endpoint", "started_at")
        )
        if not (
            isinstance(task_id, str)
            and task_id
            and isinstance(endpoint, str)
            and isinstance(started_at, str)
        ):
            raise CorruptObjectError(
                f"stored object {key!r} needs string task_id, endpoint and started_at",
                key=key,
            )
        seconds = mark.get("heartbeat_seconds")
        if seconds is not None:
            seconds = heartbeat_seconds_of(seconds, key)
        return cls(task_id, endpoint, started_at, seconds)


def heartbeat_seconds_of(value: object, key: str) -> float:
    """A stored ``heartbeat_seconds``, a positive finite number, or :class:`CorruptObjectError`."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise CorruptObjectError(
            f"stored object {key!r} has no positive 'heartbeat_seconds': {value!r:.100}", key=key
        )
    return float(value)


@attrs.frozen
class EndMark:
    """``end.json``: the state the turn ended in, how many events are stored, and if all are.

    ``next`` means "at least this many are stored". ``complete`` is true when
    the terminal page was read, so every event of the task is stored; ``None``
    in a mark written before the field existed.
    """

    state: TrajectoryState
    next: int
    complete: bool | None = None

    def encode(self) -> bytes:
        mark: dict[str, Any] = {"state": self.state.value, "next": self.next}
        if self.complete is not None:
            mark["complete"] = self.complete
        return encode_json(mark)

    @classmethod
    def decode(cls, body: bytes, key: str) -> EndMark:
        """Raises :class:`CorruptObjectError` unless ``next`` is a count and ``state`` terminal."""
        mark = decode_json_object(body, key)
        number = mark.get("next")
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise CorruptObjectError(
                f"stored object {key!r} has no valid 'next': {number!r:.100}", key=key
            )
        state = mark.get("state")
        parsed = TrajectoryState.__members__.get(state.upper()) if isinstance(state, str) else None
        if parsed is None or parsed.value != state or not parsed.is_terminal:
            raise CorruptObjectError(
                f"stored object {key!r} has no terminal 'state': {state!r:.100}", key=key
            )
        complete = mark.get("complete")
        if complete is not None and not isinstance(complete, bool):
            raise CorruptObjectError(
                f"stored object {key!r} has a 'complete' of {complete!r:.100}", key=key
            )
        return cls(parsed, number, complete)


@attrs.frozen
class HeartbeatMark:
    """``alive/<seq>.json``: the writer of a turn was alive at ``at``, and beats every so often.

    ``heartbeat_seconds`` tells a reader the bound it judges the writer by; ``at``
    (RFC 3339, UTC, the writer's clock) is for people: readers never compare it
    with their own clock.
    """

    seq: int
    at: str
    heartbeat_seconds: float

    @classmethod
    def beating_now(cls, seq: int, heartbeat_seconds: float) -> HeartbeatMark:
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        return cls(seq, now.replace("+00:00", "Z"), heartbeat_seconds)

    def encode(self) -> bytes:
        return encode_json(
            {"seq": self.seq, "at": self.at, "heartbeat_seconds": self.heartbeat_seconds}
        )

    @classmethod
    def decode(cls, body: bytes, key: str) -> HeartbeatMark:
        """Raises :class:`CorruptObjectError` unless ``heartbeat_seconds`` is a positive number."""
        mark = decode_json_object(body, key)
        seq, at = mark.get("seq"), mark.get("at")
        seconds = heartbeat_seconds_of(mark.get("heartbeat_seconds"), key)
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0 or not isinstance(at, str):
            raise CorruptObjectError(
                f"stored heartbeat {key!r} needs a count 'seq' and a string 'at'", key=key
            )
        return cls(seq, at, seconds)


@attrs.frozen
class NextLink:
    """``next.json``: the turn after this one, or ``None`` after the step's last."""

    turn: str | None

    def encode(self) -> bytes:
        return encode_json({"turn": self.turn})

    @classmethod
    def decode(cls, body: bytes, key: str) -> NextLink:
        link = decode_json_object(body, key)
        if "turn" not in link:
            raise CorruptObjectError(f"stored object {key!r} has no 'turn' field", key=key)
        turn = link["turn"]
        if turn is None:
            return cls(None)
        try:
            return cls(check_turn_id(turn))
        except InvalidKeyError as exc:
            raise CorruptObjectError(
                f"stored object {key!r} names no valid turn: {turn!r:.100}",
                key=key,
            ) from exc


def turn_prefix(prefix_key: str, turn_id: str) -> str:
    """Where one turn's live trajectory is stored."""
    return TurnKeys(prefix_key, turn_id).live
