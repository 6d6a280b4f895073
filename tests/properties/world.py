"""The world one property example runs in: a step played from its script on a virtual clock.

:meth:`World.main` runs the step's attempts one after the other against the
world's fake agent and store (the same ones: the store keeps what an attempt
stored, the agent's tasks go on). In each attempt it runs the turns, plays each
turn's body action by action, places the second cancel (in the last attempt),
and records when each body ended and each block exited. After each attempt it
keeps the loop running (:data:`LINGER_SECONDS`), so that a follower left
behind shows up as a read the checks can see, within that attempt's window
(:class:`Attempt`). :meth:`World.timeline` prints it all in order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import httpx

from follower import LiveTurns, following_live_trajectory
from follower._backoff import retry_delay
from follower._http._exchange import POOL_WAIT_SECONDS
from follower._turns._endings import CLEANUP_SECONDS, CLEANUP_WRITE_SECONDS

from .fakes import WorldAgent, WorldStore
from .records import (
    FollowerRecord,
    Outcome,
    PutRecord,
    ReadRecord,
    Stamp,
    TurnRecord,
    make_error,
    short,
)
from .scripts import (
    ENDPOINT,
    PREFIX,
    Action,
    AgentAnswers,
    AttemptScript,
    Finish,
    Follow,
    HandOff,
    Publish,
    Report,
    SecondCancel,
    Sleep,
    StepScript,
    StoreAnswers,
    Ticks,
    Until,
    attempts,
    live,
    task_id,
    turn_id,
    turn_keys,
)

# After each attempt, the test keeps the loop running this long: a follower left
# behind would read again within it (the longest backoff is 60 s).
LINGER_SECONDS = 130.0


class Attempt:
    """One run of the step, and what it recorded.

    The agent's reads and the store's writes are the world's, shared by every
    attempt; an attempt's own are those that started in its window: from its
    start to the end of the linger after it.
    """

    def __init__(self, world: World, script: AttemptScript) -> None:
        self.world = world
        self.script = script
        self.index = script.index
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
        # What LiveTurns' exit was handed: None if its body ran to its end.
        self.turns_exc: BaseException | None = None
        self.start: Stamp | None = None
        self.stop: Stamp | None = None
        self.live_turns: LiveTurns | None = None
        self.step_scope: anyio.CancelScope | None = None
        self.second_scope: anyio.CancelScope | None = None

    @property
    def final(self) -> bool:
        """Whether this attempt ends the step for good (it hands nothing off)."""
        return self.script.final

    @property
    def name(self) -> str:
        return f"attempt {self.index + 1}"

    def within(self, stamp: Stamp) -> bool:
        assert self.start is not None
        return self.start.seq <= stamp.seq and (self.stop is None or stamp.seq <= self.stop.seq)

    @property
    def reads(self) -> list[ReadRecord]:
        return [r for r in self.world.agent.reads if self.within(r.start)]

    def reads_of(self, k: int) -> list[ReadRecord]:
        return [r for r in self.reads if r.task_id == task_id(k)]

    @property
    def puts(self) -> list[PutRecord]:
        return [p for p in self.world.store.puts if self.within(p.start)]

    def record(self, k: int) -> TurnRecord | None:
        """Turn ``k`` of this attempt, if the attempt started it."""
        if k < len(self.turns) and self.turns[k].started:
            return self.turns[k]
        return None

    @property
    def static_deadline(self) -> float:
        """A bound on the whole attempt, whatever the follower does: the watchdog's."""
        total = 30.0 + CLEANUP_WRITE_SECONDS
        for turn in self.script.turns:
            for action in turn.actions:
                if isinstance(action, Sleep):
                    total += action.seconds
                elif isinstance(action, Until):
                    total += action.max_wait + 60.0
            total += self.world.script.drain_seconds + CLEANUP_SECONDS + CLEANUP_WRITE_SECONDS
        return total


class World:
    """Everything one example runs with, and everything its attempts recorded."""

    def __init__(self, script: StepScript, backend: str) -> None:
        self.script = script
        self.backend = backend
        self.seq = 0
        self.agent = WorldAgent(self, {task_id(k): t.task for k, t in enumerate(script.turns)})
        self.store = WorldStore(self, script.store)
        self.attempts = [Attempt(self, a) for a in attempts(script)]
        self.current = self.attempts[0]
        self.released = False
        self.release_reason: str | None = None
        self.read_deadline_seconds = script.read_timeout_seconds + POOL_WAIT_SECONDS
        self.crash: BaseException | None = None
        self.cancelled_class: type[BaseException] = BaseException

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]

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
            for attempt in self.attempts:
                self.current = attempt
                attempt.start = self.mark()
                watching = anyio.CancelScope()
                tg.start_soon(self._watchdog, attempt, watching)
                second = self.script.second_cancel
                if attempt.final and second is not None:
                    tg.start_soon(self._second_cancel, attempt, second)
                await self._run_step(attempt)
                attempt.step_exit = self.mark()
                watching.cancel()
                await anyio.sleep(LINGER_SECONDS)
                attempt.stop = self.mark()
            self.release_now("the test is over")
            tg.cancel_scope.cancel()

    async def _watchdog(self, attempt: Attempt, watching: anyio.CancelScope) -> None:
        with watching:
            deadline = attempt.static_deadline
            await anyio.sleep(deadline)
            self.release_now(f"{attempt.name} ran past {deadline} s (the watchdog)")

    async def _run_step(self, attempt: Attempt) -> None:
        cancelled = anyio.get_cancelled_exc_class()
        with anyio.CancelScope() as outer:
            attempt.second_scope = outer
            with anyio.CancelScope() as inner:
                attempt.step_scope = inner
                try:
                    value = await self._step(attempt)
                except cancelled as exc:
                    attempt.outcome = Outcome("cancelled", exc)
                    raise
                except BaseException as exc:
                    attempt.outcome = Outcome("raised", exc)
                else:
                    attempt.outcome = Outcome("returned", value)
        attempt.caught_by = (inner.cancelled_caught, outer.cancelled_caught)

    async def _step(self, attempt: Attempt) -> object:
        script = self.script
        options: dict[str, Any] = {
            "poll_interval_seconds": script.poll_interval_seconds,
            "drain_seconds": script.drain_seconds,
            "read_timeout_seconds": script.read_timeout_seconds,
            "client": self.client,
            "resume": attempt.script.resume,
        }
        if script.plain:
            block = following_live_trajectory(ENDPOINT, self.store, PREFIX, turn_id(0), **options)
            await self._turn(attempt, 0, block)
            return attempt.value
        try:
            async with LiveTurns(ENDPOINT, self.store, PREFIX, **options) as turns:
                attempt.live_turns = turns
                try:
                    for k in range(len(attempt.turns)):
                        await self._turn(attempt, k, turns.following(turn_id(k)))
                except BaseException as exc:
                    attempt.turns_exc = exc
                    raise
        finally:
            attempt.turns_exit = self.mark()
        return attempt.value

    async def _turn(self, attempt: Attempt, k: int, block: Any) -> None:
        record = attempt.turns[k]
        record.started = True
        with anyio.CancelScope() as scope:
            record.scope = scope
            try:
                async with block as turn:
                    await self._body(attempt, k, turn)
            except BaseException as exc:
                self._exited(attempt, record, exc)
                if record.script.ending.escapes or exc is not record.error:
                    raise
            else:
                self._exited(attempt, record, None)
        record.went_on = True

    def _exited(self, attempt: Attempt, record: TurnRecord, exc: BaseException | None) -> None:
        record.block_exit = exc
        record.exited = self.mark()
        follower_ = attempt.followers.get(task_id(record.index))
        record.alive_at_exit = follower_.alive if follower_ is not None else 0

    async def _body(self, attempt: Attempt, k: int, turn: Any) -> None:
        record = attempt.turns[k]
        script = record.script
        record.entered = self.mark()
        try:
            for action in script.actions:
                await self._act(attempt, k, turn, action)
            second = self.script.second_cancel if attempt.final else None
            if second is not None and second.turn == k and second.anchor == "with_end":
                self._cancel_second(attempt)
            if script.ending.how == "raises":
                raise record.error
            if script.ending.how == "cancelled":
                scope = attempt.step_scope if script.ending.escapes else record.scope
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

    async def _act(self, attempt: Attempt, k: int, turn: Any, action: Action) -> None:
        tid = task_id(k)
        task = self.agent.tasks[tid]
        record = attempt.turns[k]
        match action:
            case Sleep(seconds):
                await anyio.sleep(seconds)
            case Follow():
                turn.follow(tid)
                record.followed = True
            case Report(state):
                turn.ended(state)
                record.reported = state
            case Ticks(count):
                for _ in range(count):
                    await anyio.lowlevel.checkpoint()
            case Until():
                await self._until(attempt, k, action)
            case Publish(count):
                task.grow(tid, count)
            case Finish(state):
                task.finish(state)
            case AgentAnswers(answers):
                task.pushed.extend(answers)
            case StoreAnswers(kind, ops):
                self.store.queues[kind][:0] = ops
            case HandOff(whom):
                if whom == "turn" or attempt.live_turns is None:
                    turn.hand_off()
                else:
                    attempt.live_turns.hand_off()
                record.handed_off = True
            case _:
                raise AssertionError(action)

    async def _until(self, attempt: Attempt, k: int, until: Until) -> None:
        """Wait for something of this attempt: what earlier attempts did does not count."""
        tid, prefix = task_id(k), live(k)

        def reads() -> list[ReadRecord]:
            return [r for r in attempt.reads_of(k) if r.end is not None]

        def chunks(landed: bool) -> int:
            return sum(
                1
                for p in attempt.puts
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
                    tid in attempt.followers and attempt.followers[tid].ended is not None
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

    def _cancel_second(self, attempt: Attempt) -> None:
        if attempt.step_exit is not None:
            return  # the step is over: nothing left to cancel
        if attempt.second_cancelled is None:
            attempt.second_cancelled = self.mark()
        assert attempt.second_scope is not None
        attempt.second_scope.cancel()

    async def _second_cancel(self, attempt: Attempt, second: SecondCancel) -> None:
        if second.anchor == "with_end" or second.turn >= len(attempt.turns):
            return
        record = attempt.turns[second.turn]
        if second.anchor == "end_mark":
            key = turn_keys(second.turn).end
            await self.until(lambda: any(p.key == key for p in attempt.puts), max_wait=math.inf)
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
        self._cancel_second(attempt)

    # --- reading back ----------------------------------------------------------------

    def reads_of(self, k: int) -> list[ReadRecord]:
        """Every read of turn ``k``'s task, by any attempt."""
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
        several = len(self.attempts) > 1
        for attempt in self.attempts:
            who = f"{attempt.name}: " if several else ""
            for t in attempt.turns:
                for label, stamp in (
                    ("entered", t.entered),
                    (f"body ended: {short(t.body_exit)}", t.body_end),
                    (f"block exited: {short(t.block_exit)}", t.exited),
                ):
                    if stamp is not None:
                        line = f"{stamp.at:9.3f} #{stamp.seq} {who}{turn_id(t.index)} {label}"
                        lines.append((stamp.seq, line))
            resumes = " (resume=True)" if attempt.script.resume else ""
            how = "ends the step" if attempt.final else f"stops: {attempt.script.stopped}"
            for label, stamp in (
                (f"{attempt.name} starts{resumes}, {how}" if several else "", attempt.start),
                ("second cancel", attempt.second_cancelled),
                ("turns exited", attempt.turns_exit),
                (f"step exited: {attempt.outcome}", attempt.step_exit),
            ):
                if stamp is not None and label:
                    lines.append((stamp.seq, f"{stamp.at:9.3f} #{stamp.seq} {who}{label}"))
        lines.sort()
        extra = [f"released: {self.release_reason}"] if self.released else []
        return "\n".join([line for _, line in lines] + extra)
