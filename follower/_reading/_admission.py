"""Reads that begin late queue for a few slots of their loop, so an overloaded loop cannot spiral.

A loop that cannot serve its followers' reads in their poll intervals wakes
them late. If every late follower read at once, thousands of reads would be in
flight together, each holding its request, response and coroutines until the
busy loop came back to it: seconds. What a read allocates then outlives the
cyclic collector's young generations and is promoted to the oldest, and every
so many promotions the collector walks every object the process keeps, which
makes the loop later still. Measured at 5,000 followers of one core
(docs/benchmarks.md): start-up took minutes instead of seconds, with most of the
time in full passes.

So while the loop is behind, every read of its followers queues for one of
:data:`ADMITTED_READS` slots of the loop, first come first served (anyio's
``Semaphore`` is fair); while it keeps up, no read waits. The loop is behind when
its followers' waits end late: an average of their lateness over the last few
hundred waits (an exponential one, updated by each wait that ends) above
:data:`BEHIND_SECONDS`, and it has caught up when that average falls below half
of it (so one collector's pass, or the end of a queue, does not flip it back and
forth). Followers of agents that are slow to answer keep as many reads in flight
as they need: on a loop that keeps up, their waits end on time. The slots bound
only what the loop is already too busy to serve.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractAsyncContextManager
from typing import final

import anyio
import anyio.lowlevel

# The loop is behind when its waits end this late on average: a tenth of the 250 ms
# poll lag the library is built to keep at 5,000 followers, not a timer's jitter.
BEHIND_SECONDS = 0.025
# Each wait's weight in the average: about the last 200 waits count.
WEIGHT = 1 / 200
# Reads in flight at once, per event loop, while it is behind. Measured by scale.py
# at 5,000 followers of the lean agent on one core (asyncio), every read through the
# slots: 16 slots, 246 µs of CPU a read and start-up in 4 s; 64, 311 µs and 6 s;
# 256, 307 µs (trio's start-up 60 s); none, 367 µs and start-up unfinished after
# 90 s. A loop that is behind gains nothing from more reads in flight: each waits
# for the loop, not for its agent.
ADMITTED_READS = 16

_AT_ONCE: AbstractAsyncContextManager[object] = contextlib.nullcontext()


@final
class ReadAdmission:
    """One event loop's slots for reads while it is behind, and how late its waits end."""

    __slots__ = ("_size", "_slots", "behind", "lateness_seconds")

    def __init__(self, size: int = ADMITTED_READS) -> None:
        self._size = size
        # A free slot is taken without a checkpoint: the read that follows yields anyway.
        self._slots = anyio.Semaphore(size, fast_acquire=True)
        self.lateness_seconds = 0.0
        """The average lateness of the loop's waits, recent ones weighing most."""
        self.behind = False

    def woke(self, late_seconds: float) -> None:
        """A follower's wait for its next read ended ``late_seconds`` after its deadline."""
        self.lateness_seconds += WEIGHT * (late_seconds - self.lateness_seconds)
        if self.behind:
            self.behind = self.lateness_seconds > BEHIND_SECONDS / 2
        else:
            self.behind = self.lateness_seconds > BEHIND_SECONDS

    def slot(self) -> AbstractAsyncContextManager[object]:
        """What a read holds while it runs: one of the slots while the loop is behind."""
        return self._slots if self.behind else _AT_ONCE

    @property
    def reads_in_slots(self) -> int:
        """Reads holding a slot now."""
        return self._size - self._slots.value


_run_admission: anyio.lowlevel.RunVar[ReadAdmission] = anyio.lowlevel.RunVar(
    "follower_read_admission"
)


def loop_admission() -> ReadAdmission:
    """The slots for late reads of this event loop's followers."""
    try:
        return _run_admission.get()
    except LookupError:
        admission = ReadAdmission()
        _run_admission.set(admission)
        return admission
