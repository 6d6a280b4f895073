"""One turn as the store holds it now: what a resume continues, and what a summary shows.

A snapshot taken from one listing: the marks are read and checked, the chunks
are known by name (their bodies are the reader's business).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._errors import FollowerError, add_context
from .._format._layout import (
    END,
    META,
    NEXT,
    TASK,
    EndMark,
    MetaMark,
    NextLink,
    TaskMark,
    chunk_positions,
)

if TYPE_CHECKING:
    from .._format._layout import TurnKeys
    from .._stores._protocol import ObjectStore


@attrs.frozen
class StoredTurn:
    """What one turn's folder holds; ``contiguous_next`` is where a resume continues."""

    keys: TurnKeys
    names: tuple[str, ...]
    chunks: tuple[tuple[int, int], ...]
    task: TaskMark | None
    format: str | None
    end: EndMark | None
    link: NextLink | None

    @property
    def is_empty(self) -> bool:
        return not self.names

    @property
    def contiguous_next(self) -> int:
        """The position after the last chunk of the run from 0 (chunks may overlap)."""
        reached = 0
        for after, next_ in self.chunks:
            if after > reached:
                break
            reached = max(reached, next_)
        return reached

    def describe(self) -> str:
        """A short account for an error message: what is there."""
        if self.is_empty:
            return "nothing"
        parts = []
        if self.task is not None:
            parts.append(f"task {self.task.task_id!r}")
        parts.append(f"{len(self.chunks)} chunks ({self.contiguous_next} events)")
        if self.end is not None:
            parts.append(f"an end mark ({self.end.state.value})")
        if self.link is not None:
            parts.append("a link")
        return ", ".join(parts)


async def read_stored_turn(store: ObjectStore, keys: TurnKeys) -> StoredTurn:
    """List the turn's folder and read its marks; raises :class:`~follower.CorruptObjectError`.

    Every store error leaving it names the turn (``turn_id``) and the key it is about.
    """
    try:
        return await _read_stored_turn(store, keys)
    except FollowerError as exc:
        add_context(exc, turn_id=keys.turn_id, key=keys.live)
        raise


async def _read_stored_turn(store: ObjectStore, keys: TurnKeys) -> StoredTurn:
    names = tuple(keys.names(await store.list(keys.live)))
    present = set(names)

    async def body(name: str) -> bytes | None:
        if name not in present:
            return None
        try:
            return await store.get(keys.live + name)
        except FollowerError as exc:
            add_context(exc, key=keys.live + name)  # a store of the caller's may not say
            raise

    task = await body(TASK)
    meta = await body(META)
    end = await body(END)
    link = await body(NEXT)
    return StoredTurn(
        keys=keys,
        names=names,
        chunks=tuple((after, next_) for after, next_, _ in chunk_positions(list(names))),
        task=None if task is None else TaskMark.decode(task, keys.task),
        format=None if meta is None else MetaMark.decode(meta, keys.meta).format,
        end=None if end is None else EndMark.decode(end, keys.end),
        link=None if link is None else NextLink.decode(link, keys.next),
    )
