"""A stored turn read back and checked: the one oracle of the stored layout the tests share.

Keys, names and decoders come from the layout's owner, ``follower._format._layout``
(the contract readers rely on, docs/protocol.md). The checks are this module's
own, not the library's reader's (``follower._storing._reader``), so a test of what was
stored does not grade the library with its own answers:

- every object in the turn's folder is a chunk or one of the turn's marks
  (``task.json`` among them, written before the first chunk);
- the chunks are contiguous from 0, and each holds exactly ``next - after``
  events, one compact JSON value a line;
- the marks decode as the layout says (``EndMark.decode``, ``NextLink.decode``).

A turn is read from an object store (:func:`stored_turn`) or from the files a
file store left (:func:`read_turn`, :func:`read_linked_turns`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from follower import ObjectStore
from follower._format._layout import (
    EndMark,
    MetaMark,
    NextLink,
    TaskMark,
    TurnKeys,
    chunk_positions,
    decode_events,
)
from follower._stores import TEMP_NAME


@attrs.frozen
class StoredTurn:
    """One turn's stored live trajectory: its chunks, their events, and its marks as stored."""

    turn_id: str
    chunks: list[tuple[int, int]]
    """``(after, next)`` of each chunk, in order."""
    events: list[Any]
    meta: dict[str, Any] | None
    end: dict[str, Any] | None
    task: dict[str, Any] | None
    next_turn: dict[str, Any] | None
    """``next.json``: ``{"turn": ...}``, or ``None`` if the turn has none (yet)."""


def check_turn(keys: TurnKeys, bodies: Mapping[str, bytes]) -> StoredTurn:
    """The turn whose objects are ``bodies`` (by key), checked as it is read back."""
    by_name = dict(zip(keys.names(list(bodies)), bodies.values(), strict=True))
    meta_name, end_name, next_name, task_name = keys.names(
        [keys.meta, keys.end, keys.next, keys.task]
    )
    chunks = chunk_positions(list(by_name))
    known = {meta_name, end_name, next_name, task_name} | {name for _, _, name in chunks}
    for name in by_name:
        assert name in known, f"unexpected object {keys.live}{name}"
    events: list[Any] = []
    for after, next_, name in chunks:
        key = keys.live + name
        assert after == len(events), f"{keys.live}: chunks not contiguous at {after}: {chunks}"
        lines = by_name[name].splitlines()
        assert len(lines) == next_ - after, f"chunk {key} holds {len(lines)} lines"
        page = decode_events(by_name[name], key)
        assert len(page) == len(lines), f"chunk {key} has blank lines"
        for line, event in zip(lines, page, strict=True):
            assert line == json.dumps(event, separators=(",", ":")).encode(), (
                f"chunk {key}: not compact JSON: {line!r}"
            )
        events.extend(page)
    meta, end, next_turn = (by_name.get(name) for name in (meta_name, end_name, next_name))
    if meta is not None:
        MetaMark(**json.loads(meta))  # exactly the fields the layout names
    if end is not None:
        EndMark.decode(end, keys.end)
    if next_turn is not None:
        NextLink.decode(next_turn, keys.next)
    task = by_name.get(task_name)
    if task is not None:
        TaskMark.decode(task, keys.task)
    return StoredTurn(
        keys.turn_id,
        [(after, next_) for after, next_, _ in chunks],
        events,
        _loaded(meta),
        _loaded(end),
        _loaded(task),
        _loaded(next_turn),
    )


def _loaded(body: bytes | None) -> dict[str, Any] | None:
    return None if body is None else json.loads(body)


async def stored_turn(store: ObjectStore, prefix_key: str, turn_id: str) -> StoredTurn:
    """The turn ``turn_id`` of the step under ``prefix_key`` in ``store``, checked."""
    keys = TurnKeys(prefix_key, turn_id)
    return check_turn(keys, {key: await store.get(key) for key in await store.list(keys.live)})


def read_turn(step: Path, turn_id: str) -> StoredTurn:
    """A turn from the files under ``step`` (a file store's folder of one step), checked.

    A write cut short (a killed process) leaves the store's temporary file, which
    no listing shows: it is not an object, and not read here either.
    """
    keys = TurnKeys("", turn_id)
    live = step / keys.live
    assert live.is_dir(), f"no folder {live}"
    return check_turn(
        keys,
        {
            keys.live + path.name: path.read_bytes()
            for path in live.iterdir()
            if not TEMP_NAME.fullmatch(path.name)
        },
    )


def read_linked_turns(step: Path, first_turn: str, *, first: bool = True) -> list[StoredTurn]:
    """The step's turns from ``first_turn`` on, by their ``next.json`` links, checked whole.

    Every turn reached is ended (its end mark counts at most its stored events:
    a put abandoned at a cancel may land after it) and linked (``next.json``
    names the next turn, null after the last); when ``first_turn`` is the
    step's first, no turn folder is left out of the chain.
    """
    turns: list[StoredTurn] = []
    current: str | None = first_turn
    while current is not None:
        assert current not in [t.turn_id for t in turns], f"the links loop at {current}"
        turn = read_turn(step, current)
        assert turn.end is not None, f"{current}: no end.json"
        assert turn.end["next"] <= len(turn.events), (current, turn.end)
        assert turn.next_turn is not None, f"{current}: no next.json"
        turns.append(turn)
        current = turn.next_turn["turn"]
    folders = {path.name for path in step.iterdir()}
    if first:
        assert folders == {t.turn_id for t in turns}, (folders, [t.turn_id for t in turns])
    assert folders >= {t.turn_id for t in turns}
    return turns
