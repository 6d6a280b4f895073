"""How a property fails: one exception class per property, so Hypothesis tells them apart.

A test can say which property caught a broken follower by its class;
``number`` is the property's number in :mod:`tests.properties.properties`.
"""

from __future__ import annotations


class PropertyViolation(AssertionError):
    number = 0

    def __init__(self, message: str) -> None:
        super().__init__(f"property ({self.number}): {message}")


class ExitTooLate(PropertyViolation):
    number = 1


class FollowerOutlivedBlock(PropertyViolation):
    number = 2


class OutcomeChanged(PropertyViolation):
    number = 3


class ChunksWrong(PropertyViolation):
    number = 4


class StoredTwice(ChunksWrong):
    """Chunks overlap: some events are stored twice (a resumed turn read them again)."""


class ResumedElsewhere(ChunksWrong):
    """A resumed turn's follower read from another position than where its chunks end."""


class TaskMarkWrong(ChunksWrong):
    """``task.json`` missing before a chunk, written twice, or naming another task."""


class EndMarkWrong(PropertyViolation):
    number = 5


class EndMarkMissing(EndMarkWrong):
    """An end mark or link missing (or written twice) though the store would take it."""


class EndMarkWriter(EndMarkWrong):
    """An end mark written by an attempt that handed the turn off, or found it marked."""


class EndMarkState(EndMarkWrong):
    """The end mark's state is not the one the priority rule gives."""


class EndMarkCount(EndMarkWrong):
    """The end mark's ``next`` is not the number of events stored."""


class EndMarkComplete(EndMarkWrong):
    """The end mark's ``complete`` is not whether the terminal page was handed over."""


class EndMarkOrder(EndMarkWrong):
    """A chunk landed after the end mark."""


class LinkWrong(EndMarkWrong):
    """A ``next.json`` names the wrong turn, or belongs to no followed turn."""


class RetriedAfterStop(PropertyViolation):
    number = 6


class HarnessError(AssertionError):
    """The test itself went wrong (not a property of the follower)."""
