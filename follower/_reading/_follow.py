"""Following one task's live trajectory: the read loop (docs/protocol.md, "Following one task").

What to do after each read is the read policy's (``_policy``: sync, no
I/O); this module reads, hands pages to the sink, waits, and ends as it is told.
Before ``stop`` an agent that fails to answer may be busy, so a failed read is
retried with jittered backoff. After ``stop`` the turn has ended, so an agent
that fails to answer is gone: the loop raises :class:`FollowingEnded`, and this
module, its only owner, returns.

Logs never grow with the reads: an agent that starts failing is one warning, its
recovery (or the end of following) one summary; each failed read in between is
a debug line, and an agent that flaps is one run (``_retries.FailureStreak``).
Records carry ``task_id`` and ``turn_id`` as ``extra`` fields, and no line holds
a header or a body (docs/security.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs

from .._backend import running_backend
from .._errors import (
    ClientClosedError,
    FollowerError,
    FollowingEnded,
    InvalidArgumentError,
    PoolBusyError,
    TaskNotFoundError,
)
from .._http._exchange import checked_endpoint, read_page
from .._loop_local import LoopLocal
from .._options import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT_SECONDS,
    FollowOptions,
    count,
)
from .._retries import FailureStreak, backoff_fraction
from ._admission import AT_ONCE, ReadAdmission, loop_admission
from ._pacing import LoopPacing

# Re-exported: tests pace their agents by it.
from ._policy import AFTER_STOP_PAUSE_SECONDS as AFTER_STOP_PAUSE_SECONDS
from ._policy import (
    Action,
    End,
    Ending,
    Failure,
    HandOver,
    Outcome,
    PageRead,
    ReadNow,
    ReadPolicy,
    Wait,
    read_failed,
    tally,
)
from ._record import FollowOutcome as FollowOutcome
from ._record import FollowProgress as FollowProgress
from ._record import Sink as Sink
from ._shell import (
    beat_before,
    beat_if_due,
    cut_for_beat,
    run_follower,
    sent_again_if_cut,
    wait_or_stop,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Coroutine

    import httpx
    from anyio.abc import AsyncBackend

    from .._format._wire import Page
    from ._record import Beats

logger = logging.getLogger("follower.follow")


async def follow_trajectory(
    endpoint: str,
    task_id: str,
    sink: Sink,
    *,
    poll_interval_seconds: float,
    stop: anyio.Event,
    client: httpx.AsyncClient | None = None,
    after: int = 0,
    read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS,
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    max_follow_seconds: float | None = None,
) -> FollowOutcome:
    """Read ``task_id``'s trajectory from cursor ``after`` and hand each page to ``sink``.

    Returns after the last page, on a 404 (past the grace for a task registered
    late), when a read fails after ``stop`` is set, or after ``max_follow_seconds``
    (if given), saying how far it got. Raises :class:`~follower.AgentRefusedError`
    (other 4xx), :class:`~follower.MalformedPageError`,
    :class:`~follower.ClientClosedError`, or whatever ``sink`` raises. Without
    ``max_follow_seconds`` it never ends by itself while the task runs and the
    agent answers: bound it with a cancel scope, or use
    :func:`following_live_trajectory`, which does.
    """
    options = FollowOptions(
        poll_interval_seconds=poll_interval_seconds,
        read_timeout_seconds=read_timeout_seconds,
        max_page_bytes=max_page_bytes,
        max_event_bytes=max_event_bytes,
        max_follow_seconds=max_follow_seconds,
        client=client,
    )
    return await follow_task(endpoint, task_id, sink, stop=stop, options=options, after=after)


def follow_task(
    endpoint: str,
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
    """:func:`follow_trajectory` with its options built; ``progress`` is kept up to date.

    ``turn_id`` names the turn in the log records' ``extra`` fields; ``beats`` are
    the turn's heartbeats, which the follower writes between its reads. Returns the
    shell's coroutine to await at once (``_shell.follow_by`` says why); a bad
    argument raises here, at the call.
    """
    if not isinstance(task_id, str) or not task_id:
        raise InvalidArgumentError(f"task_id must be a non-empty string, not {task_id!r}")
    endpoint = checked_endpoint(endpoint)
    after = count("after", after)
    if progress is None:
        progress = FollowProgress()
    progress.cursor = after
    follower = _Follower(
        endpoint=endpoint,
        task_id=task_id,
        sink=sink,
        options=options,
        stop=stop,
        progress=progress,
        turn_id=turn_id,
        beats=beats,
    )
    follower.joined()
    return run_follower(
        follower,
        url=endpoint,
        task_id=task_id,
        turn_id=turn_id,
        options=options,
        progress=progress,
        after=after,
        logger=logger,
    )


loop_pacing = LoopLocal("follower_loop_pacing", LoopPacing).get
"""The pacing of every follower of this event loop (``_pacing``)."""


def _draw() -> float:
    # Looked up at each call, not bound once: tests pin this module's backoff_fraction.
    return backoff_fraction()


@attrs.define(eq=False, kw_only=True)
class _Follower:
    """The read loop's I/O: reads, tells the read policy what came back, does as it says.

    Kept for as long as its follower runs, with thousands in a process: slotted,
    with no closure, and what only a failure or a log line needs (the run of
    failures, the records' ``extra``) made when first needed.
    """

    endpoint: str
    task_id: str
    sink: Sink
    options: FollowOptions
    stop: anyio.Event
    progress: FollowProgress
    turn_id: str | None = None
    beats: Beats | None = None
    policy: ReadPolicy = attrs.field(init=False)
    pacing: LoopPacing = attrs.field(init=False, factory=loop_pacing)
    admission: ReadAdmission = attrs.field(init=False, factory=loop_admission)
    # The loop's clock and checkpoint, without anyio's lookup each (``_backend``).
    backend: type[AsyncBackend] = attrs.field(init=False, factory=running_backend)
    _failing: FailureStreak | None = attrs.field(init=False, default=None)
    _first_read_pending: bool = attrs.field(init=False, default=False)
    _read_began: float = attrs.field(init=False, default=0.0)  # when the last read began
    _read_sent: float = attrs.field(init=False, default=0.0)  # ... and when it took its slot

    def __attrs_post_init__(self) -> None:
        self.policy = ReadPolicy(self.poll, draw=_draw)

    def joined(self) -> None:
        """The follower starts: the loop counts it (:meth:`left` forgets it)."""
        self.pacing.joined(self.poll)

    @property
    def poll(self) -> float:
        return self.options.poll_interval_seconds

    noun = "read"

    @property
    def extra(self) -> dict[str, object]:
        """The log records' ``extra`` fields: made for a record, not kept."""
        return {"task_id": self.task_id, "turn_id": self.turn_id}

    @property
    def failing(self) -> FailureStreak:
        """The run of failed reads, made at the first failure."""
        if self._failing is None:
            what = f"reads of task {self.task_id} at {self.endpoint}"
            self._failing = FailureStreak(logger, what, noun="read", extra=self.extra)
        return self._failing

    def left(self, ending: str) -> None:
        """The follower ends: its run of failures gets its summary, the loop forgets it."""
        if self._failing is not None:
            self._failing.close(ending)
        if self._first_read_pending:
            self._first_read_pending = False
            self.pacing.first_read_done()
        self.pacing.left(self.poll)
        if not self.pacing.followers:  # the loop's next followers start from a clean slate
            self.admission.forget()

    async def run(self, client: httpx.AsyncClient, after: int) -> None:
        cursor = after
        # When the next read is due (None: at once, no checkpoint); whether setting
        # stop ends the wait; whether it was scheduled (its lateness is the loop's lag).
        due: float | None = None
        until_stop = scheduled = True
        now = self.backend.current_time()
        self._first_read_pending = True
        delay = self.pacing.first_read_delay(now, self.poll)
        if delay:  # others are starting too: this one's slot in the interval
            due = now + delay
        while True:
            # Nothing of the last read is kept across the wait: a waiting follower holds
            # its task, its coroutines, and the wait's own scope and timer
            # (tests/reading/test_follower_objects.py).
            if due is not None:
                now = self.backend.current_time()
                # From when the loop's own delay counts: a timer's deadline, or, for a
                # read due already (its last read's answer or slot took the interval),
                # this checkpoint. Not from ``due``: how long agents and the slots
                # take is not the loop falling behind (``_admission``).
                if self.beats is not None and await beat_before(self.beats, self.stop, due):
                    # A beat that could not wait for this read was written: its put is
                    # not the loop's lateness.
                    now = self.backend.current_time()
                    due = max(due, now)
                delay_from = due
                if due > now:
                    if until_stop:
                        await self._wait_or_stop(due - now)
                    else:
                        await anyio.sleep_until(due)
                else:  # due already (a busy loop, or a read at once): the others go first
                    delay_from = now
                    await self.backend.checkpoint()
                if scheduled and not (until_stop and self.stop.is_set()):
                    now = self._woke(due, delay_from)
                else:
                    now = self.backend.current_time()
            # One reading of the clock a step, handed on.
            now = await beat_if_due(self.beats, self.stop, now)
            read = await self._read(client, cursor, now)
            answered = self.backend.current_time()
            read_started = self._read_began
            if (observer := self.progress.observer) is not None:
                # The read's own time, from when it took its slot (if it needed one).
                observer.read_took(answered - self._read_sent)
            action = self._told(read, answered)
            if isinstance(action, HandOver):
                assert not isinstance(read, FollowerError)
                await self.sink(read.to_batch())
                cursor = read.next
                self._handed_over(read)
                action = self.policy.handed_over(stopped=self._gone_after_stop())
            if isinstance(action, End):
                self._end(action.ending, read)
                return
            due, until_stop, scheduled = self._next_read(action, read, read_started, answered)
            del read, action

    def _woke(self, due: float, delay_from: float) -> float:
        """A wait for the next read ended: how late after ``due`` it begins, and the loop's delay.

        The loop's own delay, from ``delay_from`` (the wait's deadline, or the
        checkpoint of a read due already), tells the loop's admission whether it is behind.
        Returns the time it woke.
        """
        now = self.backend.current_time()
        late = max(0.0, now - due)
        self.progress.poll_lag_seconds = late
        self.admission.woke(max(0.0, now - delay_from), now)
        if (observer := self.progress.observer) is not None:
            observer.woke_late(late)
        over = self.pacing.woke(now, late, self.poll)
        if over is not None:
            logger.warning(
                "this event loop is over capacity: its %d followers ask for about %.0f reads/s "
                "and it began %.0f/s over the last %.0f s, their reads %.0f ms late on average "
                "(worst %.0f ms), about %.1fx what it can serve at their poll intervals; run "
                "fewer followers a process or poll less often (said once)",
                over.followers,
                over.asked_per_second,
                over.served_per_second,
                over.window_seconds,
                1000 * over.mean_lateness_seconds,
                1000 * over.worst_lateness_seconds,
                over.factor,
                extra={
                    "followers": over.followers,
                    "asked_reads_per_second": over.asked_per_second,
                    "served_reads_per_second": over.served_per_second,
                    "mean_lateness_seconds": over.mean_lateness_seconds,
                    "worst_lateness_seconds": over.worst_lateness_seconds,
                    "over_capacity_factor": over.factor,
                },
            )
        return now

    def _told(self, read: Page | FollowerError, now: float) -> Action:
        """Count the read, log what it did to the run of failures, and ask the policy."""
        outcome: Outcome
        if isinstance(read, FollowerError):
            outcome = read_failed(read)
            if outcome.failure is Failure.UNAVAILABLE:
                self.failing.failed(read)
        else:
            outcome = PageRead(len(read.events), read.last, read.has_more, read.body_bytes)
            if self._failing is not None:
                self._failing.recovered()
            if not self.policy.read_a_page and self.policy.not_found:
                logger.debug(
                    "task %s is known after %d reads answered 404",
                    self.task_id,
                    self.policy.not_found,
                    extra=self.extra,
                )
            self.progress.state = read.state
        counted = tally(outcome)
        self.progress.reads += counted.reads
        self.progress.failed_reads += counted.failed_reads
        self.progress.pool_waits += counted.pool_waits
        if not isinstance(read, FollowerError) and not read.has_more:
            self.progress.caught_up_at = now
        return self.policy.read(outcome, stopped=self._gone_after_stop(), now=now)

    def _end(self, ending: Ending, read: Page | FollowerError) -> None:
        """Carry out the end of following: return, or raise the sentinel or the read's error."""
        if ending is Ending.UNKNOWN:
            self._log_unknown()
        elif isinstance(read, FollowerError):
            if ending is Ending.GONE:
                raise FollowingEnded(f"task {self.task_id}: read failed after stop") from read
            raise read

    def _next_read(
        self, action: Action, read: Page | FollowerError, read_started: float, answered: float
    ) -> tuple[float, bool, bool]:
        """Log what the wait is for: when the next read is due, whether stop ends the
        wait, and whether the read was scheduled (False: at once, after a checkpoint).

        The clock is read only for a wait counted from now: a poll counts from when its
        read began, and a read at once is due since the answer came (``answered``).
        """
        if isinstance(action, ReadNow):
            return answered, False, False
        assert isinstance(action, Wait)
        if isinstance(read, PoolBusyError):
            logger.debug("%s; reading task %s again", read, self.task_id, extra=self.extra)
        elif isinstance(read, TaskNotFoundError):
            logger.debug("task %s is not known yet; reading again", self.task_id)
        elif isinstance(read, FollowerError):
            self.failing.retrying(action.seconds)
        began = read_started if action.paced else self.backend.current_time()
        return began + action.seconds, action.until_stop, True

    def _log_unknown(self) -> None:
        first_read_at = self.policy.first_read_at
        if self.policy.not_found and first_read_at is not None:
            logger.warning(
                "task %s is unknown to the agent at %s after %d reads in %.1f s; not following it",
                self.task_id,
                self.endpoint,
                self.policy.not_found + 1,
                anyio.current_time() - first_read_at,
                extra=self.extra,
            )
        else:
            logger.warning(
                "task %s is unknown to the agent at %s (HTTP 404); not following it",
                self.task_id,
                self.endpoint,
                extra=self.extra,
            )

    async def _read(
        self, client: httpx.AsyncClient, cursor: int, now: float
    ) -> Page | FollowerError:
        """One cursor read begun at ``now``: its page, or the library's error that it failed with.

        While the loop is behind, the read first waits for one of its slots (``_admission``).
        """
        # Its interval counts from here, a wait for a slot included: a follower that
        # queued is due again as soon as its interval allows, and queues again at
        # the back while the loop is behind, so each is read in turn.
        self._read_began = self._read_sent = now
        if client.is_closed:
            return self._client_closed()
        try:
            slot = self.admission.slot()
            async with slot:
                if slot is not AT_ONCE:  # it may have waited for its slot
                    self._read_sent = self.backend.current_time()
                self.policy.reading(now)
                self.pacing.read()
                timeout = self.options.read_timeout_seconds
                cut_at = cut_for_beat(self.beats, self.stop, timeout, self._read_sent)
                page = await sent_again_if_cut(
                    self.beats, cut_at, self._read_page, client, cursor, timeout
                )
        except ClientClosedError as exc:
            closed = self._client_closed()  # our caller's doing, not the agent's
            closed.__cause__ = exc
            return closed
        except FollowerError as exc:
            return exc
        finally:
            if self._first_read_pending:  # the burst it started in may end
                self._first_read_pending = False
                self.pacing.first_read_done()
        return page

    def _read_page(
        self, client: httpx.AsyncClient, cursor: int, timeout: float, cut_at: float | None
    ) -> Awaitable[Page]:
        return read_page(
            client,
            self.endpoint,
            self.task_id,
            cursor,
            read_timeout_seconds=timeout,
            max_page_bytes=self.options.max_page_bytes,
            headers=self.options.headers,
            max_event_bytes=self.options.max_event_bytes,
            cut_at=cut_at,
        )

    def _client_closed(self) -> ClientClosedError:
        return ClientClosedError(
            f"the client given to follow task {self.task_id!r} at {self.endpoint} was closed "
            "while following; no read can succeed, so following ends",
            url=self.endpoint,
            task_id=self.task_id,
        )

    def _gone_after_stop(self) -> bool:
        """Whether the step has stopped: the turn has ended, so an agent that fails is gone."""
        return self.stop.is_set()

    def _handed_over(self, page: Page) -> None:
        # Recorded as soon as the sink returns, before any checkpoint: an owner that
        # cancels this follower next still sees the last page as read.
        self.progress.cursor = page.next
        self.progress.events += len(page.events)
        self.progress.complete = page.last

    def _wait_or_stop(self, seconds: float) -> Awaitable[None]:
        # A method of its own, which the property tests' broken followers replace; the
        # shell's wait itself, not a coroutine around it that a waiting follower would keep.
        return wait_or_stop(self.stop, seconds)
