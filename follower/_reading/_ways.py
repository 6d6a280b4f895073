"""The three ways of following a task, by :class:`~follower._format._a2a.Via`, behind one call.

A turn's block starts whichever its source names; each keeps the same rules
(docs/design.md, "Three ways of following"): owned by the turn's task group,
the sentinel after stop, everything received stored, bounded waits, typed
errors. ``after`` is how many events the turn has stored already; ``beats``, the
turn's heartbeats, which a way writes between its reads or hands to a task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .._format._a2a import Via
from ._follow import follow_task
from ._polls import follow_polls
from ._stream import follow_stream

if TYPE_CHECKING:
    from collections.abc import Coroutine

    import anyio

    from .._format._a2a import TaskSource
    from .._options import FollowOptions
    from ._record import Beats, FollowOutcome, FollowProgress, Sink


class Follow(Protocol):
    """A way's entry: builds its follower and returns the coroutine that runs it."""

    def __call__(
        self,
        source: TaskSource,
        task_id: str,
        sink: Sink,
        *,
        stop: anyio.Event,
        options: FollowOptions,
        after: int = 0,
        progress: FollowProgress | None = None,
        turn_id: str | None = None,
        beats: Beats | None = None,
    ) -> Coroutine[Any, Any, FollowOutcome]: ...


def follow_cursor(
    source: TaskSource,
    task_id: str,
    sink: Sink,
    *,
    stop: anyio.Event,
    options: FollowOptions,
    after: int = 0,
    progress: FollowProgress | None = None,
    turn_id: str | None = None,
    beats: Beats | None = None,
) -> Coroutine[Any, Any, FollowOutcome]:
    """Cursor reads of the live-trajectory extension (``_follow``)."""
    return follow_task(
        source.url,
        task_id,
        sink,
        stop=stop,
        options=options,
        after=after,
        progress=progress,
        turn_id=turn_id,
        beats=beats,
    )


FOLLOWERS: dict[Via, Follow] = {
    Via.CURSOR: follow_cursor,
    Via.STREAM: follow_stream,
    Via.POLL: follow_polls,
}
