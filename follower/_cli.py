"""The ``follower`` command line: demo, agent, follow, tail.

Every command runs on the backend chosen with ``--backend``; errors a user can
act on end with one line on stderr and an exit code of their own. This module
alone parses and checks arguments and maps errors to exit codes: the demo and
the agent (``_demo``) take plain arguments, and are imported only to run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ._a2a import connect_agent, follow_a2a_task, run_a2a_turn
from ._errors import (
    AgentUnavailableError,
    FollowerError,
    StoreError,
    TaskNotFoundError,
    UsageError,
)
from ._reader import read_live_trajectory
from ._step import LiveTurns
from ._stores import FilesystemStore, MemoryStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

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
EXIT_INTERRUPTED = 130

logger = logging.getLogger("follower")


class CommandError(Exception):
    """A failure to report as one line, with its exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
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
    command: Callable[[argparse.Namespace], Awaitable[int]] = args.run
    try:
        return anyio.run(command, args, backend=args.backend)
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
    if isinstance(exc, StoreError):
        return f"store: {exc}", EXIT_BAD_STORE
    if isinstance(exc, UsageError):
        return str(exc), EXIT_USAGE
    if isinstance(exc, FollowerError):
        return str(exc), EXIT_ERROR
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="follower",
        description="Follow an A2A agent's live trajectory and store it as it is read.",
    )
    parser.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="the async backend to run on (default: asyncio)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the follower does")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run a 3-turn step against the reference agent and show it live",
        description="Start the reference agent on loopback, run a step of several turns "
        "against it, store the live trajectory under a folder and show it as it is read.",
    )
    demo.add_argument(
        "--store",
        type=Path,
        default=Path("follower-demo"),
        help="the folder to store the trajectory in (default: ./follower-demo/)",
    )
    demo.add_argument("--turns", type=int, default=3, help="how many turns (default: 3)")
    demo.add_argument("--events", type=int, default=40, help="events per turn (default: 40)")
    demo.add_argument(
        "--interval", type=float, default=0.02, help="seconds between events (default: 0.02)"
    )
    demo.add_argument(
        "--fault", default=None, help="make the agent misbehave (see 'follower agent --help')"
    )
    demo.set_defaults(run=_demo)

    agent = commands.add_parser(
        "agent",
        help="serve the reference agent",
        description="Serve the reference agent (A2A JSON-RPC, agent card, live trajectory).",
    )
    agent.add_argument("--host", default="127.0.0.1", help="address to listen on")
    agent.add_argument("--port", type=_port, default=8000, help="port to listen on (0: any)")
    agent.add_argument("--events", type=int, default=40, help="events per task")
    agent.add_argument("--interval", type=float, default=0.05, help="seconds between events")
    agent.add_argument("--event-bytes", type=int, default=64, help="padding bytes per event")
    agent.add_argument(
        "--final-state",
        default="completed",
        choices=["completed", "failed", "canceled"],
        help="how tasks end",
    )
    agent.add_argument("--fault", default=None, help="a fault mode")
    agent.set_defaults(run=_agent)

    follow = commands.add_parser(
        "follow",
        help="follow a task of an agent, printing its events as JSON lines",
        description="Follow a task's live trajectory through the agent's card; print each "
        "event as a JSON line on stdout.",
    )
    follow.add_argument("url", help="the agent's A2A URL (its card is under it)")
    which = follow.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--task",
        help="the id of a task the agent is running; if following it fails or is "
        "interrupted, the agent is asked to cancel it, as with --message",
    )
    which.add_argument("--message", help="send this message and follow the new task")
    follow.add_argument("--store", type=Path, default=None, help="also store it under this folder")
    follow.add_argument("--prefix", default="follow/", help="the key prefix (default: follow/)")
    follow.add_argument("--turn", default="turn-1", help="the turn id (default: turn-1)")
    follow.add_argument(
        "--poll", type=_positive, default=0.5, help="seconds between reads and task checks"
    )
    follow.add_argument(
        "--deadline",
        type=_positive,
        default=600.0,
        help="seconds to wait for the task to end, then cancel it (default: 600)",
    )
    follow.set_defaults(run=_follow)

    tail = commands.add_parser(
        "tail",
        help="print a stored step's events as they arrive, turn after turn",
        description="Print the events stored under STORE/PREFIX, from TURN on, as JSON "
        'lines {"turn", "index", "event"}, until the step\'s last turn ends.',
    )
    tail.add_argument("store", type=Path, help="the store's folder")
    tail.add_argument("prefix", help="the step's key prefix, ending with '/' (or '')")
    tail.add_argument("turn", help="the first turn's id")
    tail.add_argument("--poll", type=_positive, default=0.5, help="seconds between listings")
    tail.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help="give up after this many seconds without a new object",
    )
    tail.set_defaults(run=_tail)
    return parser


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


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


def _print_json(value: Any) -> None:
    print(json.dumps(value, separators=(",", ":")), flush=True)


async def _follow(args: argparse.Namespace) -> int:
    store: ObjectStore = store_at(args.store, must_exist=False) if args.store else MemoryStore()
    async with connect_agent(args.url) as agent:
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
        async with anyio.create_task_group() as tg:
            # What is printed is what was stored: the tail of the same turn.
            tg.start_soon(_print_events, store, args.prefix, args.turn, 0.05, False)
            try:
                async with LiveTurns(
                    endpoint, store, args.prefix, poll_interval_seconds=args.poll
                ) as turns:
                    if args.message is not None:
                        task = await run_a2a_turn(
                            agent,
                            turns,
                            args.turn,
                            args.message,
                            task_deadline_seconds=args.deadline,
                            task_poll_seconds=args.poll,
                        )
                    else:
                        task = await follow_a2a_task(
                            agent,
                            turns,
                            args.turn,
                            args.task,
                            task_deadline_seconds=args.deadline,
                            task_poll_seconds=args.poll,
                        )
            except BaseException:
                tg.cancel_scope.cancel()
                raise
    print(f"follower: task {task.id} ended {task.state}", file=sys.stderr)
    return EXIT_OK


async def _print_events(
    store: ObjectStore,
    prefix: str,
    turn: str,
    poll: float,
    with_turns: bool,
    idle_timeout: float | None = None,
) -> None:
    async for stored in read_live_trajectory(
        store, prefix, turn, poll_interval_seconds=poll, idle_timeout_seconds=idle_timeout
    ):
        if with_turns:
            _print_json({"turn": stored.turn_id, "index": stored.index, "event": stored.event})
        else:
            _print_json(stored.event)


async def _tail(args: argparse.Namespace) -> int:
    store = store_at(args.store, must_exist=True)
    await _print_events(store, args.prefix, args.turn, args.poll, True, args.idle_timeout)
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
    store = store_at(args.store, must_exist=False)
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
