"""The six properties, checked on what one example's world recorded.

:func:`tests.properties.run.run_step` runs a script's attempts one after the
other, in a fresh event loop on a fresh virtual clock, and records everything
the agent, the store and the followers saw; then :func:`check_properties`
asserts the six properties of the issue, in every attempt and, for what the
store keeps, across the attempts that share it:

1. the block exits within a bound computed from the script: after its body
   ends, ``drain_seconds`` (if the body returned), plus 5 s if the turn linked
   from an earlier one (a link write in flight, shielded and bounded), plus the
   10 s cleanup bound; ``LiveTurns`` exits within 5 s of its last turn;
2. no follower is alive after its block exits, and no read starts after it;
3. the step's outcome comes out unchanged (a stopped attempt's too: it hands
   off, then returns, raises or is cancelled as scripted);
4. the stored chunks are exactly the first N events the agent served: across
   attempts contiguous from 0, no event stored twice, each chunk the sink of
   the attempt that wrote it accepted, a resumed turn read on from where its
   chunks end; all after the turn's ``task.json`` (written once, naming the
   turn's task);
5. each followed turn has at most one ``end.json``, written by the attempt
   that ended the turn (never by one that handed it off or found it ended;
   none if every attempt handed it off): state by the priority rule, ``next``
   = N, ``complete`` exactly when that attempt's follower handed over the
   terminal page, written after its chunks; the links are in order, each
   ``next.json`` with one content, the null one only by the last attempt;
6. after stop, at most one failed read per follower (and none at all once the
   body raised or was cancelled: followers are cancelled at once).

Each property fails with its own exception class (:mod:`.violations`), so
Hypothesis tells them apart and a test can say which property caught a broken
follower.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from follower import FollowerError, TrajectoryState
from follower._format._layout import parse_chunk_name
from follower._options import DEFAULT_WRITER_HEARTBEAT_SECONDS
from follower._turns._endings import CLEANUP_SECONDS, CLEANUP_WRITE_SECONDS
from follower.lowlevel import TrajectoryBatch

from .records import NOT_RUN, PutRecord, Stamp, TurnRecord
from .scripts import ENDPOINT, EPS, task_id, turn_id, turn_keys
from .violations import (
    ChunksWrong,
    EndMarkComplete,
    EndMarkCount,
    EndMarkMissing,
    EndMarkOrder,
    EndMarkState,
    EndMarkWriter,
    ExitTooLate,
    FollowerOutlivedBlock,
    HarnessError,
    LinkWrong,
    OutcomeChanged,
    PropertyViolation,
    ResumedElsewhere,
    RetriedAfterStop,
    StoredTwice,
    TaskMarkWrong,
)
from .world import Attempt, World


def find_violations(world: World) -> list[PropertyViolation]:
    """The first violation each check finds, in the order of the properties."""
    for attempt in world.attempts:
        if attempt.outcome is None or attempt.step_exit is None:
            if world.crash is not None:
                raise HarnessError("the run crashed") from world.crash
            raise HarnessError(f"{attempt.name} did not run to its end")
    checks: list[Callable[[], None]] = [lambda: _check_released(world)]
    for attempt in world.attempts:
        checks += [
            functools.partial(_check_exit_bound, attempt),
            functools.partial(_check_no_follower_left, attempt),
            functools.partial(_check_outcome, attempt),
        ]
    turns = range(len(world.script.turns))
    checks += [functools.partial(_check_chunks, world, k) for k in turns]
    checks += [functools.partial(_check_end_mark, world, k) for k in turns]
    checks.append(lambda: _check_links(world))
    checks += [functools.partial(_check_reads_after_stop, a) for a in world.attempts]
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


def _who(attempt: Attempt, k: int) -> str:
    """Turn ``k`` as a message names it: with its attempt, when the step ran more than once."""
    if len(attempt.world.attempts) == 1:
        return turn_id(k)
    return f"{turn_id(k)} ({attempt.name})"


def _runs(world: World, k: int) -> list[tuple[Attempt, TurnRecord]]:
    """Turn ``k`` in each attempt that started it."""
    return [(a, r) for a in world.attempts if (r := a.record(k)) is not None]


def _puts_at(puts: list[PutRecord], key: str) -> list[PutRecord]:
    return [p for p in puts if p.key == key]


def _landed_before(put: PutRecord, attempt: Attempt) -> bool:
    assert attempt.start is not None
    return put.outcome == "stored" and put.end is not None and put.end.seq < attempt.start.seq


def _linked(attempt: Attempt, record: TurnRecord) -> bool:
    """Whether the turn's follow() linked it from an earlier turn (a write in its group)."""
    return (
        not attempt.world.script.plain
        and record.followed
        and any(t.followed for t in attempt.turns[: record.index])
    )


def _check_released(world: World) -> None:
    if world.released and world.release_reason != "the test is over":
        raise ExitTooLate(f"the test had to unstick the step: {world.release_reason}")


def _check_exit_bound(attempt: Attempt) -> None:
    drain_seconds = attempt.world.script.drain_seconds
    last_exit: Stamp | None = None
    for record in attempt.turns:
        if record.exited is None:
            continue
        last_exit = record.exited
        if record.body_end is None:
            continue
        returned = record.body_exit is None
        bound = (
            (drain_seconds if returned else 0.0)
            + (CLEANUP_WRITE_SECONDS if _linked(attempt, record) else 0.0)
            + CLEANUP_SECONDS
        )
        took = record.exited.at - record.body_end.at
        if took > bound + EPS:
            raise ExitTooLate(
                f"{_who(attempt, record.index)}'s block exited {took:.3f} s after its body "
                f"{'returned' if returned else 'ended'}; the bound is {bound:.3f} s"
            )
    if attempt.turns_exit is not None and last_exit is not None:
        took = attempt.turns_exit.at - last_exit.at
        # Its null link, and first the end marks of the stored turns past its last (shared bound).
        ends, _ = _exit_plan(attempt)
        bound = min(CLEANUP_SECONDS, CLEANUP_WRITE_SECONDS * (1 + len(ends)))
        if took > bound + EPS:
            raise ExitTooLate(
                f"LiveTurns exited {took:.3f} s after its last turn; the bound is {bound:.3f} s"
            )


def _check_no_follower_left(attempt: Attempt) -> None:
    assert attempt.step_exit is not None
    for record in attempt.turns:
        if record.exited is None:
            continue
        who = _who(attempt, record.index)
        if record.alive_at_exit:
            raise FollowerOutlivedBlock(
                f"{record.alive_at_exit} follower(s) of {who} alive after its block exited"
            )
        late = [r for r in attempt.reads_of(record.index) if r.start.seq > record.exited.seq]
        if late:
            raise FollowerOutlivedBlock(
                f"{len(late)} read(s) of {task_id(record.index)} started after "
                f"{who}'s block exited, the first at {late[0].start.at:.3f}"
            )
    late = [r for r in attempt.reads if r.start.seq > attempt.step_exit.seq]
    if late:
        raise FollowerOutlivedBlock(
            f"{len(late)} read(s) started after the step ({attempt.name}) exited"
        )
    alive = {tid: f.alive for tid, f in attempt.followers.items() if f.alive}
    if alive:
        raise FollowerOutlivedBlock(f"followers alive after the step ({attempt.name}): {alive}")


def _check_outcome(attempt: Attempt) -> None:
    world = attempt.world
    assert attempt.outcome is not None
    second = attempt.second_cancelled
    escaped: TurnRecord | None = None
    for record in attempt.turns:
        if not record.started or record.exited is None:
            continue
        who = _who(attempt, record.index)
        body, block = record.body_exit, record.block_exit
        disturbed = second is not None and (
            record.body_end is None or second.seq < record.body_end.seq
        )
        if body is NOT_RUN:
            # Entering the block was cancelled (the second cancel): nothing else to check.
            if not _cancel(world, block):
                raise OutcomeChanged(f"{who}'s block raised {block!r} before its body ran")
            escaped = record
            break
        expected_how = record.script.ending.how
        if not disturbed:
            how = "returns" if body is None else ("cancelled" if _cancel(world, body) else "raises")
            if how != expected_how or (how == "raises" and body is not record.error):
                if isinstance(body, FollowerError) and body is not record.error:
                    # A library call of the body's (follow()) raised: the step's outcome changed.
                    raise OutcomeChanged(f"{who}'s body: the library raised {body!r}")
                raise HarnessError(f"{who}'s body ended with {body!r}")
        if body is None:
            assert record.exited is not None
            cancelled_from_outside = second is not None and second.seq < record.exited.seq
            if block is not None and not (cancelled_from_outside and _cancel(world, block)):
                raise OutcomeChanged(f"{who}'s body returned, but its block raised {block!r}")
        elif _cancel(world, body):
            if not _cancel(world, block):
                raise OutcomeChanged(
                    f"{who}'s body was cancelled, but its block raised "
                    f"{block!r} (the cancel must propagate as the backend's cancel)"
                )
        elif block is not body:
            raise OutcomeChanged(f"{who}'s body raised {body!r}, but its block raised {block!r}")
        if not record.went_on:
            escaped = record
            break
    outcome = attempt.outcome
    inner, outer = attempt.caught_by
    step = f"the step ({attempt.name})" if len(world.attempts) > 1 else "the step"
    if escaped is None:
        if outcome.how == "returned":
            if outcome.value is not attempt.value:
                raise OutcomeChanged(f"{step} returned {outcome.value!r}, not its own value")
        elif not (outcome.how == "cancelled" and second is not None and outer):
            raise OutcomeChanged(f"{step} should have returned; it ended {outcome}")
    elif _cancel(world, escaped.block_exit):
        if outcome.how != "cancelled" or not (inner or outer):
            raise OutcomeChanged(f"{step} should have been cancelled; it ended {outcome}")
    elif outcome.how != "raised" or outcome.value is not escaped.block_exit:
        raise OutcomeChanged(
            f"{step} should have raised {escaped.block_exit!r} as itself; it ended {outcome}"
        )


def _chunks(world: World, k: int) -> list[tuple[int, int, PutRecord]]:
    """Turn ``k``'s chunks that landed, by any attempt, in order of position."""
    keys = turn_keys(k)
    found = []
    for put in world.store.puts:
        if put.outcome == "stored" and put.kind == "chunk" and put.key.startswith(keys.live):
            parsed = parse_chunk_name(keys.names([put.key])[0])
            assert parsed is not None, put.key
            found.append((*parsed, put))
    return sorted(found, key=lambda c: (c[0], c[1]))


def _check_chunks(world: World, k: int) -> None:
    keys, name = turn_keys(k), turn_id(k)
    runs = _runs(world, k)
    for attempt, record in runs:
        if not record.followed:
            own = [
                p.key
                for p in attempt.puts
                if p.outcome == "stored"
                and p.key.startswith(keys.live)
                and p.key != keys.next
                and not (p.key == keys.end and k in _exit_plan(attempt)[0])
            ]
            if own:
                raise ChunksWrong(f"{_who(attempt, k)} never followed a task but stored {own}")
    if not any(record.followed for _, record in runs):
        return
    _check_task_mark(world, k)
    _check_meta(world, k)
    task = world.agent.tasks[task_id(k)]
    served = {(r.after, r.next) for r in world.reads_of(k) if r.next is not None}
    chunks = _chunks(world, k)
    cursor = 0
    for after, nxt, put in chunks:
        if after < cursor:
            raise StoredTwice(
                f"{name}: chunk {after}-{nxt} landed with {cursor} events stored: "
                f"events {after}..{min(nxt, cursor) - 1} were stored again"
            )
        if after > cursor:
            raise ChunksWrong(
                f"{name}: chunk {after}-{nxt} after {cursor} events: "
                f"events {cursor}..{after - 1} are lost"
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
    refused = [p for p in world.store.puts if p.key.startswith(keys.live) and p.kind == "chunk"]
    refused = [p for p in refused if p.outcome == "exists"]
    if refused:
        raise StoredTwice(f"{name}: {refused[0].key} was written again with other events")
    for attempt, record in runs:
        if not record.followed:
            continue
        who = _who(attempt, k)
        follower_ = attempt.followers.get(task_id(k))
        accepted = [(b.after, b.next) for b in follower_.accepted if b.events] if follower_ else []
        stored = [(after, nxt) for after, nxt, put in chunks if attempt.within(put.start)]
        if stored != accepted:
            raise ChunksWrong(f"{who}: chunks {stored} stored, but the sink accepted {accepted}")
        # Resuming continues after the last stored chunk: nothing stored is read again.
        reads = attempt.reads_of(k)
        before = max((nxt for _, nxt, put in chunks if _landed_before(put, attempt)), default=0)
        if reads and reads[0].after != before:
            raise ResumedElsewhere(
                f"{who} found {before} events stored, but its follower read from "
                f"after={reads[0].after}"
            )


def _check_task_mark(world: World, k: int) -> None:
    """``task.json`` lands once, names the turn's task, and lands before any chunk is written."""
    keys, name = turn_keys(k), turn_id(k)
    puts = _puts_at(world.store.puts, keys.task)
    landed = [p for p in puts if p.outcome == "stored"]
    if len(landed) > 1:
        raise TaskMarkWrong(f"{name}'s task.json landed {len(landed)} times")
    if landed:
        first = landed[0]
        assert first.end is not None
        mark = json.loads(first.body)
        expected = {
            "task_id": task_id(k),
            "endpoint": ENDPOINT,
            "heartbeat_seconds": DEFAULT_WRITER_HEARTBEAT_SECONDS,
        }
        if (
            set(mark) != {*expected, "started_at"}
            or {field: mark[field] for field in expected} != expected
            or not _is_utc_instant(mark["started_at"])
        ):
            raise TaskMarkWrong(f"{name}'s task.json is {mark}, expected {expected} and a time")
        again = [p for p in puts if p.start.seq > first.end.seq]
        if again:
            raise TaskMarkWrong(f"{name}'s task.json was written again after it landed")
    # The follower writes task.json first: a chunk or meta.json before it would belong to no task.
    others = [p for p in world.store.puts if p.key.startswith(keys.live) and p.kind in _DATA]
    if others and not (
        landed and landed[0].end is not None and landed[0].end.seq < others[0].start.seq
    ):
        raise TaskMarkWrong(f"{name} wrote {others[0].key} before its task.json landed")


_DATA = ("chunk", "meta")


def _is_utc_instant(value: object) -> bool:
    if not isinstance(value, str) or not value.endswith("Z"):
        return False
    try:
        return datetime.fromisoformat(value[:-1] + "+00:00").tzinfo is not None
    except ValueError:
        return False


def _check_meta(world: World, k: int) -> None:
    """``meta.json`` is written once in all (a resumed turn keeps it), naming the task's format."""
    keys, name = turn_keys(k), turn_id(k)
    puts = _puts_at(world.store.puts, keys.meta)
    fmt = world.agent.tasks[task_id(k)].script.format
    if fmt is None and puts:
        raise ChunksWrong(f"{name}'s task names no format, but meta.json was written")
    landed = [p for p in puts if p.outcome == "stored"]
    if len(landed) > 1 or any(p.outcome == "exists" for p in puts):
        raise ChunksWrong(f"{name}'s meta.json was written again after it landed")
    if landed and json.loads(landed[0].body) != {"format": fmt}:
        raise ChunksWrong(f"{name}'s meta.json is {json.loads(landed[0].body)}, not {fmt!r}")


def _last_handed_over(attempt: Attempt, record: TurnRecord) -> TrajectoryBatch | None:
    """The terminal page the turn's follower handed over (its sink returned), if it did."""
    follower_ = attempt.followers.get(task_id(record.index))
    last = [b for b in follower_.accepted if b.last] if follower_ else []
    return last[-1] if last else None


def _expected_state(attempt: Attempt, record: TurnRecord) -> TrajectoryState:
    world = attempt.world
    last = _last_handed_over(attempt, record)
    if last is not None:
        return last.state
    if record.reported is not None:
        return TrajectoryState.from_task_state(record.reported)
    if _cancel(world, record.body_exit) or (
        record.body_exit is None and _cancel(world, record.block_exit)
    ):
        return TrajectoryState.CANCELED
    return TrajectoryState.FAILED


def _check_landed_once(attempts: list[PutRecord], what: str) -> PutRecord | None:
    """The object is written once; missing only if every attempt to write it was refused."""
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


def _check_end_mark(world: World, k: int) -> None:
    key, name = turn_keys(k).end, turn_id(k)
    every = _puts_at(world.store.puts, key)
    landed = [p for p in every if p.outcome == "stored"]
    if len(landed) > 1:
        raise EndMarkMissing(f"{name}'s end.json landed {len(landed)} times")
    for attempt in world.attempts:
        ends, _ = _exit_plan(attempt)
        if k in ends:
            _check_exit_end_mark(attempt, k, ends[k])
        elif attempt.record(k) is None and _puts_at(attempt.puts, key):
            raise EndMarkWriter(f"{_who(attempt, k)} never started, but wrote end.json")
    for attempt, record in _runs(world, k):
        who = _who(attempt, k)
        puts = _puts_at(attempt.puts, key)
        if k in _exit_plan(attempt)[0]:
            continue  # checked above: LiveTurns' exit ended it
        if not record.followed:
            if puts:
                raise EndMarkMissing(f"{who} never followed a task but wrote end.json")
            continue
        if record.exited is None:
            raise HarnessError(f"{who} followed but never exited")
        # Only the attempt that ends the turn marks it: not one that handed it off, and
        # not one that found it marked (a resumed turn with its end mark is done).
        ended_before = any(_landed_before(p, attempt) for p in every)
        if record.handed_off or ended_before:
            if puts:
                why = "handed the turn off" if record.handed_off else "found it marked already"
                raise EndMarkWriter(f"{who} {why}, but wrote end.json: {puts[0].body!r}")
            continue
        end = _check_landed_once(puts, f"{who}'s end.json")
        if end is not None:
            _check_end_mark_content(attempt, record, end)


def _exit_plan(attempt: Attempt) -> tuple[dict[int, dict[str, Any]], int | None]:
    """What ``LiveTurns``' exit of ``attempt`` writes, by the stored chain it finds.

    Only an attempt that ends the step for good, with a followed turn, writes.
    From its last followed turn it follows the stored links (an earlier attempt
    may have got further): each later turn without end.json (an empty one too)
    gets an end mark, ``complete`` false, ``next`` its contiguous stored events,
    ``canceled`` if the step was stopped from outside (a cancel, Ctrl-C), else
    ``failed``. The null link goes on the last turn of that chain. Returns those
    end marks by turn, and the turn of the null link (``None``: no link).
    """
    world = attempt.world
    followed = [r for r in attempt.turns if r.followed]
    if world.script.plain or not attempt.final or not followed or followed[-1].handed_off:
        return {}, None
    exits = [r.exited.seq for r in attempt.turns if r.exited is not None]
    return _walk_stored_chain(world, followed[-1].index, max(exits), attempt.turns_exc)


def _walk_stored_chain(
    world: World, last: int, at: int, exc: BaseException | None
) -> tuple[dict[int, dict[str, Any]], int | None]:
    def stored(k: int) -> list[PutRecord]:
        prefix = turn_keys(k).live
        return [
            p
            for p in world.store.puts
            if p.outcome == "stored" and p.end is not None and p.end.seq < at
            if p.key.startswith(prefix)
        ]

    state = (
        TrajectoryState.CANCELED if _stopped_from_outside(world, exc) else TrajectoryState.FAILED
    )
    ends: dict[int, dict[str, Any]] = {}
    k, seen = last, {last}
    while True:
        link = [p for p in stored(k) if p.key == turn_keys(k).next]
        nxt = json.loads(link[0].body)["turn"] if link else None
        if nxt is None or _turn_index(nxt) in seen:
            return ends, k
        k = _turn_index(nxt)
        seen.add(k)
        objects = stored(k)
        if not any(p.key == turn_keys(k).end for p in objects):
            chunks = sorted(
                parse_chunk_name(turn_keys(k).names([p.key])[0]) or (0, 0)
                for p in objects
                if p.kind == "chunk"
            )
            reached = 0
            for after, next_ in chunks:
                if after > reached:
                    break
                reached = max(reached, next_)
            ends[k] = {"state": state.value, "next": reached, "complete": False}


def _turn_index(turn: str) -> int:
    return int(turn.removeprefix("turn-")) - 1


def _stopped_from_outside(world: World, exc: BaseException | None) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_stopped_from_outside(world, e) for e in exc.exceptions)
    return isinstance(exc, (world.cancelled_class, KeyboardInterrupt))


def _check_exit_end_mark(attempt: Attempt, k: int, expected: dict[str, Any]) -> None:
    """A turn LiveTurns' exit ends: one end.json, incomplete, after the turn's last chunk."""
    who = f"{_who(attempt, k)}, ended by LiveTurns' exit,"
    end = _check_landed_once(_puts_at(attempt.puts, turn_keys(k).end), f"{who} end.json")
    if end is None:
        return
    assert end.end is not None
    mark = json.loads(end.body)
    if mark.get("next") != expected["next"]:
        raise EndMarkCount(f"{who} end.json is {mark}, expected {expected}")
    if mark.get("complete") != expected["complete"]:
        raise EndMarkComplete(f"{who} end.json is {mark}, expected {expected}")
    if mark != expected:
        raise EndMarkState(f"{who} end.json is {mark}, expected {expected}")
    for after, nxt, put in _chunks(attempt.world, k):
        assert put.end is not None
        if put.end.seq > end.end.seq:
            raise EndMarkOrder(f"{who} chunk {after}-{nxt} landed after its end.json")


def _check_end_mark_content(attempt: Attempt, record: TurnRecord, end: PutRecord) -> None:
    world, k = attempt.world, record.index
    who = _who(attempt, k)
    assert end.end is not None
    chunks = _chunks(world, k)
    stored_next = chunks[-1][1] if chunks else 0
    expected = {
        "state": _expected_state(attempt, record).value,
        "next": stored_next,
        "complete": _last_handed_over(attempt, record) is not None,
    }
    mark = json.loads(end.body)
    if mark.get("next") != expected["next"]:
        raise EndMarkCount(f"{who}'s end.json is {mark}, expected {expected}")
    if mark.get("complete") != expected["complete"]:
        raise EndMarkComplete(f"{who}'s end.json is {mark}, expected {expected}")
    if mark != expected:
        raise EndMarkState(f"{who}'s end.json is {mark}, expected {expected}")
    task = world.agent.tasks[task_id(k)]
    if mark["complete"] and not (
        task.state.is_terminal
        and mark["state"] == task.state.value
        and mark["next"] == len(task.events)
    ):
        raise EndMarkComplete(
            f"{who}'s end.json is {mark}, but the task is {task.state.value} with "
            f"{len(task.events)} events"
        )
    for after, nxt, put in chunks:
        assert put.end is not None
        if put.end.seq > end.end.seq:
            raise EndMarkOrder(f"{who}'s chunk {after}-{nxt} landed after its end.json")


def _check_links(world: World) -> None:
    turns = range(len(world.script.turns))
    for attempt in world.attempts:
        for k in turns:
            record = attempt.record(k)
            followed = record is not None and record.followed
            if k == _exit_plan(attempt)[1]:
                continue  # the null link, on the stored chain's last turn: checked below
            if (world.script.plain or not followed) and _puts_at(attempt.puts, turn_keys(k).next):
                raise LinkWrong(
                    f"{_who(attempt, k)} is no followed turn of LiveTurns, "
                    "but next.json was written for it"
                )
    if world.script.plain:
        return
    for attempt in world.attempts:
        _check_attempt_links(attempt)


def _check_attempt_links(attempt: Attempt) -> None:
    followed = [t for t in attempt.turns if t.followed]
    for i, record in enumerate(followed):
        who = _who(attempt, record.index)
        key = turn_keys(record.index).next
        puts = _puts_at(attempt.puts, key)
        # A link written again (a resumed step) is written with the content it has.
        refused = [p for p in puts if p.outcome == "exists"]
        if refused:
            held = attempt.world.store.landed(key)
            raise LinkWrong(
                f"{who} wrote next.json {refused[0].body.decode()} over "
                f"{held.body.decode() if held else None}: the store refused it"
            )
        if i + 1 < len(followed):
            nxt: str | None = turn_id(followed[i + 1].index)
        elif attempt.final:
            nxt = None
            chain_last = _exit_plan(attempt)[1]
            if chain_last is not None and chain_last != record.index:
                # An earlier attempt linked on from here: the null link ends the stored chain.
                if puts:
                    raise LinkWrong(
                        f"{who} links on to {turn_id(chain_last)}'s stored chain, "
                        f"but its next.json was written: {puts[0].body!r}"
                    )
                who = f"{_who(attempt, chain_last)}, the stored chain's last turn,"
                puts = _puts_at(attempt.puts, turn_keys(chain_last).next)
                if any(p.outcome == "exists" for p in puts):
                    raise LinkWrong(f"{who} null link was refused: another link is stored")
        else:
            # The step's last followed turn of an attempt that handed off: no null link.
            if puts:
                raise LinkWrong(f"{who} was handed off, but its next.json was written")
            continue
        put = _check_landed_once(puts, f"{who}'s next.json")
        if put is not None and json.loads(put.body) != {"turn": nxt}:
            raise LinkWrong(
                f"{who}'s next.json is {json.loads(put.body)}, expected {{'turn': {nxt!r}}}"
            )


def _check_reads_after_stop(attempt: Attempt) -> None:
    for record in attempt.turns:
        if not record.followed or record.body_end is None:
            continue
        who = _who(attempt, record.index)
        reads = attempt.reads_of(record.index)
        stop = record.body_end
        if record.body_exit is not None:
            # Raised or cancelled: followers are cancelled at once, no new read.
            late = [r for r in reads if r.start.at > stop.at + EPS]
            if late:
                raise RetriedAfterStop(
                    f"{who}'s body ended at {stop.at:.3f}, yet its "
                    f"follower started a read at {late[0].start.at:.3f}"
                )
            continue
        failed = [r for r in reads if r.failed and r.end is not None and r.end.seq > stop.seq]
        if len(failed) > 1:
            raise RetriedAfterStop(
                f"{who}: {len(failed)} failed reads after stop "
                f"(at {', '.join(f'{r.end.at:.3f}' for r in failed if r.end)})"
            )
        if failed:
            assert failed[0].end is not None
            after = [r for r in reads if r.start.seq > failed[0].end.seq]
            if after:
                raise RetriedAfterStop(
                    f"{who}: a read started at {after[0].start.at:.3f}, "
                    f"after the read that failed after stop"
                )


def describe(world: World) -> list[str]:
    """Labels of what an example exercised, for ``--hypothesis-show-statistics``."""
    labels = []
    if len(world.attempts) > 1:
        labels.append(f"{len(world.attempts)} attempts")
    if not world.script.finished:
        labels.append("every attempt handed off")
    for attempt in world.attempts:
        how = attempt.outcome.how if attempt.outcome else "did not end"
        stopped = attempt.script.stopped
        if stopped is None:
            labels.append(f"step {how}")
        else:
            labels.append(f"an attempt handed off ({stopped.whom}) and {how}")
        for record in attempt.turns:
            if not record.started or record.body_exit is NOT_RUN:
                continue
            labels += _describe_turn(attempt, record)
    if any(a.second_cancelled is not None for a in world.attempts):
        labels.append(f"cancelled from outside ({world.script.second_cancel.anchor})")  # type: ignore[union-attr]
    if any(p.outcome in ("failed", "cancelled") for p in world.store.puts):
        labels.append("a store write failed or was cut")
    if len(world.script.turns) > 1:
        labels.append("several turns")
    return labels


def _describe_turn(attempt: Attempt, record: TurnRecord) -> list[str]:
    world = attempt.world
    body = record.body_exit
    how = "returned" if body is None else ("cancelled" if _cancel(world, body) else "raised")
    labels = [f"a turn {'followed' if record.followed else 'did not follow'} and {how}"]
    if not record.followed:
        return labels
    mark = world.object(turn_keys(record.index).end)
    labels.append(f"end mark: {mark['state'] if mark else 'missing'}")
    if mark and mark.get("complete"):
        labels.append("end mark: complete")
    if attempt.script.resume:
        reads = attempt.reads_of(record.index)
        if not reads:
            labels.append("a resumed turn read nothing")
        elif reads[0].after:
            labels.append("a resumed turn read on after its stored events")
    if record.body_end is not None:
        after_stop = [
            r
            for r in attempt.reads_of(record.index)
            if r.end is not None and r.end.seq > record.body_end.seq
        ]
        if any(r.failed for r in after_stop):
            labels.append("a read failed after the body ended")
        if any(r.outcome == "last" for r in after_stop):
            labels.append("the last page was read after the body ended")
    return labels
