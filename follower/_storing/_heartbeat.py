"""The writer's sign of life: one new, write-once heartbeat object a beat, beside a turn's objects.

A store is write-once, so a writer cannot touch an object to say it is alive:
each beat is a new object, ``<prefix_key><turn_id>/alive/<seq:08d>.json``. A
reader that sees no new one for a bound knows the writer stopped
(docs/protocol.md, "The writer's heartbeat"). This module writes one beat at a
time and never spawns a task: the turn's block runs the beats in its own task
group, every ``heartbeat_seconds``, and cancels them with the block.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from .._errors import ObjectExistsError
from .._format._layout import JSON, HeartbeatMark, parse_heartbeat_name
from .._retries import failure_reason
from .._stores._protocol import list_keys

if TYPE_CHECKING:
    from .._format._layout import TurnKeys
    from .._stores._protocol import ObjectStore

logger = logging.getLogger("follower.chunks")


@attrs.define(eq=False)
class Heartbeat:
    """Writes one turn's heartbeats, each a new object with the next sequence number.

    :meth:`beat` never raises an ``Exception``: a beat that fails is logged
    (once as a run of failures starts, once as they land again) and the next
    beat has the next number, so a slow or failing store costs the turn nothing
    but a reader's belief that its writer is alive. Only a cancel leaves it.
    """

    store: ObjectStore
    keys: TurnKeys
    heartbeat_seconds: float
    beats: int = attrs.field(init=False, default=0)  # heartbeats that landed
    _seq: int | None = attrs.field(init=False, default=None)  # the next, once known
    _failing: bool = attrs.field(init=False, default=False)

    async def beat(self) -> None:
        """Write the next heartbeat: one put (and, on the first beat, one listing)."""
        try:
            if self._seq is None:
                self._seq = await self._first_seq()
            seq = self._seq
            # Whatever the put does, the next beat is a new object: a put abandoned
            # in its worker thread may still land, and must not be overwritten.
            self._seq += 1
            body = HeartbeatMark.beating_now(seq, self.heartbeat_seconds).encode()
            try:
                await self.store.put(self.keys.heartbeat(seq), body, content_type=JSON)
            except ObjectExistsError:
                # Another writer's (an earlier attempt's late put, or a run racing this
                # one in the same turn): the next number is this one's.
                self._seq = await self._first_seq()
                raise
        except Exception as exc:  # a cancel is no Exception: it goes on
            if not self._failing:
                self._failing = True
                logger.warning(
                    "turn %s: a heartbeat failed (%s); a reader may judge its writer gone "
                    "if they keep failing",
                    self.keys.turn_id,
                    failure_reason(exc),
                    extra={"turn_id": self.keys.turn_id},
                )
            return
        self.beats += 1
        if self._failing:
            self._failing = False
            logger.warning(
                "turn %s: heartbeats land again",
                self.keys.turn_id,
                extra={"turn_id": self.keys.turn_id},
            )

    async def _first_seq(self) -> int:
        """One past the greatest heartbeat stored: a resumed turn's writer goes on after it."""
        seqs = [
            parse_heartbeat_name(key[len(self.keys.alive) :])
            for key in await list_keys(self.store, self.keys.alive)
        ]
        return max((seq for seq in seqs if seq is not None), default=-1) + 1
