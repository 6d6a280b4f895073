"""While an event loop is behind, its reads queue for a few slots, so an overload cannot spiral.

A loop that cannot serve its followers' reads in their poll intervals wakes
them late. If every late follower read at once, thousands of reads would be in
flight together, each holding its request, response and coroutines until the
busy loop came back to it: seconds. What a read allocates then outlives the
cyclic collector's young generations and is promoted to the oldest, and every
so many promotions the collector walks every object the process keeps, which
makes the loop later still. Measured at 5,000 followers of one core
(docs/benchmarks.md): start-up took minutes instead of seconds, with most of the
time in full passes.

So while the loop is behind, every cursor read of its followers queues for one
of :data:`ADMITTED_READS` slots of the loop, first come first served (anyio's
``Semaphore`` is fair); while it keeps up, no read waits. The loop is behind when
it wakes its followers late: the mean of its own delay over a window of
:data:`WINDOW_SECONDS` above :data:`BEHIND_SECONDS`, or a single wake later than
:data:`HERD_SECONDS` (a window would let a herd of wakes all begin their reads
first). It has caught up when a window's mean falls below half of that (no
flapping at the bound), unless reads
still queue for the slots while the process uses :data:`BUSY_CPU_SHARE` of a
core or more: then the delays are small because the slots hold reads back, and
letting them all go would put the loop behind at once. The delay is the loop's
alone: how much later than its deadline a timer's wait ended, or, for a read due
already, how long its checkpoint took; never how long an agent took to answer,
nor a queue for the slots, which would keep a loop with nothing to do behind. So
followers of agents slow to answer, even slower than their poll interval, keep
as many reads in flight as they need. The slots bound only what the loop is
already too busy to serve.
"""

from __future__ import annotations

import contextlib
import time
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, final

import anyio

from .._loop_local import LoopLocal

if TYPE_CHECKING:
    from collections.abc import Callable

# The loop is behind when its waits end this late on average: a tenth of the 250 ms
# poll lag the library is built to keep at 5,000 followers, not a timer's jitter.
BEHIND_SECONDS = 0.025
# The loop's delay is averaged over windows this long: short enough that a loop that
# ran freely again is seen to within a quarter of a second, long enough to hold a
# few hundred wakes at thousands of followers.
WINDOW_SECONDS = 0.25
# One wake later than this puts the loop behind at once, before its window closes. A
# herd (followers due together, as a pause of the loop leaves them) wakes in one turn,
# each late by the reads begun before it: waiting for the window's mean let over a
# thousand begin at once at 5,000 followers, each on a connection of its own.
HERD_SECONDS = BEHIND_SECONDS
# A loop behind whose reads queue for the slots stays behind while the process uses
# this share of a core or more: its delays are small then because the slots hold the
# reads back, not because it has caught up. Reads that queue while the CPU is idle
# wait on their agents, and the loop has caught up.
BUSY_CPU_SHARE = 0.8
# Reads in flight at once, per event loop, while it is behind. Measured by scale.py
# at 5,000 followers of the lean agent on one core (asyncio), every read through the
# slots: 16 slots, 246 µs of CPU a read and start-up in 4 s; 64, 311 µs and 6 s;
# 256, 307 µs (trio's start-up 60 s); none, 367 µs and start-up unfinished after
# 90 s. A loop that is behind gains nothing from more reads in flight: each waits
# for the loop, not for its agent.
ADMITTED_READS = 16

AT_ONCE: AbstractAsyncContextManager[object] = contextlib.nullcontext()
"""The slot of a read while the loop keeps up: none, so the read never waits for it."""


@final
class ReadAdmission:
    """One event loop's slots for reads while it is behind, and how late its waits end."""

    __slots__ = (
        "_count",
        "_cpu_at_window_start",
        "_slots",
        "_sum",
        "_window_started_at",
        "behind",
        "cpu_clock",
        "lateness_seconds",
    )

    def __init__(
        self, size: int = ADMITTED_READS, cpu_clock: Callable[[], float] = time.process_time
    ) -> None:
        # A free slot is taken without a checkpoint: the read that follows yields anyway.
        self._slots = anyio.Semaphore(size, fast_acquire=True)
        self.cpu_clock = cpu_clock
        """The process's CPU seconds (read once a window)."""
        self.lateness_seconds = 0.0
        """The loop's mean delay over the last window that closed."""
        self.behind = False
        self._window_started_at: float | None = None
        self._cpu_at_window_start = 0.0
        self._sum = 0.0
        self._count = 0

    def woke(self, late_seconds: float, now: float) -> None:
        """A follower's wait for its next read ended ``late_seconds`` later than the loop owed it.

        The loop's own delay only: after a timer's deadline, or, for a read due
        already, how long its checkpoint took; never an agent's answer or a slot's
        queue, which would keep a loop with nothing to do behind. ``now`` closes
        the window when it is over.
        """
        if self._window_started_at is None:
            self._window_started_at, self._cpu_at_window_start = now, self.cpu_clock()
        herd = late_seconds > HERD_SECONDS  # a herd's late wake: behind at once
        if herd:
            self.behind = True
        self._sum += late_seconds
        self._count += 1
        elapsed = now - self._window_started_at
        if elapsed < WINDOW_SECONDS:
            return
        cpu = self.cpu_clock()
        self.lateness_seconds = mean = self._sum / self._count
        if mean > BEHIND_SECONDS or herd:
            self.behind = True
        elif self.behind and mean >= BEHIND_SECONDS / 2:
            pass  # not yet caught up: no flapping at the bound
        elif self.behind and self.reads_queued:
            # Reads queue: caught up only if the process has CPU to spare for them.
            self.behind = (cpu - self._cpu_at_window_start) / elapsed >= BUSY_CPU_SHARE
        else:
            self.behind = False
        self._window_started_at, self._cpu_at_window_start = now, cpu
        self._sum, self._count = 0.0, 0

    def forget(self) -> None:
        """The loop's last follower left: the next ones start with the loop not behind."""
        self.lateness_seconds = 0.0
        self.behind = False
        self._window_started_at, self._sum, self._count = None, 0.0, 0

    def slot(self) -> AbstractAsyncContextManager[object]:
        """What a read holds while it runs: one of the slots while the loop is behind."""
        return self._slots if self.behind else AT_ONCE

    @property
    def reads_queued(self) -> int:
        """Reads waiting for a slot now."""
        return self._slots.statistics().tasks_waiting


loop_admission = LoopLocal("follower_read_admission", ReadAdmission).get
"""The slots for late reads of this event loop's followers."""
