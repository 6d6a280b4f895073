"""The ``follower`` command line: demo, agent, follow, tail, validate.

Every command runs on the backend chosen with ``--backend``; errors a user can
act on end with one line on stderr and an exit code of their own. This module
alone parses and checks arguments and maps errors to exit codes: the demo and
the agent (``_demo``) take plain arguments, and are imported only to run.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any

import anyio

from ._a2a import cancel_task_quietly, connect_agent, follow_a2a_task
from ._cli_auth import agent_client, headers_of
from ._cli_parser import BOUND_BROKEN, build_parser
from ._cli_store import S3Location, s3_store
from ._errors import (
    AgentUnavailableError,
    FollowerError,
    StoreError,
    TaskNotFoundError,
    TurnExistsError,
    UsageError,
)
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
    from ._stores import ObjectStore
    from .testing import Fault

# Exit codes: one per failure a user can act on.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NO_LIVE_TRAJECTORY = 4
EXIT_UNKNOWN_TASK = 5
EXIT_BAD_STORE = 6
EXIT_TURN_EXISTS = 7
EXIT_BOUND_BROKEN = BOUND_BROKEN  # validate: a follower outlived its step, or a bound broke
EXIT_INTERRUPTED = 130
# After the step, how long the tail of its own store may take to reach the end mark.
PRINT_DRAIN_SECONDS = 5.0

logger = logging.getLogger("follower")


class CommandError(Exception):
    """A failure to report as one line, with its exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter(tracebacks=args.verbose))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            print(
                "follower: error: --backend trio needs trio: pip install 'follower[trio]'",
                file=sys.stderr,
            )
            return EXIT_USAGE
    try:
        if args.command == "validate":  # each backend in an event loop of its own
            from ._validate_table import validate_command

            return EXIT_OK if validate_command(args) else EXIT_BOUND_BROKEN
        command: Callable[[argparse.Namespace], Awaitable[int]] = _COMMANDS[args.command]
        return anyio.run(command, args, backend=args.backend or "asyncio")
    except BaseException as exc:
        if _interrupted(exc):
            print("follower: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        explained = _explain(exc)
        if explained is None:
            raise
        message, code = explained
        print(f"follower: error: {message}", file=sys.stderr)
        return code


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C, bare or wrapped by a task group (trio raises it inside one)."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_interrupted(inner) for inner in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt)


class _OneLineFormatter(logging.Formatter):
    """``follower: LEVEL: message``; a logged exception as one line unless verbose."""

    def __init__(self, *, tracebacks: bool) -> None:
        super().__init__("follower: %(levelname)s: %(message)s")
        self._tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        if self._tracebacks or not record.exc_info or record.exc_info[1] is None:
            return super().format(record)
        exc = record.exc_info[1]
        short = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        short.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc}"
        short.args = None
        return super().format(short)


def _explain(exc: BaseException) -> tuple[str, int] | None:
    """One line and an exit code for a failure a user can act on, else None."""
    if isinstance(exc, BaseExceptionGroup):
        # A task group wraps what its body raised: explain the first thing we know.
        for inner in exc.exceptions:
            explained = _explain(inner)
            if explained is not None:
                return explained
        return None
    if isinstance(exc, CommandError):
        return str(exc), exc.code
    if isinstance(exc, AgentUnavailableError):
        return f"the agent is unreachable: {exc}", EXIT_UNREACHABLE
    if isinstance(exc, TaskNotFoundError):
        return f"unknown task: {exc}", EXIT_UNKNOWN_TASK
    if isinstance(exc, TurnExistsError):
        return f"store: {exc}", EXIT_TURN_EXISTS
    if isinstance(exc, StoreError):
        return f"store: {exc}", EXIT_BAD_STORE
    if isinstance(exc, UsageError):
        return str(exc), EXIT_USAGE
    if isinstance(exc, FollowerError):
        return str(exc), EXIT_ERROR
    return None


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


def _print_json(value: Any) -> None:
    print(json.dumps(value, separators=(",", ":")), flush=True)


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
        task = await _follow_and_print(agent, endpoint, store, keys, task_id, args, client, headers)
    print(f"follower: task {task.id} ended {task.state}", file=sys.stderr)
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
) -> A2ATask:
    """Follow the task into the store while printing what is stored, then check it ended."""
    async with anyio.create_task_group() as tg:
        printed = anyio.Event()
        # What is printed is what was stored: the tail of the same turn.
        tg.start_soon(_print_then_set, store, keys, task_id, printed)
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
    return task


async def _print_then_set(
    store: ObjectStore, keys: TurnKeys, task_id: str, done: anyio.Event
) -> None:
    # Only this task's turn is printed: a store is polled (it has no events to wait
    # on) until the turn's task.json says whose it is.
    while True:
        task = (await read_stored_turn(store, keys)).task
        if task is not None:
            break
        await anyio.sleep(0.05)
    if task.task_id == task_id:
        await _print_events(store, keys.prefix_key, keys.turn_id, 0.05, with_turns=False)
    done.set()


async def _print_events(
    store: ObjectStore,
    prefix: str,
    turn: str,
    poll: float,
    *,
    with_turns: bool,
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
            if item.complete is False:
                print(
                    f"follower: turn {item.turn_id} ended {item.state} incomplete: "
                    f"{item.events} events stored, the task was not read to its end",
                    file=sys.stderr,
                    flush=True,
                )
        elif with_turns:
            _print_json({"turn": item.turn_id, "index": item.index, "event": item.event})
        else:
            _print_json(item.event)


async def _tail(args: argparse.Namespace) -> int:
    store = await open_store(args.store, must_exist=True, endpoint_url=args.endpoint_url)
    await _print_events(
        store, args.prefix, args.turn, args.poll, with_turns=True, idle_timeout=args.idle_timeout
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
    # Every check comes before the store is made, so a refused demo leaves nothing.
    if args.turns < 1 or args.events < 0 or args.interval < 0:
        raise CommandError("--turns must be >= 1, --events and --interval >= 0", EXIT_USAGE)
    fault = _fault(args.fault, args.events)
    store = await open_store(args.store, must_exist=False, endpoint_url=args.endpoint_url)
    from ._demo import run_demo

    ok = await run_demo(
        store,
        turns=args.turns,
        events=args.events,
        interval_seconds=args.interval,
        fault=fault,
        fault_label=args.fault,
    )
    return EXIT_OK if ok else EXIT_ERROR


_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "demo": _demo,
    "agent": _agent,
    "follow": _follow,
    "tail": _tail,
}
