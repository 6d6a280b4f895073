"""The ``follower`` command line: demo, agent, follow, tail, validate.

Every command runs on the backend chosen with ``--backend``; errors a user can
act on end with one line on stderr and an exit code of their own. This module
alone parses and checks arguments and maps errors to exit codes: the demo and
the agent (``_demo``) take plain arguments, and are imported only to run.
"""

from __future__ import annotations

import logging
import shlex
import sys
from typing import TYPE_CHECKING

import anyio

from ._a2a import cancel_task_quietly, connect_agent, follow_a2a_task
from ._cli_auth import agent_client, headers_of
from ._cli_exits import (
    EXIT_BAD_STORE,
    EXIT_BOUND_BROKEN,
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_NO_LIVE_TRAJECTORY,
    EXIT_OK,
    EXIT_TURN_EXISTS,
    EXIT_UNKNOWN_TASK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CommandError,
    explain,
    raised,
)
from ._cli_interrupt import INTERRUPTED_LINE, ignore_further_interrupts, run_interruptible
from ._cli_output import event_line, log_to_stderr, print_json, silence_stdout
from ._cli_parser import build_parser
from ._cli_store import S3Location, s3_store
from ._errors import StoreError, TaskNotFoundError, UsageError
from ._layout import TurnKeys, default_prefix
from ._reader import TurnEnd, read_live_trajectory
from ._step import LiveTurns
from ._stored_turn import read_stored_turn
from ._stores import FilesystemStore, MemoryStore

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable, Sequence
    from pathlib import Path

    import httpx

    from ._a2a import A2AAgent, A2ATask
    from ._layout import EndMark
    from ._stores import ObjectStore
    from .testing import Fault

# The exit codes live in _cli_exits; these are the ones callers of main() compare with.
__all__ = [
    "EXIT_BAD_STORE",
    "EXIT_BOUND_BROKEN",
    "EXIT_ERROR",
    "EXIT_INCOMPLETE",
    "EXIT_INTERRUPTED",
    "EXIT_NO_LIVE_TRAJECTORY",
    "EXIT_OK",
    "EXIT_TURN_EXISTS",
    "EXIT_UNKNOWN_TASK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "main",
]

# After the step, how long the tail of its own store may take to reach the end mark.
PRINT_DRAIN_SECONDS = 5.0

logger = logging.getLogger("follower")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before or after the event loop, or inside validate's
        print(INTERRUPTED_LINE, file=sys.stderr)
        ignore_further_interrupts()
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    log_to_stderr(verbose=args.verbose)
    try:
        _check_extras(args)
        if args.command == "validate":  # each backend in an event loop of its own
            from ._validate_table import validate_command

            return EXIT_OK if validate_command(args) else EXIT_BOUND_BROKEN
        command = _COMMANDS[args.command]
        return anyio.run(run_interruptible, command, args, backend=args.backend or "asyncio")
    except BaseException as exc:
        if raised(exc, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        if raised(exc, BrokenPipeError):
            # Whoever read stdout (`| head`) has all it wanted: end quietly, as `cat` does.
            silence_stdout()
            return EXIT_BROKEN_PIPE
        explained = explain(exc)
        if explained is None:
            raise
        message, code = explained
        print(f"follower: error: {message}", file=sys.stderr)
        return code


def _check_extras(args: argparse.Namespace) -> None:
    """One line, not an ImportError's traceback, for an extra the command needs."""
    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            raise CommandError(
                "--backend trio needs trio: pip install 'follower[trio]'", EXIT_USAGE
            ) from None
    if args.command in ("demo", "agent"):
        try:
            import hypercorn  # noqa: F401
            import rich  # noqa: F401
        except ImportError as exc:
            raise CommandError(
                f"follower {args.command} needs the testing extra ({exc.name} is missing): "
                "pip install 'follower[testing]'",
                EXIT_USAGE,
            ) from None


# --- follow and tail ---------------------------------------------------------------


def store_at(path: Path, *, must_exist: bool) -> FilesystemStore:
    if path.exists() and not path.is_dir():
        raise CommandError(f"bad store path {str(path)!r}: not a folder", EXIT_BAD_STORE)
    if must_exist and not path.is_dir():
        raise CommandError(f"bad store path {str(path)!r}: no such folder", EXIT_BAD_STORE)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"bad store path {str(path)!r}: {exc.strerror}", EXIT_BAD_STORE) from exc
    return FilesystemStore(path)


async def open_store(
    where: Path | S3Location, *, must_exist: bool, endpoint_url: str | None
) -> ObjectStore:
    """The store a command was given: a folder (see :func:`store_at`) or an S3 bucket.

    A bucket is listed once before use, so that a missing one (or a refusal) ends
    the command before it starts anything, as a :class:`StoreError` (exit 6).
    """
    if not isinstance(where, S3Location):
        return store_at(where, must_exist=must_exist)
    try:
        store = s3_store(where, endpoint_url=endpoint_url)
    except ImportError:
        raise CommandError(
            f"the store {where} needs boto3: pip install 'follower[s3]'", EXIT_USAGE
        ) from None
    # Reach the bucket before a task is started or an agent served: one line if it
    # fails. A prefix that holds nothing keeps the listing to one cheap request.
    try:
        await store.list("follower-probe/")
    except StoreError as exc:
        raise CommandError(f"store: cannot use {where}: {exc}", EXIT_BAD_STORE) from exc
    return store


async def _follow(args: argparse.Namespace) -> int:
    store: ObjectStore = MemoryStore()
    if args.store is not None:
        store = await open_store(args.store, must_exist=False, endpoint_url=args.endpoint_url)
    headers = dict(headers_of(args))
    async with (
        agent_client(args) as client,
        connect_agent(args.url, client=client, headers=headers) as agent,
    ):
        endpoint = agent.trajectory_endpoint
        if endpoint is None:
            raise CommandError(
                f"the agent at {args.url} offers no live trajectory (its card has no "
                "usable urn:agentenv:trajectory/v1 extension)",
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
        try:
            keys = TurnKeys(args.prefix or default_prefix(task_id), args.turn)
        except UsageError:
            if args.message is not None:
                await cancel_task_quietly(agent, task_id)
            raise
        task, end = await _follow_and_print(
            agent, endpoint, store, keys, task_id, args, client, headers
        )
    print(f"follower: task {task.id} ended {task.state}", file=sys.stderr)
    if end.complete is False:
        raise CommandError(
            f"task {task.id}'s trajectory was not read to its end: {end.next} of its events "
            "stored, not all (the agent's pages stopped before its last; see the warnings "
            "above)",
            EXIT_INCOMPLETE,
        )
    return EXIT_OK


async def _follow_and_print(
    agent: A2AAgent,
    endpoint: str,
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
                endpoint,
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


async def _tail(args: argparse.Namespace) -> int:
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


# --- agent and demo ----------------------------------------------------------------


def _fault(text: str | None, events: int) -> Fault | None:
    from .testing import parse_fault

    try:
        return parse_fault(text, events)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None


async def _agent(args: argparse.Namespace) -> int:
    fault = _fault(args.fault, args.events)
    from ._demo import serve_reference_agent

    try:
        await serve_reference_agent(
            host=args.host,
            port=args.port,
            events=args.events,
            interval_seconds=args.interval,
            event_bytes=args.event_bytes,
            final_state=args.final_state,
            fault=fault,
        )
    except* OSError as refused:
        reason: BaseException = refused
        while isinstance(reason, BaseExceptionGroup):
            reason = reason.exceptions[0]
        raise CommandError(
            f"cannot listen on {args.host}:{args.port}: {reason}", EXIT_ERROR
        ) from None
    return EXIT_OK


async def _demo(args: argparse.Namespace) -> int:
    # Every check comes before the store is made (the parser checked the numbers), so
    # a refused demo leaves nothing.
    fault = _fault(args.fault, args.events)
    store = await open_store(args.store, must_exist=False, endpoint_url=args.endpoint_url)
    from ._demo import new_step_prefix, run_demo

    prefix = new_step_prefix()
    ok = await run_demo(
        store,
        turns=args.turns,
        events=args.events,
        interval_seconds=args.interval,
        fault=fault,
        fault_label=args.fault,
        prefix=prefix,
    )
    tail = ["follower", "tail", str(args.store), prefix, "turn-1"]
    if args.endpoint_url is not None:
        tail += ["--endpoint-url", args.endpoint_url]
    print(f"read it back: {shlex.join(tail)}", flush=True)
    return EXIT_OK if ok else EXIT_ERROR


_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "demo": _demo,
    "agent": _agent,
    "follow": _follow,
    "tail": _tail,
}
