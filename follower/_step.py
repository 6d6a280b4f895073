"""A step's turns, linked in order; or a lone turn.

The turns' blocks (``_turns``) own the tasks; this module only orders the turns,
marks the step's last one, and sums what its turns did (``statistics()``).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from ._chain import TurnChain, TurnProgress
from ._chunks import LiveTrajectoryChunks, write_next_turn
from ._endings import bounded_cleanup, is_stopped_from_outside, run_cleanup
from ._errors import AgentCardError, TurnStateError
from ._exchange import checked_endpoint
from ._keys import check_prefix
from ._layout import TurnKeys
from ._options import (
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT_SECONDS,
    FollowOptions,
)
from ._statistics import LiveTurnsStatistics
from ._stored_turn import read_stored_turn
from ._turns import open_turn
from ._wire import TrajectoryState

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractAsyncContextManager
    from types import TracebackType

    import httpx

    from ._stores import ObjectStore
    from ._turns import LiveTurn


logger = logging.getLogger("follower.step")


def live_endpoint(endpoint: str | None) -> str:
    """The live read's URL, checked; an :class:`~follower.AgentCardError` at once if there is none.

    ``A2AAgent.trajectory_endpoint`` is None for an agent whose card offers no live
    trajectory; taken as is, the step would store turns no reader can follow. Any
    other endpoint that cannot be sent is an :class:`~follower.InvalidArgumentError`.
    """
    if endpoint is None:
        raise AgentCardError(
            "the agent's card offers no live trajectory (no usable "
            "urn:agentenv:trajectory/v1 extension), so there is nothing to follow: check "
            "agent.trajectory_endpoint before following, or follow another agent"
        )
    return checked_endpoint(endpoint)


def following_live_trajectory(
    endpoint: str | None,
    store: ObjectStore,
    prefix_key: str,
    turn_id: str,
    *,
    poll_interval_seconds: float,
    previous_turn_id: str | None = None,
    drain_seconds: float = DEFAULT_DRAIN_SECONDS,
    client: httpx.AsyncClient | None = None,
    read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    resume: bool = False,
    max_follow_seconds: float | None = None,
    headers: Mapping[str, str] | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> AbstractAsyncContextManager[LiveTurn]:
    """Follow one turn's live trajectory for the duration of an ``async with`` block.

    Yields a :class:`LiveTurn`. When the body returns, the follower drains for at
    most ``drain_seconds``; when it raises or is cancelled, the follower is
    cancelled at once and the body's exception or cancel comes out as itself.
    Either way the turn's end mark (and the link from ``previous_turn_id``) is
    written, shielded and bounded, unless the turn was handed off.

    A turn the store already holds raises :class:`~follower.TurnExistsError`
    on entry, unless ``resume`` is true: then ``follow()`` of the same task
    continues after its last stored chunk, and another task's turn raises
    :class:`~follower.TurnConflictError`.

    ``max_follow_seconds`` bounds the follower's run from ``follow()`` (None: only
    the drain bounds it): past it, following ends and the body goes on; the
    end mark then says the turn is not complete.

    ``max_page_bytes`` caps one read's body and ``max_event_bytes`` one event (as
    compact JSON), as in :func:`~follower.lowlevel.follow_trajectory`: a page over either
    ends the turn's following with a typed error (logged), and is not stored.

    ``headers`` (a bearer token, say) are sent with every read, on top of the
    client's own: the way to reach an agent behind a token without building a
    client. They go only to ``endpoint``, never through a redirect, and are
    never logged.
    """
    endpoint = live_endpoint(endpoint)
    options = FollowOptions(
        poll_interval_seconds=poll_interval_seconds,
        drain_seconds=drain_seconds,
        client=client,
        read_timeout_seconds=read_timeout_seconds,
        max_page_bytes=max_page_bytes,
        max_event_bytes=max_event_bytes,
        max_follow_seconds=max_follow_seconds,
        headers=headers,
    )
    if previous_turn_id is not None:
        TurnKeys(prefix_key, previous_turn_id)  # refused now, not at the first link
    keys = TurnKeys(prefix_key, turn_id)
    chain = TurnChain(previous_turn_id)
    return open_turn(endpoint, store, keys, options=options, chain=chain, resume=resume)


class LiveTurns:
    """A step's turns, linked in order: ``following(turn_id)`` for each, ``end()`` after.

    "Previous" is the last turn that followed a task: when a turn calls
    ``follow()``, the previous one's ``next.json`` is written to name it. As
    ``async with LiveTurns(...) as turns:``, the exit marks the last turn,
    whatever ended the step. It holds no client: each turn's follower leases
    its own lane and gives it back as it ends.

    ``resume=True`` continues turns the store already holds (a retried step);
    :meth:`hand_off` leaves every turn for the next attempt instead of ending it.
    ``max_follow_seconds`` bounds each turn's follower, ``max_page_bytes`` and
    ``max_event_bytes`` cap each read, and ``headers`` go with each read, as in
    :func:`following_live_trajectory`.
    """

    def __init__(
        self,
        endpoint: str | None,
        store: ObjectStore,
        prefix_key: str,
        *,
        poll_interval_seconds: float,
        drain_seconds: float = DEFAULT_DRAIN_SECONDS,
        client: httpx.AsyncClient | None = None,
        read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        resume: bool = False,
        max_follow_seconds: float | None = None,
        headers: Mapping[str, str] | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self.endpoint = live_endpoint(endpoint)
        self.resume = resume
        self.store = store
        self.prefix_key = check_prefix(prefix_key)
        self._options = FollowOptions(
            poll_interval_seconds=poll_interval_seconds,
            drain_seconds=drain_seconds,
            client=client,
            read_timeout_seconds=read_timeout_seconds,
            max_page_bytes=max_page_bytes,
            max_event_bytes=max_event_bytes,
            max_follow_seconds=max_follow_seconds,
            headers=headers,
        )
        self._chain = TurnChain()
        self._turn_ids: set[str] = set()
        self._ended = False
        self._entered = False

    @property
    def last_followed_turn_id(self) -> str | None:
        return self._chain.last_followed

    def following(self, turn_id: str) -> AbstractAsyncContextManager[LiveTurn]:
        """The block of the next turn; yields a :class:`LiveTurn`."""
        if self._ended:
            raise TurnStateError(
                f"these turns have ended; turn {turn_id!r:.100} cannot follow",
                turn_id=turn_id if isinstance(turn_id, str) else None,
            )
        if turn_id in self._turn_ids:
            raise TurnStateError(f"turn {turn_id!r} was already used in this step", turn_id=turn_id)
        block = open_turn(
            self.endpoint,
            self.store,
            TurnKeys(self.prefix_key, turn_id),
            options=self._options,
            chain=self._chain,
            resume=self.resume,
        )
        self._turn_ids.add(turn_id)
        self._chain.opened(block)
        return block

    def progress(self) -> tuple[TurnProgress, ...]:
        """Where each turn of the step stands now, in the order they were opened; read-only."""
        return tuple(turn.turn_progress() for turn in self._chain.turns)

    def statistics(self) -> LiveTurnsStatistics:
        """What the step's turns have done so far: each turn's snapshot, and their sums.

        Cheap and without I/O (an operator may poll it for thousands of
        followers); frozen, as trio's ``statistics()`` are.
        """
        turns = self._chain.turns
        # One clock reading for every turn, and none when no follower runs.
        now = anyio.current_time() if any(turn.running for turn in turns) else None
        return LiveTurnsStatistics.of_turns([turn.statistics(now) for turn in turns])

    def hand_off(self) -> None:
        """Leave this step's turns for a later attempt: no end marks, no null link.

        For a step that stops without ending its turns for good: a worker shutting
        down, or a failure that will be retried. Turns open now and later write no
        ``end.json``, and the exit writes no ``{"turn": null}``; everything stored
        stays, and the next attempt continues it with ``resume=True``.
        """
        self._chain.handing_off = True

    async def end(self) -> None:
        """Mark the last followed turn as the step's last: its ``next.json`` is null."""
        await self._end(None)

    async def _end(self, exc: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        last = self._chain.last_followed
        if last is None or last in self._chain.taken or not self._chain.ends_for_good:
            return
        await run_cleanup(lambda: self._mark_last(last, exc), exc)

    async def _mark_last(self, last: str, exc: BaseException | None) -> None:
        extra = {"task_id": self._task_of(last), "turn_id": last}
        try:
            keys = await self._end_of_stored_chain(TurnKeys(self.prefix_key, last), exc)
        except Exception:
            # A cleanup never replaces the step's outcome: log, and mark what we can.
            logger.exception("turn %s: reading the stored chain past it failed", last, extra=extra)
            keys = TurnKeys(self.prefix_key, last)
        if keys.turn_id != last:
            extra = {"task_id": None, "turn_id": keys.turn_id}
        await bounded_cleanup(
            f"turn {keys.turn_id}: marking it last",
            lambda: write_next_turn(self.store, keys, None),
            extra=extra,
        )

    def _task_of(self, turn_id: str) -> str | None:
        progress = (turn.turn_progress() for turn in self._chain.turns)
        return next((p.task_id for p in progress if p.turn_id == turn_id), None)

    async def _end_of_stored_chain(self, keys: TurnKeys, exc: BaseException | None) -> TurnKeys:
        """The turn to mark last: past turns an earlier attempt linked on to, each ended here.

        A resumed step may stop before the turns an earlier attempt reached; they
        get their end mark (incomplete), even one that stored nothing, so that
        the chain still ends for readers.
        """
        state = TrajectoryState.CANCELED if is_stopped_from_outside(exc) else TrajectoryState.FAILED
        seen = {keys.turn_id}
        while True:
            link = (await read_stored_turn(self.store, keys)).link
            if link is None or link.turn is None or link.turn in seen:
                return keys
            keys = TurnKeys(self.prefix_key, link.turn)
            seen.add(keys.turn_id)
            stored = await read_stored_turn(self.store, keys)
            if stored.end is None:  # an empty turn too: readers need its end mark
                sink = LiveTrajectoryChunks(
                    self.store,
                    self.prefix_key,
                    keys.turn_id,
                    stored_next=stored.contiguous_next,
                    format=stored.format,
                )
                await bounded_cleanup(
                    f"turn {keys.turn_id}: end mark",
                    partial(sink.end, state, False),
                    extra={"task_id": None, "turn_id": keys.turn_id},
                )

    async def __aenter__(self) -> LiveTurns:
        # No client is leased for the step: one shared by its turns would serve
        # turns that run at once on one lane. Each follower leases its own
        # (``follow_task``); a client kept warm between turns would save ~0.1 ms
        # of CPU a turn (docs/design.md, "Lanes"), not worth a slot held idle.
        if self._entered:
            raise TurnStateError("LiveTurns can be entered once")
        self._entered = True
        await anyio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._end(exc)
