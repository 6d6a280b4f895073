"""The world one property example runs in: a step played from its script on a virtual clock.

:meth:`World.main` runs the step's turns against the world's fake agent and
store, plays each turn's body action by action, places the second cancel, and
records when each body ended and each block exited. After the step it keeps the
loop running (:data:`LINGER_SECONDS`), so that a follower left behind shows up
as a read the checks can see. :meth:`World.timeline` prints it all in order.
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
from follower._exchange import POOL_WAIT_SECONDS
from follower._follow import retry_delay
from follower._turns import CLEANUP_SECONDS, CLEANUP_WRITE_SECONDS

from .fakes import WorldAgent, WorldStore
from .records import (
    FollowerRecord,
    Outcome,
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
    Finish,
    Follow,
    Publish,
    Report,
    SecondCancel,
    Sleep,
    StepScript,
    StoreAnswers,
    Ticks,
    Until,
    live,
    task_id,
    turn_id,
    turn_keys,
)

# After the step, the test keeps the loop running this long: a follower left
# behind would read again within it (the longest backoff is 60 s).
LINGER_SECONDS = 130.0


class World:
    """Everything one example runs with, and everything it recorded."""

    def __init__(self, script: StepScript, backend: str) -> None:
        self.script = script
        self.backend = backend
        self.seq = 0
        self.agent = WorldAgent(self, {task_id(k): t.task for k, t in enumerate(script.turns)})
        self.store = WorldStore(self, script.store)
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
            key = turn_keys(second.turn).end
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
                (f"body ended: {short(t.body_exit)}", t.body_end),
                (f"block exited: {short(t.block_exit)}", t.exited),
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
