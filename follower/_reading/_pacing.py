"""How the followers of one event loop share it: first reads spread, lateness measured.

Sync state, no I/O and no event loop (the read loop, ``_follow``, keeps one
:class:`LoopPacing` per event loop and tells it what happens):

- **Start-up without a herd.** Followers that start together (while another
  follower of the loop still waits for its first page) spread their first reads
  over their poll interval: the k-th of such a burst reads at ``k``'s point of
  the van der Corput sequence (0, 1/2, 1/4, 3/4, 1/8, ...) of the interval after
  the burst began. However many join, the first n points are spread evenly (no
  gap wider than two n-ths of the interval), none later than one interval, and
  the first, a lone follower, reads at once. A burst ends when every follower in
  it has read its first page, or one interval after it began.
- **Lateness.** A follower that waited for its next read tells how much later
  than asked it woke: the loop's lag, as that follower saw it. Over a window of
  :data:`WINDOW_SECONDS`, when reads begin on average a quarter of their poll
  interval late or more, the loop is over capacity: :meth:`LoopPacing.woke`
  returns what to say, once per loop.

Fairness needs nothing here: each follower waits on its own deadline, and both
backends wake timers in deadline order and run each woken task once per round,
so under overload every follower is read in turn, each later by about the same.
"""

from __future__ import annotations

from typing import final

import attrs

# Over a window, reads beginning this far behind their schedule on average (as a
# share of each follower's poll interval) mean the loop cannot serve its followers:
# a quarter of the interval (250 ms at a 1 s poll) is the p99 poll lag the library
# is built to keep at 5,000 followers. A single pause of the loop (a collector's
# pass, a caller's blocking call) late by more is averaged with the window's other
# reads.
OVER_CAPACITY_LATENESS = 0.25
WINDOW_SECONDS = 5.0


def spread_fraction(k: int) -> float:
    """The ``k``-th point of the base-2 van der Corput sequence, in [0, 1).

    0, 1/2, 1/4, 3/4, 1/8, 5/8, 3/8, 7/8, ...: ``k``'s binary digits mirrored
    around the point. The first n points leave no gap wider than 2/n.
    """
    fraction, unit = 0.0, 0.5
    while k:
        if k & 1:
            fraction += unit
        k >>= 1
        unit /= 2
    return fraction


@final
@attrs.frozen(kw_only=True)
class OverCapacity:
    """A window in which the loop's followers were read later than their poll intervals ask."""

    followers: int
    asked_per_second: float
    """Reads a second the followers would make if reads cost nothing: the sum of 1/poll."""
    served_per_second: float
    """Reads a second begun in the window."""
    window_seconds: float
    mean_lateness_seconds: float
    worst_lateness_seconds: float
    mean_lateness_share: float
    """Lateness as a share of each follower's poll interval, on average."""

    @property
    def factor(self) -> float:
        """How many times what the loop serves its followers ask for (at least 1 + the share)."""
        asked = self.asked_per_second / self.served_per_second if self.served_per_second else 0.0
        return max(asked, 1.0 + self.mean_lateness_share)


@final
@attrs.define(eq=False)
class LoopPacing:
    """One event loop's followers: their first reads' slots and their lateness."""

    followers: int = 0
    """Followers running on the loop now."""
    asked_per_second: float = 0.0
    lag_seconds: float | None = None
    """Mean lateness of the reads of the last window (None before one closed)."""
    worst_lag_seconds: float | None = None
    warned: bool = False
    _pending_first_reads: int = 0
    _burst_started_at: float = 0.0
    _burst_size: int = 0
    _window_started_at: float | None = None
    _reads: int = 0
    _waits: int = 0
    _late_sum: float = 0.0
    _late_max: float = 0.0
    _share_sum: float = 0.0

    def joined(self, poll_seconds: float) -> None:
        self.followers += 1
        self.asked_per_second += 1.0 / poll_seconds

    def left(self, poll_seconds: float) -> None:
        self.followers -= 1
        self.asked_per_second = max(0.0, self.asked_per_second - 1.0 / poll_seconds)
        if not self.followers:
            self.asked_per_second = 0.0

    def first_read_delay(self, now: float, poll_seconds: float) -> float:
        """How long a starting follower waits for its first read: 0 unless others start too.

        The follower counts as waiting for its first page until :meth:`first_read_done`.
        """
        if not self._pending_first_reads or now - self._burst_started_at >= poll_seconds:
            self._burst_started_at, self._burst_size = now, 0
        k = self._burst_size
        self._burst_size += 1
        self._pending_first_reads += 1
        slot = self._burst_started_at + spread_fraction(k) * poll_seconds
        return max(0.0, slot - now)

    def first_read_done(self) -> None:
        """A follower's first read came back (or it ended before it)."""
        self._pending_first_reads -= 1

    def read(self) -> None:
        """A read begins."""
        self._reads += 1

    def woke(self, now: float, late_seconds: float, poll_seconds: float) -> OverCapacity | None:
        """A follower woke ``late_seconds`` after its wait's deadline.

        Returns the window that showed the loop over capacity, the first time
        one does; None otherwise.
        """
        if self._window_started_at is None:
            self._window_started_at = now
        self._waits += 1
        self._late_sum += late_seconds
        self._late_max = max(self._late_max, late_seconds)
        self._share_sum += late_seconds / poll_seconds
        elapsed = now - self._window_started_at
        if elapsed < WINDOW_SECONDS:
            return None
        share = self._share_sum / self._waits
        self.lag_seconds = self._late_sum / self._waits
        self.worst_lag_seconds = self._late_max
        over = OverCapacity(
            followers=self.followers,
            asked_per_second=self.asked_per_second,
            served_per_second=self._reads / elapsed,
            window_seconds=elapsed,
            mean_lateness_seconds=self.lag_seconds,
            worst_lateness_seconds=self._late_max,
            mean_lateness_share=share,
        )
        self._window_started_at = now
        self._reads = self._waits = 0
        self._late_sum = self._late_max = self._share_sum = 0.0
        if self.warned or share < OVER_CAPACITY_LATENESS:
            return None
        self.warned = True
        return over
