"""A step's script run on virtual time against in-memory fakes, and the properties checked after it.

A script (:class:`StepScript`) says how the agent answers each read of each task,
how the store answers each write, and what the step's body does turn by turn:
when it calls ``follow``, what it waits for, and how it ends. :func:`run_step`
runs it in a fresh event loop on a fresh virtual clock (trio ``MockClock`` or
``looptime``), records everything the agent, the store and the followers saw,
then :func:`check_properties` asserts the six properties of the issue:

1. the block exits within a bound computed from the script: after its body
   ends, ``drain_seconds`` (if the body returned), plus 5 s if the turn linked
   from an earlier one (a link write in flight, shielded and bounded), plus the
   10 s cleanup bound; ``LiveTurns`` exits within 5 s of its last turn;
2. no follower is alive after its block exits, and no read starts after it;
3. the step's outcome comes out unchanged;
4. the stored chunks are exactly the first N events the agent served;
5. each followed turn has exactly one ``end.json`` (state by the priority rule,
   ``next`` = N, written after its chunks), and the links are in order;
6. after stop, at most one failed read per follower (and none at all once the
   body raised or was cancelled: followers are cancelled at once).

Each property fails with its own exception class, so Hypothesis tells them apart
and a test can say which property caught a broken follower.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import httpx
import looptime
import pytest
import trio.testing

import follower._follow
import follower._turns
from follower import (
    LiveTurns,
    MemoryStore,
    ObjectExistsError,
    StoreError,
    TrajectoryBatch,
    TrajectoryState,
    following_live_trajectory,
)
from follower._exchange import POOL_WAIT_SECONDS
from follower._follow import retry_delay
from follower._turns import CLEANUP_SECONDS, CLEANUP_WRITE_SECONDS

ENDPOINT = "http://agent.test/ext/trajectory"
PREFIX = "steps/s1/"
FORMAT = "test/v1"
# Virtual clocks are exact up to looptime's 1 µs resolution and float sums.
EPS = 1e-3
# After the step, the test keeps the loop running this long: a follower left
# behind would read again within it (the longest backoff is 60 s).
LINGER_SECONDS = 130.0
# A follower that reads this often is looping: the agent then answers 404 to end it.
READ_CAP = 4000
TERMINAL_STATES = (TrajectoryState.COMPLETED, TrajectoryState.FAILED, TrajectoryState.CANCELED)


# --- scripts ---------------------------------------------------------------------------


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
class TaskScript:
    """The agent's behaviour for one task: an answer per read, then ``tail`` forever.

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


Action = Sleep | Follow | Report | Ticks | Until | Publish | Finish | AgentAnswers | StoreAnswers


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
    task: TaskScript = TaskScript()


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
class StepScript:
    turns: tuple[TurnScript, ...]
    poll_interval_seconds: float = 1.0
    drain_seconds: float = 3.0
    read_timeout_seconds: float = 1.0
    store: StoreScript = StoreScript()
    second_cancel: SecondCancel | None = None
    # One turn with following_live_trajectory instead of LiveTurns: no links.
    plain: bool = False


def turn_id(k: int) -> str:
    return f"turn-{k + 1}"


def task_id(k: int) -> str:
    return f"task-{k + 1}"


def live(k: int) -> str:
    return f"{PREFIX}{turn_id(k)}/live/"


# --- what happened ---------------------------------------------------------------------


@attrs.frozen
class Stamp:
    """When something happened: a total order (``seq``) and the virtual time (``at``)."""

    seq: int
    at: float


@attrs.define
class ReadRecord:
    task_id: str
    after: int
    start: Stamp
    end: Stamp | None = None
    # page, last (the last page), 404, 4xx, 5xx, transport, timeout, cancelled
    outcome: str = "pending"
    next: int | None = None

    @property
    def failed(self) -> bool:
        """A failed read of the agent: the ones the follower retries before stop."""
        return self.outcome in ("5xx", "transport", "timeout")


@attrs.define
class PutRecord:
    key: str
    kind: str
    op: PutOp
    body: bytes
    start: Stamp
    end: Stamp | None = None
    outcome: str = "pending"  # stored, exists, failed, cancelled


@attrs.define
class FollowerRecord:
    task_id: str
    starts: int = 0
    alive: int = 0
    accepted: list[TrajectoryBatch] = attrs.field(factory=list)
    ended: Stamp | None = None


class _NotRun:
    def __repr__(self) -> str:
        return "NOT_RUN"


NOT_RUN: Any = _NotRun()


@attrs.define
class TurnRecord:
    index: int
    script: TurnScript
    error: BaseException
    started: bool = False
    scope: anyio.CancelScope | None = None
    entered: Stamp | None = None
    followed: bool = False
    reported: str | None = None
    body_exit: BaseException | None = NOT_RUN
    body_end: Stamp | None = None
    block_exit: BaseException | None = NOT_RUN
    exited: Stamp | None = None
    alive_at_exit: int = 0
    # The step went on after this turn (it returned, or the step caught its end).
    went_on: bool = False


@attrs.define
class Outcome:
    how: str  # returned, raised, cancelled
    value: Any = None

    def __str__(self) -> str:
        if self.how == "returned":
            return "returned its value"
        return f"{self.how}: {_short(self.value)}"


class StepError(Exception):
    """An error of the step's own."""


class StepAborted(BaseException):
    """A BaseException of the step's own (not a cancel)."""


def make_error(kind: str, k: int) -> BaseException:
    match kind:
        case "value":
            return ValueError(f"turn {k + 1} failed")
        case "custom":
            return StepError(f"turn {k + 1} failed")
        case "group":
            return ExceptionGroup(f"turn {k + 1}'s own group", [ValueError("a"), KeyError("b")])
        case "base":
            return StepAborted(f"turn {k + 1} aborted")
        case "library":
            return StoreError(f"turn {k + 1}'s own store failed")
    raise AssertionError(kind)


# --- the fakes -------------------------------------------------------------------------


@attrs.define
class _Task:
    script: TaskScript
    events: list[str] = attrs.field(factory=list)
    state: TrajectoryState = TrajectoryState.PENDING
    answered: int = 0
    pushed: list[Answer] = attrs.field(factory=list)
    tail_reached: bool = False

    def grow(self, task: str, count: int) -> None:
        if self.state.is_terminal:
            return  # sealed
        start = len(self.events)
        self.events.extend(f"{task}/{i}" for i in range(start, start + count))
        if self.events:
            self.state = TrajectoryState.RUNNING

    def finish(self, state: TrajectoryState) -> None:
        if not self.state.is_terminal:
            self.state = state

    def next_answer(self) -> Answer:
        if self.pushed:
            return self.pushed.pop(0)
        i = self.answered
        self.answered += 1
        if i < len(self.script.answers):
            return self.script.answers[i]
        tail = self.script.tail
        if tail == "terminal":
            return Answer("page", finish=self.script.tail_state)
        return Answer(
            {"running": "page", "failing": "transport", "hanging": "hang", "gone": "404"}[tail]
        )


class FakeAgent:
    """The trajectory extension's cursor read, answering as each task's script says.

    Records every read with its start and end stamps and its outcome.
    """

    def __init__(self, world: World, tasks: dict[str, TaskScript]) -> None:
        self.world = world
        self.tasks = {tid: _Task(script) for tid, script in tasks.items()}
        self.reads: list[ReadRecord] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        world = self.world
        body = json.loads(request.content)
        tid, after = body["task_id"], body["after"]
        read = ReadRecord(tid, after, world.mark())
        self.reads.append(read)
        try:
            if len(self.reads) > READ_CAP:
                world.release_now(f"over {READ_CAP} reads: a follower is looping")
            task = self.tasks.get(tid)
            if world.released or task is None:
                read.outcome = "404"
                return httpx.Response(404, text="unknown task")
            answer = task.next_answer()
            task.grow(tid, answer.grow)
            if answer.finish is not None:
                task.finish(answer.finish)
            if answer.delay:
                await anyio.sleep(answer.delay)
            if answer.kind == "hang":
                await world.release.wait()
            if world.released:
                read.outcome = "404"
                return httpx.Response(404, text="released")
            match answer.kind:
                case "404":
                    read.outcome = "404"
                    return httpx.Response(404, text="unknown task")
                case "4xx":
                    read.outcome = "4xx"
                    return httpx.Response(403, text="forbidden")
                case "5xx":
                    read.outcome = "5xx"
                    return httpx.Response(503, text="busy")
                case "transport":
                    read.outcome = "transport"
                    raise httpx.ConnectError("connection refused", request=request)
            return self._page(read, task)
        except anyio.get_cancelled_exc_class():
            # The read's own deadline, or the follower being cancelled.
            waited = anyio.current_time() - read.start.at
            timed_out = abs(waited - world.read_deadline_seconds) < EPS
            read.outcome = "timeout" if timed_out else "cancelled"
            raise
        finally:
            read.end = world.mark()

    def _page(self, read: ReadRecord, task: _Task) -> httpx.Response:
        if read.after > len(task.events):
            read.outcome = "400"
            return httpx.Response(400, text="after is past the end")
        state = task.state  # read before the length, as the extension requires
        events = task.events[read.after : read.after + task.script.page_limit]
        nxt = read.after + len(events)
        has_more = nxt < len(task.events)
        read.outcome = "last" if state.is_terminal and not has_more else "page"
        read.next = nxt
        return httpx.Response(
            200,
            json={
                "context_id": "ctx",
                "task_id": read.task_id,
                "state": state.value,
                "format": task.script.format,
                "events": events,
                "next": nxt,
                "has_more": has_more,
            },
        )


def _kind(key: str) -> str:
    name = key.rsplit("/", 1)[-1]
    if name.endswith(".jsonl"):
        return "chunk"
    return {"meta.json": "meta", "end.json": "end", "next.json": "next"}[name]


class FakeStore(MemoryStore):
    """A write-once memory store answering each write as the script says; records them."""

    def __init__(self, world: World, script: StoreScript) -> None:
        super().__init__()
        self.world = world
        self.queues: dict[str, list[PutOp]] = {
            kind: list(getattr(script, kind)) for kind in ("chunk", "meta", "end", "next")
        }
        self.puts: list[PutRecord] = []

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        world = self.world
        kind = _kind(key)
        queue = self.queues[kind]
        op = queue.pop(0) if queue else PutOp()
        record = PutRecord(key, kind, op, bytes(body), world.mark())
        self.puts.append(record)
        try:
            if op.kind == "slow":
                await anyio.sleep(op.seconds)
            elif op.kind == "hang":
                await world.release.wait()
                raise StoreError("a hanging write, released by the test")
            elif op.kind == "fail":
                await anyio.lowlevel.checkpoint()
                raise StoreError("the store failed, as scripted")
            await super().put(key, body, content_type=content_type)
            record.outcome = "stored"
        except ObjectExistsError:
            record.outcome = "exists"
            raise
        except StoreError:
            record.outcome = "failed"
            raise
        except BaseException:
            record.outcome = "cancelled"
            raise
        finally:
            record.end = world.mark()

    def landed(self, key: str) -> PutRecord | None:
        return next((p for p in self.puts if p.key == key and p.outcome == "stored"), None)


# --- running a script ------------------------------------------------------------------


@attrs.frozen
class Variant:
    """A follower under test: the library, or the library with pieces replaced.

    ``patches``: (object, attribute, value) set for the duration of each example.
    ``backends``: where it can run at all.
    """

    name: str
    patches: tuple[tuple[Any, str, Any], ...] = ()
    backends: tuple[str, ...] = ("asyncio", "trio")


LIBRARY = Variant("follower")


class World:
    """Everything one example runs with, and everything it recorded."""

    def __init__(self, script: StepScript, backend: str) -> None:
        self.script = script
        self.backend = backend
        self.seq = 0
        self.agent = FakeAgent(self, {task_id(k): t.task for k, t in enumerate(script.turns)})
        self.store = FakeStore(self, script.store)
        self.turns = [
            TurnRecord(k, t, make_error(t.ending.error, k)) for k, t in enumerate(script.turns)
        ]
        self.followers: dict[str, FollowerRecord] = {}
        self.value = object()
        self.outcome: Outcome | None = None
        self.caught_by: tuple[bool, bool] = (False, False)
        self.second_cancelled: Stamp | None = None
        self.step_exit: Stamp | None = None
        self.turns_exit: Stamp | None = None
        self.released = False
        self.release_reason: str | None = None
        self.read_deadline_seconds = script.read_timeout_seconds + POOL_WAIT_SECONDS
        self.crash: BaseException | None = None
        self.cancelled_class: type[BaseException] = BaseException

    # --- clock and events ------------------------------------------------------------

    def mark(self) -> Stamp:
        """A stamp for now; wakes whoever waits for something to happen."""
        self.seq += 1
        self._changed.set()
        self._changed = anyio.Event()
        return Stamp(self.seq, anyio.current_time())

    async def until(self, happened: Callable[[], bool], max_wait: float) -> None:
        with anyio.move_on_after(max_wait):
            while not happened():
                await self._changed.wait()

    def release_now(self, reason: str) -> None:
        """Unstick everything: hangs end, the agent answers 404 from now on."""
        if not self.released:
            self.released = True
            self.release_reason = reason
            self.release.set()

    @property
    def static_deadline(self) -> float:
        """A bound on the whole step, whatever the follower does: the watchdog's."""
        total = 30.0 + CLEANUP_WRITE_SECONDS
        for turn in self.script.turns:
            for action in turn.actions:
                if isinstance(action, Sleep):
                    total += action.seconds
                elif isinstance(action, Until):
                    total += action.max_wait + 60.0
            total += self.script.drain_seconds + CLEANUP_SECONDS + CLEANUP_WRITE_SECONDS
        return total

    # --- the run ---------------------------------------------------------------------

    async def main(self) -> None:
        self._changed = anyio.Event()
        self.release = anyio.Event()
        self.cancelled_class = anyio.get_cancelled_exc_class()
        transport = httpx.MockTransport(self.agent.handle)
        async with (
            httpx.AsyncClient(transport=transport, trust_env=False) as client,
            anyio.create_task_group() as tg,
        ):
            self.client = client
            self._watching = anyio.CancelScope()
            tg.start_soon(self._watchdog)
            if self.script.second_cancel is not None:
                tg.start_soon(self._second_cancel, self.script.second_cancel)
            await self._run_step()
            self.step_exit = self.mark()
            self._watching.cancel()
            await anyio.sleep(LINGER_SECONDS)
            self.release_now("the test is over")
            tg.cancel_scope.cancel()

    async def _watchdog(self) -> None:
        with self._watching:
            await anyio.sleep(self.static_deadline)
            self.release_now(f"the step ran past {self.static_deadline} s (the watchdog)")

    async def _run_step(self) -> None:
        cancelled = anyio.get_cancelled_exc_class()
        with anyio.CancelScope() as outer:
            self.second_scope = outer
            with anyio.CancelScope() as inner:
                self.step_scope = inner
                try:
                    value = await self._step()
                except cancelled as exc:
                    self.outcome = Outcome("cancelled", exc)
                    raise
                except BaseException as exc:
                    self.outcome = Outcome("raised", exc)
                else:
                    self.outcome = Outcome("returned", value)
        self.caught_by = (inner.cancelled_caught, outer.cancelled_caught)

    async def _step(self) -> object:
        script = self.script
        options: dict[str, Any] = {
            "poll_interval_seconds": script.poll_interval_seconds,
            "drain_seconds": script.drain_seconds,
            "read_timeout_seconds": script.read_timeout_seconds,
            "client": self.client,
        }
        if script.plain:
            await self._turn(
                0, following_live_trajectory(ENDPOINT, self.store, PREFIX, turn_id(0), **options)
            )
            return self.value
        try:
            async with LiveTurns(ENDPOINT, self.store, PREFIX, **options) as turns:
                for k in range(len(script.turns)):
                    await self._turn(k, turns.following(turn_id(k)))
        finally:
            self.turns_exit = self.mark()
        return self.value

    async def _turn(self, k: int, block: Any) -> None:
        record = self.turns[k]
        record.started = True
        with anyio.CancelScope() as scope:
            record.scope = scope
            try:
                async with block as turn:
                    await self._body(k, turn)
            except BaseException as exc:
                self._exited(record, exc)
                if record.script.ending.escapes or exc is not record.error:
                    raise
            else:
                self._exited(record, None)
        record.went_on = True

    def _exited(self, record: TurnRecord, exc: BaseException | None) -> None:
        record.block_exit = exc
        record.exited = self.mark()
        follower_ = self.followers.get(task_id(record.index))
        record.alive_at_exit = follower_.alive if follower_ is not None else 0

    async def _body(self, k: int, turn: Any) -> None:
        record = self.turns[k]
        script = record.script
        record.entered = self.mark()
        try:
            for action in script.actions:
                await self._act(k, turn, action)
            second = self.script.second_cancel
            if second is not None and second.turn == k and second.anchor == "with_end":
                self._cancel_second()
            if script.ending.how == "raises":
                raise record.error
            if script.ending.how == "cancelled":
                scope = self.step_scope if script.ending.escapes else record.scope
                assert scope is not None
                scope.cancel()
                await anyio.sleep_forever()
        except BaseException as exc:
            record.body_exit = exc
            raise
        else:
            record.body_exit = None
        finally:
            record.body_end = self.mark()

    async def _act(self, k: int, turn: Any, action: Action) -> None:
        tid = task_id(k)
        task = self.agent.tasks[tid]
        match action:
            case Sleep(seconds):
                await anyio.sleep(seconds)
            case Follow():
                turn.follow(tid)
                self.turns[k].followed = True
            case Report(state):
                turn.ended(state)
                self.turns[k].reported = state
            case Ticks(count):
                for _ in range(count):
                    await anyio.lowlevel.checkpoint()
            case Until():
                await self._until(k, action)
            case Publish(count):
                task.grow(tid, count)
            case Finish(state):
                task.finish(state)
            case AgentAnswers(answers):
                task.pushed.extend(answers)
            case StoreAnswers(kind, ops):
                self.store.queues[kind][:0] = ops
            case _:
                raise AssertionError(action)

    async def _until(self, k: int, until: Until) -> None:
        tid, prefix = task_id(k), live(k)

        def reads() -> list[ReadRecord]:
            return [r for r in self.agent.reads if r.task_id == tid and r.end is not None]

        def chunks(landed: bool) -> int:
            return sum(
                1
                for p in self.store.puts
                if p.kind == "chunk"
                and p.key.startswith(prefix)
                and (p.outcome == "stored" if landed else True)
            )

        happened: Callable[[], bool]
        match until.anchor:
            case "reads":
                happened = lambda: len(reads()) >= until.count  # noqa: E731
            case "failed_reads" | "retry":
                happened = lambda: sum(r.failed for r in reads()) >= until.count  # noqa: E731
            case "chunk_started":
                happened = lambda: chunks(landed=False) >= until.count  # noqa: E731
            case "chunk_landed":
                happened = lambda: chunks(landed=True) >= until.count  # noqa: E731
            case "follower_done":
                happened = lambda: (  # noqa: E731
                    tid in self.followers and self.followers[tid].ended is not None
                )
            case _:
                raise AssertionError(until)
        await self.until(happened, until.max_wait)
        if until.anchor == "retry" and happened():
            # The same instant as the follower's backoff after that failed read ends.
            in_a_row = seen = 0
            for read in reads():
                if read.failed:
                    in_a_row += 1
                    seen += 1
                    if seen == until.count:
                        assert read.end is not None
                        delay = retry_delay(self.script.poll_interval_seconds, in_a_row)
                        await anyio.sleep_until(read.end.at + delay)
                        break
                elif read.outcome in ("page", "last"):
                    in_a_row = 0

    def _cancel_second(self) -> None:
        if self.step_exit is not None:
            return  # the step is over: nothing left to cancel
        if self.second_cancelled is None:
            self.second_cancelled = self.mark()
        self.second_scope.cancel()

    async def _second_cancel(self, second: SecondCancel) -> None:
        if second.anchor == "with_end" or second.turn >= len(self.turns):
            return
        record = self.turns[second.turn]
        if second.anchor == "end_mark":
            key = live(second.turn) + "end.json"
            await self.until(lambda: any(p.key == key for p in self.store.puts), max_wait=math.inf)
        else:
            await self.until(lambda: record.body_end is not None, max_wait=math.inf)
        assert record.body_end is not None or second.anchor == "end_mark"
        match second.anchor:
            case "ticks" | "end_mark":
                for _ in range(int(second.value)):
                    await anyio.lowlevel.checkpoint()
            case "after":
                assert record.body_end is not None
                await anyio.sleep_until(record.body_end.at + second.value)
            case "drain_deadline":
                assert record.body_end is not None
                await anyio.sleep_until(record.body_end.at + self.script.drain_seconds)
        self._cancel_second()

    # --- reading back ----------------------------------------------------------------

    def reads_of(self, k: int) -> list[ReadRecord]:
        return [r for r in self.agent.reads if r.task_id == task_id(k)]

    def object(self, key: str) -> Any:
        put = self.store.landed(key)
        return None if put is None else json.loads(put.body)

    def timeline(self) -> str:
        """What happened, in order: printed with a failing example."""
        lines: list[tuple[int, str]] = []
        for r in self.agent.reads:
            end = f"-> {r.outcome} at {r.end.at:.3f} #{r.end.seq}" if r.end else "(never ended)"
            nxt = f" next={r.next}" if r.next is not None else ""
            lines.append(
                (
                    r.start.seq,
                    f"{r.start.at:9.3f} #{r.start.seq} read {r.task_id} after={r.after}{nxt} {end}",
                )
            )
        for p in self.store.puts:
            end = f"-> {p.outcome} at {p.end.at:.3f} #{p.end.seq}" if p.end else "(never ended)"
            lines.append(
                (p.start.seq, f"{p.start.at:9.3f} #{p.start.seq} put {p.key} ({p.op.kind}) {end}")
            )
        for t in self.turns:
            for label, stamp in (
                ("entered", t.entered),
                (f"body ended: {_short(t.body_exit)}", t.body_end),
                (f"block exited: {_short(t.block_exit)}", t.exited),
            ):
                if stamp is not None:
                    lines.append(
                        (stamp.seq, f"{stamp.at:9.3f} #{stamp.seq} {turn_id(t.index)} {label}")
                    )
        for label, stamp in (
            ("second cancel", self.second_cancelled),
            ("turns exited", self.turns_exit),
            (f"step exited: {self.outcome}", self.step_exit),
        ):
            if stamp is not None:
                lines.append((stamp.seq, f"{stamp.at:9.3f} #{stamp.seq} {label}"))
        lines.sort()
        extra = [f"released: {self.release_reason}"] if self.released else []
        return "\n".join([line for _, line in lines] + extra)


def _short(exc: BaseException | None) -> str:
    if exc is None:
        return "normally"
    if isinstance(exc, BaseException) and type(exc).__name__ in ("Cancelled", "CancelledError"):
        return f"{type(exc).__name__} (the backend's cancel)"
    return repr(exc)


def _tracked_follow(world: World, real: Callable[..., Any]) -> Callable[..., Any]:
    """The turns' follower, counting live followers and the batches their sink accepted."""

    @functools.wraps(real)
    async def follow_task(endpoint: str, tid: str, sink: Any, **options: Any) -> Any:
        record = world.followers.setdefault(tid, FollowerRecord(tid))
        record.starts += 1
        record.alive += 1

        async def accepting(batch: TrajectoryBatch) -> None:
            await sink(batch)
            record.accepted.append(batch)

        try:
            return await real(endpoint, tid, accepting, **options)
        finally:
            record.alive -= 1
            record.ended = world.mark()

    return follow_task


def backend_options(backend: str) -> dict[str, Any]:
    """A fresh virtual clock for one run."""
    if backend == "trio":
        return {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return {"loop_factory": looptime.new_event_loop}


@contextmanager
def _quiet_library() -> Iterator[None]:
    # Followers log every failed read; thousands of examples' worth of captured
    # records only slow the run down. What is logged is tested elsewhere.
    logger = logging.getLogger("follower")
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


def run_step(script: StepScript, backend: str, variant: Variant = LIBRARY) -> World:
    """Run ``script`` once on ``backend`` with ``variant``'s follower; return what happened."""
    world = World(script, backend)
    with pytest.MonkeyPatch.context() as patch, _quiet_library():
        patch.setattr(
            follower._turns,
            "follow_task",
            _tracked_follow(world, follower._follow.follow_task),
        )
        for target, name, value in variant.patches:
            patch.setattr(target, name, value)
        try:
            anyio.run(world.main, backend=backend, backend_options=backend_options(backend))
        except BaseException as exc:
            world.crash = exc
    return world


# --- the properties --------------------------------------------------------------------


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


class EndMarkWrong(PropertyViolation):
    number = 5


class EndMarkMissing(EndMarkWrong):
    """An end mark or link missing (or written twice) though the store would take it."""


class EndMarkState(EndMarkWrong):
    """The end mark's state is not the one the priority rule gives."""


class EndMarkCount(EndMarkWrong):
    """The end mark's ``next`` is not the number of events stored."""


class EndMarkOrder(EndMarkWrong):
    """A chunk landed after the end mark."""


class LinkWrong(EndMarkWrong):
    """A ``next.json`` names the wrong turn, or belongs to no followed turn."""


class RetriedAfterStop(PropertyViolation):
    number = 6


class HarnessError(AssertionError):
    """The test itself went wrong (not a property of the follower)."""


def find_violations(world: World) -> list[PropertyViolation]:
    """The first violation each check finds, in the order of the properties."""
    if world.outcome is None or world.step_exit is None:
        if world.crash is not None:
            raise HarnessError("the run crashed") from world.crash
        raise HarnessError("the step did not run to its end")
    checks: list[Callable[[], None]] = [
        lambda: _check_exit_bound(world),
        lambda: _check_no_follower_left(world),
        lambda: _check_outcome(world),
    ]
    for record in world.turns:
        if record.started:
            checks.append(functools.partial(_check_chunks, world, record))
    for record in world.turns:
        if record.started:
            checks.append(functools.partial(_check_end_mark, world, record))
    checks += [lambda: _check_links(world), lambda: _check_reads_after_stop(world)]
    found: list[PropertyViolation] = []
    for check in checks:
        try:
            check()
        except PropertyViolation as violation:
            found.append(violation)
    return sorted(found, key=lambda v: v.number)


def check_properties(world: World) -> None:
    """Assert the six properties on what ``world`` recorded; raise the first violation."""
    if world.crash is not None:
        raise OutcomeChanged(f"the run crashed with {world.crash!r}") from world.crash
    violations = find_violations(world)
    if violations:
        raise violations[0]


def _cancel(world: World, exc: Any) -> bool:
    """Whether ``exc`` is the backend's own cancel (not wrapped in a group)."""
    return isinstance(exc, world.cancelled_class) and not isinstance(exc, BaseExceptionGroup)


def _linked(world: World, record: TurnRecord) -> bool:
    """Whether the turn's follow() linked it from an earlier turn (a write in its group)."""
    return (
        not world.script.plain
        and record.followed
        and any(t.followed for t in world.turns[: record.index])
    )


def _check_exit_bound(world: World) -> None:
    if world.released and world.release_reason != "the test is over":
        raise ExitTooLate(f"the test had to unstick the step: {world.release_reason}")
    last_exit: Stamp | None = None
    for record in world.turns:
        if record.exited is None:
            continue
        last_exit = record.exited
        if record.body_end is None:
            continue
        returned = record.body_exit is None
        bound = (
            (world.script.drain_seconds if returned else 0.0)
            + (CLEANUP_WRITE_SECONDS if _linked(world, record) else 0.0)
            + CLEANUP_SECONDS
        )
        took = record.exited.at - record.body_end.at
        if took > bound + EPS:
            raise ExitTooLate(
                f"{turn_id(record.index)}'s block exited {took:.3f} s after its body "
                f"{'returned' if returned else 'ended'}; the bound is {bound:.3f} s"
            )
    if world.turns_exit is not None and last_exit is not None:
        took = world.turns_exit.at - last_exit.at
        if took > CLEANUP_WRITE_SECONDS + EPS:
            raise ExitTooLate(f"LiveTurns exited {took:.3f} s after its last turn")


def _check_no_follower_left(world: World) -> None:
    assert world.step_exit is not None
    for record in world.turns:
        if record.exited is None:
            continue
        if record.alive_at_exit:
            raise FollowerOutlivedBlock(
                f"{record.alive_at_exit} follower(s) of {turn_id(record.index)} alive "
                "after its block exited"
            )
        late = [r for r in world.reads_of(record.index) if r.start.seq > record.exited.seq]
        if late:
            raise FollowerOutlivedBlock(
                f"{len(late)} read(s) of {task_id(record.index)} started after "
                f"{turn_id(record.index)}'s block exited, the first at {late[0].start.at:.3f}"
            )
    late = [r for r in world.agent.reads if r.start.seq > world.step_exit.seq]
    if late:
        raise FollowerOutlivedBlock(f"{len(late)} read(s) started after the step exited")
    alive = {tid: f.alive for tid, f in world.followers.items() if f.alive}
    if alive:
        raise FollowerOutlivedBlock(f"followers alive after the step: {alive}")


def _check_outcome(world: World) -> None:
    assert world.outcome is not None
    second = world.second_cancelled
    escaped: TurnRecord | None = None
    for record in world.turns:
        if not record.started or record.exited is None:
            continue
        body, block = record.body_exit, record.block_exit
        disturbed = second is not None and (
            record.body_end is None or second.seq < record.body_end.seq
        )
        if body is NOT_RUN:
            # Entering the block was cancelled (the second cancel): nothing else to check.
            if not _cancel(world, block):
                raise OutcomeChanged(
                    f"{turn_id(record.index)}'s block raised {block!r} before its body ran"
                )
            escaped = record
            break
        expected_how = record.script.ending.how
        if not disturbed:
            how = "returns" if body is None else ("cancelled" if _cancel(world, body) else "raises")
            if how != expected_how or (how == "raises" and body is not record.error):
                raise HarnessError(f"{turn_id(record.index)}'s body ended with {body!r}")
        if body is None:
            assert record.exited is not None
            cancelled_from_outside = second is not None and second.seq < record.exited.seq
            if block is not None and not (cancelled_from_outside and _cancel(world, block)):
                raise OutcomeChanged(
                    f"{turn_id(record.index)}'s body returned, but its block raised {block!r}"
                )
        elif _cancel(world, body):
            if not _cancel(world, block):
                raise OutcomeChanged(
                    f"{turn_id(record.index)}'s body was cancelled, but its block raised "
                    f"{block!r} (the cancel must propagate as the backend's cancel)"
                )
        elif block is not body:
            raise OutcomeChanged(
                f"{turn_id(record.index)}'s body raised {body!r}, but its block raised {block!r}"
            )
        if not record.went_on:
            escaped = record
            break
    outcome = world.outcome
    inner, outer = world.caught_by
    if escaped is None:
        if outcome.how == "returned":
            if outcome.value is not world.value:
                raise OutcomeChanged(f"the step returned {outcome.value!r}, not its own value")
        elif not (outcome.how == "cancelled" and second is not None and outer):
            raise OutcomeChanged(f"the step should have returned; it ended {outcome}")
    elif _cancel(world, escaped.block_exit):
        if outcome.how != "cancelled" or not (inner or outer):
            raise OutcomeChanged(f"the step should have been cancelled; it ended {outcome}")
    elif outcome.how != "raised" or outcome.value is not escaped.block_exit:
        raise OutcomeChanged(
            f"the step should have raised {escaped.block_exit!r} as itself; it ended {outcome}"
        )


def _chunks(world: World, k: int) -> list[tuple[int, int, PutRecord]]:
    found = []
    for put in world.store.puts:
        if put.outcome == "stored" and put.kind == "chunk" and put.key.startswith(live(k)):
            name = put.key.rsplit("/", 1)[1].removesuffix(".jsonl")
            after, nxt = (int(n) for n in name.split("-"))
            found.append((after, nxt, put))
    return sorted(found, key=lambda c: (c[0], c[1]))


def _check_chunks(world: World, record: TurnRecord) -> None:
    k = record.index
    name = turn_id(k)
    keys = [p.key for p in world.store.puts if p.outcome == "stored" and p.key.startswith(live(k))]
    if not record.followed:
        own = [key for key in keys if not key.endswith("next.json")]
        if own:
            raise ChunksWrong(f"{name} never followed a task but stored {own}")
        return
    task = world.agent.tasks[task_id(k)]
    served = {(r.after, r.next) for r in world.reads_of(k) if r.next is not None}
    cursor = 0
    for after, nxt, put in _chunks(world, k):
        if after != cursor:
            raise ChunksWrong(
                f"{name}: chunk {after}-{nxt} after {cursor} events: not contiguous "
                "(or a duplicate)"
            )
        if (after, nxt) not in served:
            raise ChunksWrong(f"{name}: chunk {after}-{nxt} is no page the agent served")
        events = [json.loads(line) for line in put.body.decode().splitlines()]
        if events != task.events[after:nxt]:
            raise ChunksWrong(
                f"{name}: chunk {after}-{nxt} holds {events}, the agent served "
                f"{task.events[after:nxt]}"
            )
        cursor = nxt
    follower_ = world.followers.get(task_id(k))
    accepted = [(b.after, b.next) for b in follower_.accepted if b.events] if follower_ else []
    stored = [(after, nxt) for after, nxt, _ in _chunks(world, k)]
    if stored != accepted:
        raise ChunksWrong(f"{name}: chunks {stored} stored, but the sink accepted {accepted}")


def _expected_state(world: World, record: TurnRecord) -> TrajectoryState:
    follower_ = world.followers.get(task_id(record.index))
    last = [b for b in follower_.accepted if b.last] if follower_ else []
    if last:
        return last[-1].state
    if record.reported is not None:
        return TrajectoryState.from_task_state(record.reported)
    if _cancel(world, record.body_exit) or (
        record.body_exit is None and _cancel(world, record.block_exit)
    ):
        return TrajectoryState.CANCELED
    return TrajectoryState.FAILED


def _attempts(world: World, key: str) -> list[PutRecord]:
    return [p for p in world.store.puts if p.key == key]


def _check_landed_once(world: World, key: str, what: str) -> PutRecord | None:
    """The object at ``key`` is written once; missing only if every attempt was failed."""
    attempts = _attempts(world, key)
    if not attempts:
        raise EndMarkMissing(f"{what} was never written")
    landed = [p for p in attempts if p.outcome == "stored"]
    if len(landed) > 1:
        raise EndMarkMissing(f"{what} landed {len(landed)} times")
    if not landed:
        could = [p for p in attempts if p.op.can_land_in_cleanup]
        if could:
            raise EndMarkMissing(
                f"{what} is missing, though the store would have taken the write "
                f"({could[0].op}, which ended {could[0].outcome})"
            )
        return None
    return landed[0]


def _check_end_mark(world: World, record: TurnRecord) -> None:
    k = record.index
    key = live(k) + "end.json"
    if not record.followed:
        if _attempts(world, key):
            raise EndMarkMissing(f"{turn_id(k)} never followed a task but wrote end.json")
        return
    if record.exited is None:
        raise HarnessError(f"{turn_id(k)} followed but never exited")
    end = _check_landed_once(world, key, f"{turn_id(k)}'s end.json")
    if end is None:
        return
    assert end.end is not None
    chunks = _chunks(world, k)
    stored_next = chunks[-1][1] if chunks else 0
    expected = {"state": _expected_state(world, record).value, "next": stored_next}
    mark = json.loads(end.body)
    if mark.get("next") != expected["next"]:
        raise EndMarkCount(f"{turn_id(k)}'s end.json is {mark}, expected {expected}")
    if mark != expected:
        raise EndMarkState(f"{turn_id(k)}'s end.json is {mark}, expected {expected}")
    for after, nxt, put in chunks:
        assert put.end is not None
        if put.end.seq > end.end.seq:
            raise EndMarkOrder(f"{turn_id(k)}'s chunk {after}-{nxt} landed after its end.json")


def _check_links(world: World) -> None:
    followed = [t for t in world.turns if t.followed]
    for record in world.turns:
        key = live(record.index) + "next.json"
        if (world.script.plain or not record.followed) and _attempts(world, key):
            raise LinkWrong(
                f"{turn_id(record.index)} is no followed turn of LiveTurns, "
                "but next.json was written for it"
            )
    if world.script.plain:
        return
    for i, record in enumerate(followed):
        key = live(record.index) + "next.json"
        nxt = turn_id(followed[i + 1].index) if i + 1 < len(followed) else None
        put = _check_landed_once(world, key, f"{turn_id(record.index)}'s next.json")
        if put is not None and json.loads(put.body) != {"turn": nxt}:
            raise LinkWrong(
                f"{turn_id(record.index)}'s next.json is {json.loads(put.body)}, "
                f"expected {{'turn': {nxt!r}}}"
            )


def _check_reads_after_stop(world: World) -> None:
    for record in world.turns:
        if not record.followed or record.body_end is None:
            continue
        reads = world.reads_of(record.index)
        stop = record.body_end
        if record.body_exit is not None:
            # Raised or cancelled: followers are cancelled at once, no new read.
            late = [r for r in reads if r.start.at > stop.at + EPS]
            if late:
                raise RetriedAfterStop(
                    f"{turn_id(record.index)}'s body ended at {stop.at:.3f}, yet its "
                    f"follower started a read at {late[0].start.at:.3f}"
                )
            continue
        failed = [r for r in reads if r.failed and r.end is not None and r.end.seq > stop.seq]
        if len(failed) > 1:
            raise RetriedAfterStop(
                f"{turn_id(record.index)}: {len(failed)} failed reads after stop "
                f"(at {', '.join(f'{r.end.at:.3f}' for r in failed if r.end)})"
            )
        if failed:
            assert failed[0].end is not None
            after = [r for r in reads if r.start.seq > failed[0].end.seq]
            if after:
                raise RetriedAfterStop(
                    f"{turn_id(record.index)}: a read started at {after[0].start.at:.3f}, "
                    f"after the read that failed after stop"
                )


def describe(world: World) -> list[str]:
    """Labels of what an example exercised, for ``--hypothesis-show-statistics``."""
    labels = [f"step {world.outcome.how if world.outcome else 'did not end'}"]
    for record in world.turns:
        if not record.started or record.body_exit is NOT_RUN:
            continue
        body = record.body_exit
        how = "returned" if body is None else ("cancelled" if _cancel(world, body) else "raised")
        labels.append(f"a turn {'followed' if record.followed else 'did not follow'} and {how}")
        if record.followed:
            mark = world.object(live(record.index) + "end.json")
            labels.append(f"end mark: {mark['state'] if mark else 'missing'}")
            if record.body_end is not None:
                after_stop = [
                    r
                    for r in world.reads_of(record.index)
                    if r.end is not None and r.end.seq > record.body_end.seq
                ]
                if any(r.failed for r in after_stop):
                    labels.append("a read failed after the body ended")
                if any(r.outcome == "last" for r in after_stop):
                    labels.append("the last page was read after the body ended")
    if world.second_cancelled is not None:
        labels.append(f"cancelled from outside ({world.script.second_cancel.anchor})")  # type: ignore[union-attr]
    if any(p.outcome in ("failed", "cancelled") for p in world.store.puts):
        labels.append("a store write failed or was cut")
    if len(world.script.turns) > 1:
        labels.append("several turns")
    return labels
