"""The stored layout of a turn's live trajectory: ``<prefix><turn_id>/live/``.

| object                          | content                                          |
| ``<after:08d>-<next:08d>.jsonl`` | one page's events, compact JSON, one per line    |
| ``meta.json``                   | ``{"format": ...}`` once a page names a format   |
| ``end.json``                    | ``{"state": ..., "next": <events stored>}``      |
| ``next.json``                   | ``{"turn": <next turn id or null>}``             |
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._errors import CorruptObjectError
from ._keys import check_prefix, check_turn_id

META = "meta.json"
END = "end.json"
NEXT = "next.json"
_CHUNK = re.compile(r"([0-9]{8,})-([0-9]{8,})\.jsonl")


def turn_prefix(prefix_key: str, turn_id: str) -> str:
    """Where one turn's live trajectory is stored."""
    return f"{check_prefix(prefix_key)}{check_turn_id(turn_id)}/live/"


def chunk_name(after: int, next_: int) -> str:
    return f"{after:08d}-{next_:08d}.jsonl"


def parse_chunk_name(name: str) -> tuple[int, int] | None:
    """``(after, next)`` for a chunk's name, ``None`` for any other object."""
    match = _CHUNK.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def encode_events(events: tuple[Any, ...]) -> bytes:
    """A chunk's body: each event as compact JSON on its own line."""
    return b"".join(json.dumps(event, separators=(",", ":")).encode() + b"\n" for event in events)


def encode_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def decode_json_object(body: bytes, key: str) -> dict[str, Any]:
    """A stored JSON object, or :class:`CorruptObjectError` naming the key."""
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise CorruptObjectError(f"stored object {key!r} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise CorruptObjectError(f"stored object {key!r} is not a JSON object")
    return value


def decode_events(body: bytes, key: str) -> list[Any]:
    """A chunk's events, one JSON value a line."""
    try:
        return [json.loads(line) for line in body.splitlines() if line.strip()]
    except ValueError as exc:
        raise CorruptObjectError(f"stored chunk {key!r} holds a line that is not JSON") from exc
