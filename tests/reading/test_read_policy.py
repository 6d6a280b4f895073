"""The read policy driven read by read, with no event loop: the rules of the read loop.

A stateful test feeds :class:`ReadPolicy` any sequence of outcomes (pages with or
without more, the last page, each kind of failed read), sets ``stop`` at any
point (once set it stays set, as the step's event does) and moves a clock of its
own. After each action it checks the rules of docs/design.md §2 and §5 and
DESIGN.md §2 and §4: a page is never dropped, a failed read after stop ends
following at once, pool-busy is no failed read and fires no sentinel, every wait
is bounded, and reads are never back to back for ever.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from follower._backoff import BACKOFF_CAP_SECONDS, BACKOFF_STEP_SECONDS
from follower._errors import (
    AgentRefusedError,
    AgentUnavailableError,
    ClientClosedError,
    FollowerError,
    MalformedPageError,
    PoolBusyError,
    StoreError,
    TaskNotFoundError,
)
from follower._reading._policy import (
    AFTER_STOP_PAUSE_SECONDS,
    BACKLOG_PAGE_BYTES,
    MAX_READS_WITHOUT_PAUSE,
    NOT_FOUND_GRACE_SECONDS,
    NOT_FOUND_RETRY_SECONDS,
    Action,
    End,
    Ending,
    Failure,
    HandOver,
    Outcome,
    PageRead,
    ReadFailed,
    ReadNow,
    ReadPolicy,
    Wait,
    read_failed,
    tally,
)

from ..support.hypothesis_profiles import property_settings
from ..support.imports import imports_reached, runtime_imports

# The failures that end following whenever they come, before stop or after.
RAISED = (Failure.REFUSED, Failure.MALFORMED, Failure.CLIENT_CLOSED, Failure.OTHER)


@st.composite
def pages(draw: st.DrawFn) -> PageRead:
    has_more = draw(st.booleans())
    # A page that claims more without advancing is malformed: never a PageRead.
    events = draw(st.integers(min_value=1 if has_more else 0, max_value=1000))
    last = not has_more and draw(st.booleans())
    body_bytes = draw(st.sampled_from((0, 100, BACKLOG_PAGE_BYTES - 1, BACKLOG_PAGE_BYTES, 10**6)))
    return PageRead(events=events, last=last, has_more=has_more, body_bytes=body_bytes)


failures = st.builds(
    ReadFailed,
    st.sampled_from(Failure),
    st.one_of(st.none(), st.floats(min_value=0, max_value=600)),
)
outcomes: st.SearchStrategy[Outcome] = st.one_of(pages(), failures)


POLLS = st.sampled_from((0.01, 0.1, 0.2, 1.0, 2.0, 30.0, 120.0))


class ReadLoop(RuleBasedStateMachine):
    """One follower's loop as the policy sees it, with a model of what each read must bring."""

    def __init__(self) -> None:
        super().__init__()
        self._fresh(1.0)

    def _fresh(self, poll: float) -> None:
        self.poll = poll
        self.fraction = 0.0
        self.policy = ReadPolicy(poll, draw=lambda: self.fraction)
        self.now = 0.0
        self.stopped = False
        self.ended: Ending | None = None
        self.owed: PageRead | None = None
        self.first_read_at: float | None = None
        self.read_a_page = False
        self.unavailable_in_a_row = 0  # since the last page; pool-busy reads do not count
        self.at_once = 0  # small pages with more read at once since the last wait
        self.reads = self.failed_reads = self.sent_failures = 0

    @initialize(poll=POLLS)
    def start(self, poll: float) -> None:
        self._fresh(poll)

    @precondition(lambda self: self.ended is not None)
    @rule(poll=POLLS)
    def follow_another_task(self, poll: float) -> None:
        """Following ended: a new follower, with a policy of its own, starts from scratch."""
        self._fresh(poll)

    @precondition(lambda self: self.ended is None and self.owed is None)
    @rule(
        outcome=outcomes,
        stop=st.booleans(),
        elapsed=st.sampled_from((0.0, 0.5, 3.0, NOT_FOUND_GRACE_SECONDS)),
        fraction=st.floats(min_value=0, max_value=1),
    )
    def read(self, outcome: Outcome, stop: bool, elapsed: float, fraction: float) -> None:
        self.stopped = self.stopped or stop
        self.now += elapsed
        self.fraction = fraction
        self._read(outcome)

    @precondition(lambda self: self.ended is None and self.owed is None)
    @rule(count=st.integers(min_value=1, max_value=2 * MAX_READS_WITHOUT_PAUSE))
    def read_small_pages_with_more(self, count: int) -> None:
        """An agent that always has more, a little at a time."""
        for _ in range(count):
            if self.ended is not None:
                break
            self._read(PageRead(events=1, last=False, has_more=True, body_bytes=100))
            self._handed_over(stop=False)

    @precondition(lambda self: self.owed is not None)
    @rule(stop=st.booleans())
    def hand_over(self, stop: bool) -> None:
        """The sink returned; stop may have been set while it ran."""
        self.stopped = self.stopped or stop
        self._handed_over(stop=stop)

    def _read(self, outcome: Outcome) -> None:
        self.policy.reading(self.now)
        if self.first_read_at is None:
            self.first_read_at = self.now
        self._count(outcome)
        in_a_row_before = self.unavailable_in_a_row
        action = self.policy.read(outcome, stopped=self.stopped, now=self.now)
        note(f"{outcome} stopped={self.stopped} -> {action}")
        if isinstance(outcome, PageRead):
            self.unavailable_in_a_row = 0
            self._page(outcome, action)
            self.read_a_page = True
        else:
            self._failed(outcome, action, in_a_row_before)
        self._done(action)

    def _count(self, outcome: Outcome) -> None:
        counted = tally(outcome)
        self.reads += counted.reads
        self.failed_reads += counted.failed_reads
        if isinstance(outcome, ReadFailed) and outcome.failure not in (
            Failure.POOL_BUSY,
            Failure.CLIENT_CLOSED,
        ):
            self.sent_failures += 1
        if isinstance(outcome, ReadFailed) and outcome.failure is Failure.POOL_BUSY:
            assert counted.reads == counted.failed_reads == 0, "pool-busy is no read of the agent"
            assert counted.pool_waits == 1

    def _page(self, page: PageRead, action: Action) -> None:
        if page.events or page.last:
            # Never dropped: the sink gets it before anything else happens.
            assert isinstance(action, HandOver)
            self.owed = page
        else:
            self._after_page(page, action)

    def _handed_over(self, *, stop: bool) -> None:
        page, self.owed = self.owed, None
        assert page is not None
        action = self.policy.handed_over(stopped=self.stopped)
        note(f"handed over, stopped={self.stopped} -> {action}")
        self._after_page(page, action)
        self._done(action)

    def _after_page(self, page: PageRead, action: Action) -> None:
        if page.last:
            assert action == End(Ending.LAST_PAGE)
            return
        assert not isinstance(action, End | HandOver), "only the last page ends following"
        if not page.has_more:
            assert isinstance(action, Wait)
        elif isinstance(action, Wait):  # the pause that breaks a run of reads at once
            assert action == Wait(min(AFTER_STOP_PAUSE_SECONDS, self.poll), until_stop=False)
        elif page.body_bytes < BACKLOG_PAGE_BYTES:  # a backlog pays its way: read at once
            self.at_once += 1
            assert self.at_once < MAX_READS_WITHOUT_PAUSE, "small pages read at once for ever"

    def _failed(self, failed: ReadFailed, action: Action, in_a_row_before: int) -> None:
        failure = failed.failure
        if failure is Failure.POOL_BUSY:
            assert isinstance(action, Wait), "our own pool being full never ends following"
            assert self.unavailable_in_a_row == in_a_row_before
            return
        if self.stopped:
            assert isinstance(action, End), "after stop a failed read ends following at once"
        if failure in RAISED:
            assert action == End(Ending.ERROR)
        elif failure is Failure.UNAVAILABLE:
            self.unavailable_in_a_row += 1
            if self.stopped:
                assert action == End(Ending.GONE)  # the post-stop sentinel
            else:
                self._check_backoff(failed, action)
        else:
            assert failure is Failure.NOT_FOUND
            self._check_not_found(action)

    def _check_backoff(self, failed: ReadFailed, action: Action) -> None:
        assert isinstance(action, Wait)
        assert action.until_stop
        floor = min(max(self.poll, failed.retry_after_seconds or 0.0), BACKOFF_CAP_SECONDS)
        ceiling = min(floor + BACKOFF_STEP_SECONDS * self.unavailable_in_a_row, BACKOFF_CAP_SECONDS)
        assert floor <= action.seconds <= ceiling + 1e-9

    def _check_not_found(self, action: Action) -> None:
        assert self.first_read_at is not None
        late = (
            not self.read_a_page
            and not self.stopped
            and self.now - self.first_read_at < NOT_FOUND_GRACE_SECONDS
        )
        if late:
            assert action == Wait(min(self.poll, NOT_FOUND_RETRY_SECONDS), until_stop=True)
        else:
            assert action == End(Ending.UNKNOWN)

    def _done(self, action: Action) -> None:
        """Rules of every action: waits bounded, no endless run of reads at once."""
        if isinstance(action, End):
            self.ended = action.ending
        elif isinstance(action, Wait):
            self.at_once = 0
            assert 0 < action.seconds < math.inf
            assert action.seconds <= max(self.poll, BACKOFF_CAP_SECONDS)
            if self.stopped:
                # A wait that stop ends would end at once: a read loop with no pause.
                assert not action.until_stop
                assert action.seconds == min(AFTER_STOP_PAUSE_SECONDS, self.poll)
            elif not action.until_stop:
                assert action.seconds <= AFTER_STOP_PAUSE_SECONDS

    @invariant()
    def failed_reads_are_the_sent_reads_that_failed(self) -> None:
        assert self.failed_reads == self.sent_failures
        assert self.failed_reads <= self.reads


TestReadLoop = ReadLoop.TestCase
TestReadLoop.settings = property_settings(150, stateful_step_count=50)


def test_the_small_pages_of_an_agent_that_always_has_more_are_paused_every_hundred() -> None:
    policy = ReadPolicy(2.0, draw=lambda: 0.0)
    actions = []
    for _ in range(3 * MAX_READS_WITHOUT_PAUSE):
        assert policy.read(PageRead(1, False, True, 100), stopped=False, now=0.0) == HandOver()
        actions.append(policy.handed_over(stopped=False))
    pauses = [i for i, action in enumerate(actions) if isinstance(action, Wait)]
    assert pauses == [MAX_READS_WITHOUT_PAUSE * n - 1 for n in (1, 2, 3)]


def test_a_backlog_is_read_at_once_however_long() -> None:
    policy = ReadPolicy(2.0, draw=lambda: 0.0)
    for _ in range(3 * MAX_READS_WITHOUT_PAUSE):
        policy.read(PageRead(1000, False, True, BACKLOG_PAGE_BYTES), stopped=False, now=0.0)
        assert policy.handed_over(stopped=False) == ReadNow()


def test_the_next_read_waits_for_the_page_being_handed_over() -> None:
    policy = ReadPolicy(2.0, draw=lambda: 0.0)
    assert policy.read(PageRead(1, False, False, 10), stopped=False, now=0.0) == HandOver()
    with pytest.raises(RuntimeError):
        policy.read(PageRead(1, False, False, 10), stopped=False, now=0.0)
    policy.handed_over(stopped=False)
    with pytest.raises(RuntimeError):
        policy.handed_over(stopped=False)


@given(
    st.sampled_from(
        (
            (PoolBusyError("full"), Failure.POOL_BUSY),
            (ClientClosedError("closed"), Failure.CLIENT_CLOSED),
            (AgentUnavailableError("503", retry_after_seconds=7.0), Failure.UNAVAILABLE),
            (TaskNotFoundError("404"), Failure.NOT_FOUND),
            # Made without its constructor, whose arguments may grow (a reason).
            (MalformedPageError.__new__(MalformedPageError), Failure.MALFORMED),
            (AgentRefusedError("400", status_code=400), Failure.REFUSED),
            (StoreError("not a read's"), Failure.OTHER),
        )
    )
)
def test_each_error_of_a_read_falls_in_its_row(case: tuple[FollowerError, Failure]) -> None:
    exc, failure = case
    outcome = read_failed(exc)
    assert outcome.failure is failure
    assert outcome.retry_after_seconds == (7.0 if failure is Failure.UNAVAILABLE else None)


def test_the_policy_imports_no_event_loop_and_no_io() -> None:
    # Followed down the package: a module the policy imports may not bring them in either.
    seen, outside = imports_reached("follower._reading._policy")
    banned = {"anyio", "asyncio", "trio", "httpx", "socket", "time", "random"}
    assert not outside & banned, sorted(outside & banned)
    assert "follower._backoff" in seen  # the walk went down the imports
    # The policy logs nothing itself (the error tree's scrub does keep a log filter).
    assert "logging" not in runtime_imports("follower._reading._policy")
