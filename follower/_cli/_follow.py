"""``follower follow`` and ``follower tail``: what a store holds of a task, printed as it is stored.

``follow`` follows a task into a store (one in memory unless given) and prints
what is stored, read back by a tail of the same turn, so that what it prints is
what a reader of the store sees; ``tail`` prints a stored step, turn after turn.
``follow`` takes whatever way the agent's card offers (cursor reads of its live
trajectory, its stream, polls of its task), or the one ``--via`` asks for, and
says on stderr which and why.
Both raise :class:`CommandError` for what a user can act on; the command line
(``_cli``) turns that into its line and exit code.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import anyio

from .._a2a._client import cancel_task_quietly, connect_agent
from .._a2a._turn import follow_a2a_task
from .._errors import TaskNotFoundError, UsageError
from .._format._a2a import Via, offers_streaming
from .._format._layout import TurnKeys, default_prefix
from .._stores import MemoryStore
from .._storing._reader import TurnEnd, read_live_trajectory
from .._storing._stored_turn import read_stored_turn
from .._turns._step import LiveTurns
from ._auth import agent_client, headers_of
from ._exits import (
    EXIT_BAD_STORE,
    EXIT_INCOMPLETE,
    EXIT_NO_LIVE_TRAJECTORY,
    EXIT_OK,
    EXIT_UNKNOWN_TASK,
    CommandError,
)
from ._output import event_line, print_json
from ._store import failed_write, open_store

if TYPE_CHECKING:
    import argparse

    import httpx

    from .._a2a._client import A2AAgent, A2ATask
    from .._format._a2a import TaskSource
    from .._format._layout import EndMark
    from .._stores import ObjectStore

# After the step, how long the tail of its own store may take to reach the end mark.
PRINT_DRAIN_SECONDS = 5.0


async def follow_command(args: argparse.Namespace) -> int:
    """``follower follow``: a task followed into a store while its stored events are printed."""
    store: ObjectStore = MemoryStore()
    if args.store is not None:
        store = await open_store(args.store, must_exist=False, endpoint_url=args.endpoint_url)
    headers = dict(headers_of(args))
    async with (
        agent_client(args) as client,
        connect_agent(args.url, client=client, headers=headers, via=args.via) as agent,
    ):
        source = agent.task_source
        if source is None:  # --via cursor, and the card offers no cursor reads
            raise CommandError(
                f"the agent at {args.url} offers no live trajectory (its card has no "
                "usable urn:agentenv:trajectory/v1 extension); without --via cursor, "
                "follow takes its stream or polls its task",
                EXIT_NO_LIVE_TRAJECTORY,
            )
        if args.task:
            try:
                await agent.get_task(args.task)  # an unknown task fails here, clearly
            except TaskNotFoundError:
                raise CommandError(
                    f"unknown task {args.task!r}: the agent at {args.url} does not know it",
                    EXIT_UNKNOWN_TASK,
                ) from None
            task_id = args.task
        else:
            task_id = (await agent.send_message(args.message)).id
        # Said at once, so that an interrupted run can be resumed with --task.
        print(f"follower: task {task_id}", file=sys.stderr, flush=True)
        print(
            f"follower: following task {task_id} {way_and_why(agent, source, args.via)}",
            file=sys.stderr,
            flush=True,
        )
        try:
            keys = TurnKeys(args.prefix or default_prefix(task_id), args.turn)
        except UsageError:
            if args.message is not None:
                await cancel_task_quietly(agent, task_id)
            raise
        task, end = await _follow_and_print(
            agent, source, store, keys, task_id, args, client, headers
        )
    print(f"follower: task {task.id} ended {task.state}", file=sys.stderr)
    if end.complete is False:
        failed = failed_write(store)  # the store refused a write (a full disk): not the agent
        if failed is not None:
            raise CommandError(
                f"store: task {task.id}'s trajectory was not stored whole: {failed}", EXIT_BAD_STORE
            )
        raise CommandError(
            f"task {task.id}'s trajectory was not read to its end: {end.next} of its events "
            f"stored, not all ({_STOPPED_SHORT[source.via]}; see the warnings above)",
            EXIT_INCOMPLETE,
        )
    return EXIT_OK


# Why a turn followed each way can end incomplete, in the words of that way.
_STOPPED_SHORT = {
    Via.CURSOR: "the agent's pages stopped before its last",
    Via.STREAM: "the agent's stream was lost, and what it missed could not be read back",
    Via.POLL: "the agent's task could not be read once it ended",
}


def way_and_why(agent: A2AAgent, source: TaskSource, asked: str | None) -> str:
    """How the task is followed, and why that way: ``by its stream (the card offers ...)``."""
    if source.via is Via.CURSOR:
        way = "by cursor reads of its live trajectory"
    elif source.via is Via.STREAM:
        way = "by its stream"
    else:
        way = f"by polls of {source.wire.get_task('')[0]}"
    trajectory = agent.trajectory_endpoint is not None
    streaming = offers_streaming(agent.card)
    if asked is not None:
        offered = {Via.CURSOR: trajectory, Via.STREAM: streaming, Via.POLL: True}[source.via]
        why = f"--via {asked}" if offered else f"--via {asked}; the card does not offer it"
    elif trajectory:
        why = "the card offers a live trajectory"
    elif streaming:
        why = "the card offers streaming, no live trajectory"
    else:
        why = "the card offers no live trajectory and no streaming"
    return f"{way} ({why})"


async def _follow_and_print(
    agent: A2AAgent,
    source: TaskSource,
    store: ObjectStore,
    keys: TurnKeys,
    task_id: str,
    args: argparse.Namespace,
    client: httpx.AsyncClient | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[A2ATask, EndMark]:
    """Follow the task into the store while printing what is stored; the task and its end mark."""
    async with anyio.create_task_group() as tg:
        printed = anyio.Event()
        # What is printed is what was stored: the tail of the same turn.
        tg.start_soon(_print_then_set, store, keys, task_id, args.events_only, printed)
        try:
            async with LiveTurns(
                source,
                store,
                keys.prefix_key,
                poll_interval_seconds=args.poll,
                resume=True,
                client=client,
                headers=headers,
            ) as turns:
                task = await follow_a2a_task(
                    agent,
                    turns,
                    keys.turn_id,
                    task_id,
                    task_deadline_seconds=args.deadline,
                    task_poll_seconds=args.poll,
                )
        except BaseException:
            tg.cancel_scope.cancel()
            raise
        # Marked, the turn's tail reaches its end at once; unmarked (the store
        # failed), it never would.
        stored = await read_stored_turn(store, keys)
        if stored.end is not None and stored.link is not None:
            with anyio.move_on_after(PRINT_DRAIN_SECONDS):
                await printed.wait()
        tg.cancel_scope.cancel()
    if stored.end is None or stored.link is None:
        raise CommandError(
            f"store: turn {keys.turn_id!r} under {keys.prefix_key!r} could not be stored "
            "whole (its end mark or link is missing; see the errors above)",
            EXIT_BAD_STORE,
        )
    return task, stored.end


async def _print_then_set(
    store: ObjectStore, keys: TurnKeys, task_id: str, events_only: bool, done: anyio.Event
) -> None:
    # Only this task's turn is printed: a store is polled (it has no events to wait
    # on) until the turn's task.json says whose it is.
    while True:
        task = (await read_stored_turn(store, keys)).task
        if task is not None:
            break
        await anyio.sleep(0.05)
    if task.task_id == task_id:
        # An incomplete end is follow's own error line, once the task has ended.
        await _print_events(
            store, keys.prefix_key, keys.turn_id, 0.05, events_only=events_only, say_ends=False
        )
    done.set()


async def _print_events(
    store: ObjectStore,
    prefix: str,
    turn: str,
    poll: float,
    *,
    events_only: bool,
    say_ends: bool = True,
    idle_timeout: float | None = None,
) -> None:
    async for item in read_live_trajectory(
        store,
        prefix,
        turn,
        poll_interval_seconds=poll,
        idle_timeout_seconds=idle_timeout,
        turn_ends=True,
    ):
        if isinstance(item, TurnEnd):
            if say_ends and item.complete is False:
                print(
                    f"follower: turn {item.turn_id} ended {item.state} incomplete: "
                    f"{item.events} events stored, the task was not read to its end",
                    file=sys.stderr,
                    flush=True,
                )
        else:
            print_json(event_line(item.turn_id, item.index, item.event, events_only=events_only))


async def tail_command(args: argparse.Namespace) -> int:
    """``follower tail``: a stored step's events, turn after turn, as they are stored."""
    store = await open_store(args.store, must_exist=True, endpoint_url=args.endpoint_url)
    if (await read_stored_turn(store, TurnKeys(args.prefix, args.turn))).is_empty:
        # A tail waits for a turn to appear; say so, or it looks hung.
        give_up = (
            f"giving up after {args.idle_timeout:g} s without a new object"
            if args.idle_timeout is not None
            else "for ever: --idle-timeout SECONDS to give up"
        )
        print(
            f"follower: waiting for turn {args.turn!r} under {args.prefix!r} in {args.store} "
            f"(nothing is stored there yet), {give_up}",
            file=sys.stderr,
            flush=True,
        )
    await _print_events(
        store,
        args.prefix,
        args.turn,
        args.poll,
        events_only=args.events_only,
        idle_timeout=args.idle_timeout,
    )
    return EXIT_OK
