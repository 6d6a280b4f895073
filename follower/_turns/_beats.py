"""When a turn's next heartbeat is due, and who writes it: its follower, or a task of its own.

A task that only waits to beat cost each open turn about 30 tracked objects and
5 KiB, a fifth of what the turn keeps and of what the collector passes over
(docs/benchmarks.md, "The floor under the start-up and RSS targets"). A follower
that reads and waits has the time in between, so a turn's follower writes the
beats itself: before a read, when one is due, and by waking for it when its next
read comes later than a beat may wait. Once that cannot keep the beats on time,
they go to a task of the turn's group for the rest of the turn, which the block
starts (the one module that owns tasks):

- the follower has ended, or was never one that beats (a stream's wait is the
  stream: it has no time in between);
- a read still had no answer a quarter interval after the beat fell due (a slow agent);
- a beat took longer than that (a slow store).

Either way each beat is one :meth:`Heartbeat.beat`, bounded by the interval, and
the next falls due one interval after this one was due, or at once if that has
passed: never a burst.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import attrs

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._storing._heartbeat import Heartbeat

# How late a beat may be, in intervals, before its follower stops waiting for the read
# it is in. A reader may judge a writer gone once a beat is 1.9 intervals late
# (docs/protocol.md, "When it is never said"): a beat started a quarter late, its put
# bounded by one interval, lands by 1.25, which leaves the rest to a starved event loop.
LATE_INTERVALS = 0.25


@attrs.define(eq=False)
class TurnBeats:
    """A turn's heartbeats: when the next is due, and whether its follower writes them.

    ``to_task`` starts the task that writes them when the follower no longer can
    (the block's); it is called once, whatever calls :meth:`to_task` again.
    """

    heartbeat: Heartbeat
    _start_task: Callable[[], None]
    due: float = attrs.field(factory=anyio.current_time)
    by_follower: bool = True

    @property
    def interval(self) -> float:
        return self.heartbeat.heartbeat_seconds

    def late_at(self) -> float:
        """The latest the beat due may be written: past it, the follower's read is cut short."""
        return self.due + LATE_INTERVALS * self.interval

    async def write(self) -> float:
        """Write the beat due, within one interval; the next falls due. How long it took."""
        began = anyio.current_time()
        with anyio.move_on_after(self.interval):
            await self.heartbeat.beat()
        now = anyio.current_time()
        self.due = max(self.due + self.interval, now)
        return now - began

    async def beat(self) -> None:
        """The follower's beat: written, and the beats moved to a task if it took too long."""
        took = await self.write()
        if took > LATE_INTERVALS * self.interval:  # a slow store: the reads go on without it
            self.to_task()

    def to_task(self) -> None:
        """From now on a task of the turn writes the beats (once; the follower's stop)."""
        if self.by_follower:
            self.by_follower = False
            self._start_task()
