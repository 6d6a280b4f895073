"""The six properties, checked on what one example's world recorded.

:func:`tests.properties.run.run_step` runs a script in a fresh event loop on a
fresh virtual clock and records everything the agent, the store and the
followers saw; then :func:`check_properties` asserts the six properties of the
issue:

1. the block exits within a bound computed from the script: after its body
   ends, ``drain_seconds`` (if the body returned), plus 5 s if the turn linked
   from an earlier one (a link write in flight, shielded and bounded), plus the
   10 s cleanup bound; ``LiveTurns`` exits within 5 s of its last turn;
2. no follower is alive after its block exits, and no read starts after it;
3. the step's outcome comes out unchanged;
4. the stored chunks are exactly the first N events the agent served, after
   the turn's ``task.json`` (written once, naming the turn's task);
5. each followed turn has exactly one ``end.json`` (state by the priority rule,
   ``next`` = N, ``complete`` exactly when the terminal page was handed over,
   written after its chunks), and the links are in order;
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

from follower import TrajectoryBatch, TrajectoryState
from follower._layout import parse_chunk_name
from follower._turns import CLEANUP_SECONDS, CLEANUP_WRITE_SECONDS

from .records import NOT_RUN, PutRecord, Stamp, TurnRecord
from .scripts import ENDPOINT, EPS, live, task_id, turn_id, turn_keys
from .violations import (
    ChunksWrong,
    EndMarkComplete,
    EndMarkCount,
    EndMarkMissing,
    EndMarkOrder,
    EndMarkState,
    ExitTooLate,
    FollowerOutlivedBlock,
    HarnessError,
    LinkWrong,
    OutcomeChanged,
    PropertyViolation,
    RetriedAfterStop,
    TaskMarkWrong,
)
from .world import World


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
    keys = turn_keys(k)
    found = []
    for put in world.store.puts:
        if put.outcome == "stored" and put.kind == "chunk" and put.key.startswith(keys.live):
            parsed = parse_chunk_name(keys.names([put.key])[0])
            assert parsed is not None, put.key
            found.append((*parsed, put))
    return sorted(found, key=lambda c: (c[0], c[1]))


def _check_chunks(world: World, record: TurnRecord) -> None:
    k = record.index
    name = turn_id(k)
    stored = [
        p.key for p in world.store.puts if p.outcome == "stored" and p.key.startswith(live(k))
    ]
    if not record.followed:
        own = [key for key in stored if key != turn_keys(k).next]
        if own:
            raise ChunksWrong(f"{name} never followed a task but stored {own}")
        return
    _check_task_mark(world, k)
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


def _check_task_mark(world: World, k: int) -> None:
    """``task.json`` lands once, names the turn's task, and lands before any chunk is written."""
    keys, name = turn_keys(k), turn_id(k)
    puts = _attempts(world, keys.task)
    landed = [p for p in puts if p.outcome == "stored"]
    if len(landed) > 1:
        raise TaskMarkWrong(f"{name}'s task.json landed {len(landed)} times")
    if landed:
        first = landed[0]
        assert first.end is not None
        mark = json.loads(first.body)
        expected = {"task_id": task_id(k), "endpoint": ENDPOINT}
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


def _last_handed_over(world: World, record: TurnRecord) -> TrajectoryBatch | None:
    """The terminal page the turn's follower handed over (its sink returned), if it did."""
    follower_ = world.followers.get(task_id(record.index))
    last = [b for b in follower_.accepted if b.last] if follower_ else []
    return last[-1] if last else None


def _expected_state(world: World, record: TurnRecord) -> TrajectoryState:
    last = _last_handed_over(world, record)
    if last is not None:
        return last.state
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
    key = turn_keys(k).end
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
    expected = {
        "state": _expected_state(world, record).value,
        "next": stored_next,
        "complete": _last_handed_over(world, record) is not None,
    }
    mark = json.loads(end.body)
    if mark.get("next") != expected["next"]:
        raise EndMarkCount(f"{turn_id(k)}'s end.json is {mark}, expected {expected}")
    if mark.get("complete") != expected["complete"]:
        raise EndMarkComplete(f"{turn_id(k)}'s end.json is {mark}, expected {expected}")
    if mark != expected:
        raise EndMarkState(f"{turn_id(k)}'s end.json is {mark}, expected {expected}")
    for after, nxt, put in chunks:
        assert put.end is not None
        if put.end.seq > end.end.seq:
            raise EndMarkOrder(f"{turn_id(k)}'s chunk {after}-{nxt} landed after its end.json")


def _check_links(world: World) -> None:
    followed = [t for t in world.turns if t.followed]
    for record in world.turns:
        key = turn_keys(record.index).next
        if (world.script.plain or not record.followed) and _attempts(world, key):
            raise LinkWrong(
                f"{turn_id(record.index)} is no followed turn of LiveTurns, "
                "but next.json was written for it"
            )
    if world.script.plain:
        return
    for i, record in enumerate(followed):
        key = turn_keys(record.index).next
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
            mark = world.object(turn_keys(record.index).end)
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
