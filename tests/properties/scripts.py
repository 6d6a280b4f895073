"""A step's script: the agent's answers, the store's answers, and what the body does.

A :class:`StepScript` says, turn by turn, how the agent answers each read of
the turn's task (:class:`ReadScript`), how the store answers each write
(:class:`StoreScript`), and what the step's body does: when it calls
``follow``, what it waits for (:class:`Until`), and how it ends
(:class:`Ending`). It may be run more than once: each of its
:class:`StoppedAttempt` runs it up to a point, hands its turns off and stops,
and the next attempt runs it again with ``resume=True`` on the same store and
agent (:func:`attempts`). Scripts are plain frozen values, so a falsifying
example prints as a readable script; :func:`tests.properties.run.run_step`
plays one.
"""

from __future__ import annotations

import functools

import attrs

from follower import TrajectoryState
from follower._format._layout import TurnKeys
from follower._turns._endings import CLEANUP_WRITE_SECONDS

ENDPOINT = "http://agent.test/ext/trajectory"
PREFIX = "steps/s1/"
FORMAT = "test/v1"
# Virtual clocks are exact up to looptime's 1 µs resolution and float sums.
EPS = 1e-3
TERMINAL_STATES = (TrajectoryState.COMPLETED, TrajectoryState.FAILED, TrajectoryState.CANCELED)


@attrs.frozen
class Answer:
    """How the agent answers one read: ``kind``, after growing or ending the task's log.

    ``kind``: ``page``, ``404``, ``4xx``, ``5xx``, ``transport`` (connection
    error) or ``hang`` (never answers: the read times out).
    """

    kind: str = "page"
    grow: int = 0
    finish: TrajectoryState | None = None
    delay: float = 0.0


@attrs.frozen
class ReadScript:
    """How the agent answers the reads of one task: an answer per read, then ``tail`` forever.

    (Not :class:`follower.testing.TaskScript`, the reference agent's task over
    time: this one scripts each answer, failures included.)

    ``tail``: ``running`` (pages, nothing new), ``terminal`` (the task ends in
    ``tail_state``, then pages), ``failing`` (transport errors), ``hanging``
    (reads time out) or ``gone`` (404).
    """

    answers: tuple[Answer, ...] = ()
    tail: str = "running"
    tail_state: TrajectoryState = TrajectoryState.COMPLETED
    page_limit: int = 1000
    format: str | None = FORMAT


@attrs.frozen
class PutOp:
    """How the store answers one write: ``ok``, ``fail``, ``slow`` (``seconds``) or ``hang``."""

    kind: str = "ok"
    seconds: float = 0.0

    @property
    def can_land_in_cleanup(self) -> bool:
        """Whether a cleanup write (bounded to 5 s) given this answer must land."""
        return self.kind == "ok" or (
            self.kind == "slow" and self.seconds < CLEANUP_WRITE_SECONDS - EPS
        )


@attrs.frozen
class StoreScript:
    """The store's answers to successive writes of each kind of object, then ``ok``."""

    chunk: tuple[PutOp, ...] = ()
    task: tuple[PutOp, ...] = ()
    meta: tuple[PutOp, ...] = ()
    end: tuple[PutOp, ...] = ()
    next: tuple[PutOp, ...] = ()


# The body's actions, in order.


@attrs.frozen
class Sleep:
    seconds: float


@attrs.frozen
class Follow:
    pass


@attrs.frozen
class Report:
    """``turn.ended(state)``."""

    state: str


@attrs.frozen
class Ticks:
    """Checkpoints: places the next action some scheduler ticks after the previous one."""

    count: int


@attrs.frozen
class Until:
    """Wait (at most ``max_wait`` seconds) until something happened to this turn's task.

    ``anchor``: ``reads`` (``count`` reads answered), ``failed_reads``, ``retry``
    (the instant the follower's backoff after failed read ``count`` ends),
    ``chunk_started`` / ``chunk_landed`` (chunk writes), ``follower_done``.
    """

    anchor: str
    count: int = 1
    max_wait: float = 30.0


@attrs.frozen
class Publish:
    """The agent appends ``count`` events to this turn's task."""

    count: int


@attrs.frozen
class Finish:
    """The agent ends this turn's task in ``state`` (its log is sealed first)."""

    state: TrajectoryState


@attrs.frozen
class AgentAnswers:
    """The next reads of this turn's task get these answers (before the script's)."""

    answers: tuple[Answer, ...]


@attrs.frozen
class StoreAnswers:
    """The next writes of objects of ``kind`` get these answers (before the script's)."""

    kind: str
    ops: tuple[PutOp, ...]


@attrs.frozen
class HandOff:
    """The body leaves its turns to the next attempt: no end marks, no null link.

    ``whom``: ``step`` calls ``turns.hand_off()`` (every turn of the step),
    ``turn`` calls ``turn.hand_off()`` (this turn). A plain turn has only the latter.
    """

    whom: str = "step"


Action = (
    Sleep
    | Follow
    | Report
    | Ticks
    | Until
    | Publish
    | Finish
    | AgentAnswers
    | StoreAnswers
    | HandOff
)


@attrs.frozen
class Ending:
    """How a turn's body ends: ``returns``, ``raises`` or ``cancelled``.

    ``error``: what it raises (``value``, ``custom``, ``group``, ``base``: a
    BaseException, ``library``: a follower error of the step's own).
    ``escapes``: the exception or cancel ends the whole step; otherwise the step
    catches it (an ``except`` around the turn, or a cancel scope around it only)
    and goes on with the next turn.
    """

    how: str = "returns"
    error: str = "value"
    escapes: bool = True


@attrs.frozen
class TurnScript:
    actions: tuple[Action, ...]
    ending: Ending = Ending()
    task: ReadScript = ReadScript()


@attrs.frozen
class SecondCancel:
    """A cancel of a scope around the whole step, placed relative to a turn's body end.

    ``anchor``: ``with_end`` (the body cancels it just before ending: the same
    tick as the stop), ``ticks`` (``value`` checkpoints after the body ended),
    ``after`` (``value`` seconds after), ``drain_deadline`` (the instant the
    drain's deadline fires), ``end_mark`` (while the turn's end mark is written:
    a second cancel during cleanup).
    """

    turn: int
    anchor: str
    value: float = 0.0


@attrs.frozen
class StoppedAttempt:
    """An attempt of the step that stops without ending it for good; the step is run again.

    It plays the step's turns up to turn ``turn`` as scripted; of that turn it
    plays the first ``actions`` actions, hands off (``whom``, as
    :class:`HandOff`) and ends the body as ``how`` says: ``cancelled`` (the
    worker is stopped), ``raises`` (``error``, as :class:`Ending`: a failure that
    will be retried) or ``returns`` (a worker shutting down after the turn). The
    attempt ends there; the next one runs the step again with ``resume=True``.
    """

    turn: int
    actions: int
    how: str = "cancelled"
    error: str = "value"
    whom: str = "step"


@attrs.frozen
class StepScript:
    turns: tuple[TurnScript, ...]
    poll_interval_seconds: float = 1.0
    drain_seconds: float = 3.0
    read_timeout_seconds: float = 1.0
    store: StoreScript = StoreScript()
    # Cancels the last attempt (the one that ends the step for good), if there is one.
    second_cancel: SecondCancel | None = None
    # One turn with following_live_trajectory instead of LiveTurns: no links.
    plain: bool = False
    # Attempts before the last, in order, each stopped and handed off.
    stopped: tuple[StoppedAttempt, ...] = ()
    # Whether a last attempt runs the step to its end; if not, every attempt handed off.
    finished: bool = True


@attrs.frozen
class AttemptScript:
    """One run of a step: its turns as this attempt plays them, and how it stops.

    ``stopped`` is ``None`` for the attempt that ends the step for good.
    """

    index: int
    turns: tuple[TurnScript, ...]
    resume: bool
    stopped: StoppedAttempt | None = None

    @property
    def final(self) -> bool:
        return self.stopped is None


def attempts(script: StepScript) -> tuple[AttemptScript, ...]:
    """The step's attempts in order: the stopped ones (their turns cut), then the last, if any.

    Every attempt but the first resumes: it runs the same turns on the same store.
    """
    runs = []
    for i, stop in enumerate(script.stopped):
        cut = script.turns[stop.turn]
        hand_off = TurnScript(
            (*cut.actions[: stop.actions], HandOff(stop.whom)),
            Ending(stop.how, stop.error, escapes=True),
            cut.task,
        )
        runs.append(AttemptScript(i, (*script.turns[: stop.turn], hand_off), i > 0, stop))
    if script.finished:
        runs.append(AttemptScript(len(runs), script.turns, bool(runs)))
    return tuple(runs)


def ends_the_step(turn: TurnScript) -> bool:
    """Whether the turn's own ending ends the step (the step never reaches a later turn)."""
    return turn.ending.how != "returns" and turn.ending.escapes


def turn_id(k: int) -> str:
    return f"turn-{k + 1}"


def task_id(k: int) -> str:
    return f"task-{k + 1}"


@functools.cache
def turn_keys(k: int) -> TurnKeys:
    """The keys of turn ``k``'s objects, as the stored layout names them."""
    return TurnKeys(PREFIX, turn_id(k))


def live(k: int) -> str:
    return turn_keys(k).live
