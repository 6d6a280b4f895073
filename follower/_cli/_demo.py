"""``follower demo`` and ``follower agent``: the reference agent, served and followed.

The demo is the main job end to end: it serves the reference agent on loopback,
runs a step of several A2A turns against it (message, live trajectory, wait),
stores the trajectory (in a folder or a bucket), shows each turn as it is read
back from the store, and checks at the end that every turn is stored, linked and ended.
Then a second step of one turn follows a task by the agent's own stream
(``SubscribeToTask``), as any A2A agent that streams can be followed, and is
stored beside the first, as a step of its own: ``steps/<step>-streamed/``.

Plain arguments in, plain results out: the command line parses and checks its
arguments and turns errors into exit codes; nothing here knows of it.
"""

from __future__ import annotations

import secrets
import sys
import time
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import attrs

from .._a2a._client import connect_agent
from .._a2a._turn import run_a2a_turn
from .._errors import AgentCardError, FollowerError, InvalidArgumentError
from .._format._layout import EndMark, TurnKeys
from .._stores import FilesystemStore
from .._storing._reader import read_live_trajectory
from .._storing._stored_turn import read_stored_turn
from .._turns._step import LiveTurns
from ..testing import ReferenceAgent, TaskScript, serve_agent
from ._progress import TurnDisplay

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from typing import TextIO

    from .._a2a._client import A2AAgent, A2ATask
    from .._stores import ObjectStore
    from ..testing import Fault

DEMO_TASK_DEADLINE_SECONDS = 15.0
DEMO_A2A_TIMEOUT_SECONDS = 2.0
DEMO_DRAIN_SECONDS = 5.0
# A gone agent ends the demo's turn after this many failed tasks/get in a row.
DEMO_TASK_MAX_FAILURES = 5
# The streamed step: one turn, shown by this label.
STREAMED_TURN = "turn-1"
STREAMED_LABEL = "streamed"
# A watcher left waiting for a turn: how long it may take to read the turn's end.
WATCH_SECONDS = 5.0


def _reference_agent(
    events: int, interval_seconds: float, event_bytes: int = 64, outcome: str = "completed"
) -> ReferenceAgent:
    script = TaskScript(
        events=events, interval_seconds=interval_seconds, event_bytes=event_bytes, outcome=outcome
    )
    return ReferenceAgent(script=script)


async def serve_reference_agent(
    *,
    host: str,
    port: int,
    events: int,
    interval_seconds: float,
    event_bytes: int,
    final_state: str,
    fault: Fault | None = None,
    out: TextIO | None = None,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """``follower agent``: serve the reference agent on ``host:port`` until cancelled.

    Says where on ``out`` (stdout by default) and hands the base URL to
    ``task_status``. When it cannot listen there, the :class:`OSError` comes out
    of its task group's exception group.
    """
    out = sys.stdout if out is None else out
    agent = _reference_agent(events, interval_seconds, event_bytes, outcome=final_state)
    agent.fault = fault
    async with anyio.create_task_group() as tg:
        url = await tg.start(partial(serve_agent, agent, host=host, port=port))
        print(f"reference agent serving on {url}", file=out, flush=True)
        print(f"  card: {url}.well-known/agent-card.json", file=out, flush=True)
        task_status.started(url)


def new_step_prefix() -> str:
    """A demo step's own key prefix: ``steps/<time>-<random>/``, so that runs never mix."""
    return f"steps/{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}/"


def streamed_prefix(prefix: str) -> str:
    """The demo's streamed step's prefix, beside its first step's: ``steps/<step>-streamed/``."""
    return prefix.removesuffix("/") + "-streamed/"


def stored_where(store: ObjectStore, prefix: str) -> str:
    """Where ``prefix`` is in ``store``, for people: a folder, or ``s3://bucket/key-prefix``."""
    if isinstance(store, FilesystemStore):
        return str(store.root / prefix)
    # Looked up, not imported: only a loaded follower.s3 can have made an S3 store.
    s3 = sys.modules.get("follower._stores._s3")
    if s3 is not None and isinstance(store, s3.S3Store):
        return f"s3://{store.bucket}/{store.prefix}{prefix}"
    return f"{prefix} in {store!r}"


async def run_demo(
    store: ObjectStore,
    *,
    turns: int,
    events: int,
    interval_seconds: float,
    fault: Fault | None = None,
    fault_label: str | None = None,
    prefix: str | None = None,
    out: TextIO | None = None,
) -> bool:
    """``follower demo``: a step of ``turns`` turns against the reference agent, in ``store``.

    Its turns are followed by cursor reads of the agent's live trajectory; then a
    step of one turn (under :func:`streamed_prefix`) is followed by the agent's
    stream. ``fault`` makes the agent misbehave once the first step
    is under way; the header names it ``fault_label`` (by default its kind). The
    step is stored under ``prefix`` (by default a new :func:`new_step_prefix`).
    Shows both steps on ``out`` (stdout by default) and returns whether the
    summary found no problem.
    """
    if turns < 1 or events < 0 or interval_seconds < 0:
        raise InvalidArgumentError(
            "a demo needs turns >= 1 and events, interval_seconds >= 0, "
            f"not {turns}, {events}, {interval_seconds}"
        )
    if fault_label is None:
        fault_label = "none" if fault is None else fault.kind.value
    out = sys.stdout if out is None else out
    agent = _reference_agent(events, interval_seconds)
    if prefix is None:
        prefix = new_step_prefix()
    turn_ids = [f"turn-{n}" for n in range(1, turns + 1)]
    streamed = streamed_prefix(prefix)
    display = TurnDisplay(events, out)

    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_agent, agent)
        out.write(f"reference agent on {url} (fault: {fault_label})\n")
        out.write(f"storing the step under {stored_where(store, prefix)}\n")
        out.write(
            f"{len(turn_ids)} turns of {events} events, one every {interval_seconds} s, "
            "followed by cursor reads of the live trajectory\n"
        )
        out.write(
            "then a step of 1 turn followed by the agent's stream (SubscribeToTask), "
            f"stored under {stored_where(store, streamed)}\n"
        )
        out.flush()
        with display:
            if fault is not None:
                tg.start_soon(_inject_fault, agent, fault)
            cursor_read = await _shown(
                partial(_run_step, url, store, prefix, turn_ids, display),
                store,
                prefix,
                turn_ids[0],
                display,
            )
            streamed_run = await _shown(
                partial(_run_streamed_step, url, store, streamed, display),
                store,
                streamed,
                STREAMED_TURN,
                display,
                label=STREAMED_LABEL,
            )
            tg.cancel_scope.cancel()

    report = _Report()
    out.write(f"\nstep {cursor_read.outcome} in {cursor_read.seconds:.1f} s\n")
    await _summarise(store, prefix, turn_ids, report, out)
    out.write(f"streamed step {streamed_run.outcome} in {streamed_run.seconds:.1f} s\n")
    await _summarise(store, streamed, [STREAMED_TURN], report, out, label=STREAMED_LABEL)
    out.write(f"{report.verdict}\n")
    out.write(f"stored under {stored_where(store, prefix)}\n")
    out.flush()
    return report.ok


@attrs.frozen
class _StepRun:
    outcome: str
    seconds: float


async def _shown(
    step: Callable[[], Awaitable[None]],
    store: ObjectStore,
    prefix: str,
    first_turn: str,
    display: TurnDisplay,
    *,
    label: str | None = None,
) -> _StepRun:
    """Run ``step`` while a reader of the store shows its turns; how it ended, and its time."""
    started = anyio.current_time()
    outcome = "completed"
    async with anyio.create_task_group() as tg:
        watched = anyio.Event()
        tg.start_soon(_watch, store, prefix, first_turn, display, watched, label)
        try:
            await step()
        except Exception as exc:
            outcome = f"failed: {type(exc).__name__}: {exc}"
        seconds = anyio.current_time() - started
        # The watcher ends once it reads the last turn's null link; give it a moment,
        # unless the step stored nothing for it to read (it failed before its first turn).
        if await _stored_any(store, TurnKeys(prefix, first_turn)):
            with anyio.move_on_after(WATCH_SECONDS):
                await watched.wait()
        tg.cancel_scope.cancel()
    return _StepRun(outcome, seconds)


async def _run_step(
    url: str,
    store: ObjectStore,
    prefix: str,
    turn_ids: list[str],
    display: TurnDisplay,
) -> None:
    async with connect_agent(url, timeout_seconds=DEMO_A2A_TIMEOUT_SECONDS) as a2a:
        if a2a.trajectory_endpoint is None:
            raise AgentCardError(
                f"the reference agent's card at {url} offers no live trajectory", url=url
            )
        async with LiveTurns(
            a2a.trajectory_endpoint,
            store,
            prefix,
            poll_interval_seconds=0.1,
            drain_seconds=DEMO_DRAIN_SECONDS,
        ) as turns:
            context_id: str | None = None
            for number, turn_id in enumerate(turn_ids, 1):
                task = await _turn(a2a, turns, turn_id, number, context_id, store, prefix, display)
                context_id = task.context_id


async def _stored_any(store: ObjectStore, keys: TurnKeys) -> bool:
    try:
        return not (await read_stored_turn(store, keys)).is_empty
    except FollowerError:
        return True  # something is there; the summary says what is wrong with it


async def _run_streamed_step(
    url: str, store: ObjectStore, prefix: str, display: TurnDisplay
) -> None:
    """A step of one turn whose task is followed by the agent's stream (asked for by name)."""
    async with connect_agent(url, timeout_seconds=DEMO_A2A_TIMEOUT_SECONDS, via="stream") as a2a:
        source = a2a.task_source
        assert source is not None  # a stream is never refused: it is tried when asked for
        async with LiveTurns(
            source, store, prefix, poll_interval_seconds=0.1, drain_seconds=DEMO_DRAIN_SECONDS
        ) as turns:
            await _turn(a2a, turns, STREAMED_TURN, 1, None, store, prefix, display, STREAMED_LABEL)


async def _turn(
    a2a: A2AAgent,
    turns: LiveTurns,
    turn_id: str,
    number: int,
    context_id: str | None,
    store: ObjectStore,
    prefix: str,
    display: TurnDisplay,
    label: str | None = None,
) -> A2ATask:
    try:
        return await run_a2a_turn(
            a2a,
            turns,
            turn_id,
            f"demo message {number}" if label is None else f"demo message ({label})",
            context_id=context_id,
            task_deadline_seconds=DEMO_TASK_DEADLINE_SECONDS,
            task_poll_seconds=0.1,
            task_max_failures=DEMO_TASK_MAX_FAILURES,
        )
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            mark = await _end_mark(store, TurnKeys(prefix, turn_id))
            if mark is not None:
                display.finish(label or turn_id, mark.next, mark.state.value)


async def _inject_fault(agent: ReferenceAgent, fault: Fault) -> None:
    """Misbehave once the step is under way: its first turn has read once."""
    await agent.wait_reads(1)
    agent.fault = fault


async def _watch(
    store: ObjectStore,
    prefix: str,
    first_turn: str,
    display: TurnDisplay,
    done: anyio.Event,
    label: str | None = None,
) -> None:
    """Show the step as a reader of the store sees it, until its last turn (each by ``label``)."""
    try:
        async for stored in read_live_trajectory(
            store, prefix, first_turn, poll_interval_seconds=0.05
        ):
            display.update(label or stored.turn_id, stored.index + 1)
    except FollowerError as exc:
        print(f"follower: the demo's reader stopped: {exc}", file=sys.stderr)
    finally:
        done.set()


async def _end_mark(store: ObjectStore, keys: TurnKeys) -> EndMark | None:
    """The turn's end mark; None when it is missing or unreadable."""
    try:
        return EndMark.decode(await store.get(keys.end), keys.end)
    except FollowerError:
        return None


class _Report:
    def __init__(self) -> None:
        self.problems: list[str] = []
        # Marked incomplete is a promise kept (the agent failed, the store says so).
        self.incomplete: list[str] = []

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def verdict(self) -> str:
        if not self.ok:
            return "PROBLEMS: " + "; ".join(self.problems)
        verdict = "every followed turn is stored, contiguous, linked and ended"
        if self.incomplete:
            verdict += (
                f"; INCOMPLETE: {', '.join(self.incomplete)} (marked so: the agent's task "
                "was not read to its end)"
            )
        return verdict


async def _summarise(
    store: ObjectStore,
    prefix: str,
    turn_ids: list[str],
    report: _Report,
    out: TextIO,
    *,
    label: str | None = None,
) -> None:
    """Check what the step left in the store, turn by turn, into ``report``; write a line a turn.

    A ``label`` names the step's turns (``streamed turn-1: ...``) and its read-back line.
    """
    named = "" if label is None else f"{label} "
    followed = []
    for turn_id in turn_ids:
        name = f"{named}{turn_id}"
        try:
            turn = await read_stored_turn(store, TurnKeys(prefix, turn_id))
        except FollowerError as exc:
            report.problems.append(f"{name}: {exc}")
            continue
        if turn.is_empty:
            out.write(f"  {name}: not run\n")
            continue
        followed.append(turn_id)
        stored = turn.contiguous_next
        gaps = [after for after, _ in turn.chunks if after > stored]
        if gaps:
            report.problems.append(f"{name}: chunks not contiguous at {stored}")
        mark = turn.end
        if mark is None:
            report.problems.append(f"{name}: no end mark")
        elif mark.next > stored:
            report.problems.append(f"{name}: end mark says {mark.next}, {stored} stored")
        elif mark.complete is False:
            report.incomplete.append(name)
        link = turn.link.turn if turn.link is not None else None
        out.write(
            f"  {name}: {_counted(stored, 'event')} in {_counted(len(turn.chunks), 'chunk')}, "
            f"ended {mark.state.value if mark else None}"
            f"{', incomplete' if mark is not None and mark.complete is False else ''}, "
            f"next turn: {link if link is not None else '(last)'}\n"
        )
        if turn.link is None:
            report.problems.append(f"{name}: not linked")
    if followed:
        total = 0
        try:
            with anyio.fail_after(5):
                async for _ in read_live_trajectory(
                    store, prefix, followed[0], poll_interval_seconds=0.05
                ):
                    total += 1
        except TimeoutError:
            report.problems.append(f"reading the {named}step back did not reach its last turn")
        read_back = "read back" if label is None else f"read back ({label})"
        out.write(
            f"  {read_back}: {_counted(total, 'event')} across {_counted(len(followed), 'turn')}\n"
        )


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
