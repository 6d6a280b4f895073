"""One value an event loop, made at its first use: what a loop's followers share.

The client pool, the followers' pacing, the slots for late reads and the timekeeper
are each one a loop. Each lives in an anyio ``RunVar``, which keys the loop's
values weakly by the loop: a value must not refer back to its loop (its tasks, its
futures), or an ended run would never be freed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")


class LoopLocal(Generic[T]):
    """A value for each event loop, made by ``make`` the first time a loop asks for it."""

    __slots__ = ("_make", "_var")

    def __init__(self, name: str, make: Callable[[], T]) -> None:
        self._var: anyio.lowlevel.RunVar[T] = anyio.lowlevel.RunVar(name)
        self._make = make

    def get(self) -> T:
        """The running loop's value."""
        try:
            return self._var.get()
        except LookupError:
            value = self._make()
            self._var.set(value)
            return value
