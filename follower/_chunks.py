"""The sink that stores one turn's pages as contiguous, write-once chunks."""

from __future__ import annotations

import logging

from ._errors import ObjectExistsError, UsageError
from ._layout import END, META, chunk_name, encode_events, encode_json, turn_prefix
from ._stores import ObjectStore
from ._wire import TrajectoryBatch, TrajectoryState

logger = logging.getLogger("follower")

JSONL = "application/jsonl"
JSON = "application/json"


class LiveTrajectoryChunks:
    """Stores each batch of one turn under ``<prefix_key><turn_id>/live/``.

    Call it with each :class:`TrajectoryBatch` in order; :meth:`end` writes the
    end mark. ``stored_next`` only moves once a chunk is written, so the end
    mark never claims an event that is not stored.
    """

    def __init__(self, store: ObjectStore, prefix_key: str, turn_id: str) -> None:
        self._store = store
        self._prefix = turn_prefix(prefix_key, turn_id)
        self.turn_id = turn_id
        self.stored_next = 0
        self.format: str | None = None
        self.final_state: TrajectoryState | None = None
        self._ended = False

    @property
    def prefix(self) -> str:
        """The key prefix of this turn's objects."""
        return self._prefix

    async def __call__(self, batch: TrajectoryBatch) -> None:
        if self._ended:
            raise UsageError(f"turn {self.turn_id!r} is already marked ended")
        if batch.after != self.stored_next:
            raise UsageError(
                f"turn {self.turn_id!r}: batch starts at {batch.after}, "
                f"but {self.stored_next} events are stored; chunks must be contiguous"
            )
        if batch.format is not None:
            await self._store_format(batch.format)
        if batch.events:
            await self._put(chunk_name(batch.after, batch.next), encode_events(batch.events), JSONL)
            self.stored_next = batch.next
        if batch.last:
            self.final_state = batch.state

    async def end(self, state: TrajectoryState) -> None:
        """Write the end mark: the turn's state and how many events are stored."""
        await self._put(END, encode_json({"state": state.value, "next": self.stored_next}), JSON)
        self._ended = True

    async def _store_format(self, fmt: str) -> None:
        if self.format is None:
            await self._put(META, encode_json({"format": fmt}), JSON)
            self.format = fmt
        elif fmt != self.format:
            logger.warning(
                "turn %s: a page names format %r, but %r is stored; keeping %r",
                self.turn_id,
                fmt,
                self.format,
                self.format,
            )

    async def _put(self, name: str, body: bytes, content_type: str) -> None:
        try:
            await self._store.put(self._prefix + name, body, content_type=content_type)
        except ObjectExistsError:
            # Write-once: finding the object there means an earlier attempt wrote it.
            logger.debug("turn %s: %s was already stored", self.turn_id, name)
