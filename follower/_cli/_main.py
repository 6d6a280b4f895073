"""The ``follower`` command line: demo, agent, follow, tail, validate.

Every command runs on the backend chosen with ``--backend``; errors a user can
act on end with one line on stderr and an exit code of their own. This module
alone parses and checks arguments and maps errors to exit codes: the demo and
the agent (``_demo``) take plain arguments, and are imported only to run;
follow and tail (``_follow``) raise the errors this module maps.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from .._extras import install_hint
from ._exits import (
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
    EXIT_WRITER_GONE,
    CommandError,
    explain,
    raised,
)
from ._follow import follow_command, tail_command
from ._interrupt import INTERRUPTED_LINE, ignore_further_interrupts, run_interruptible
from ._output import log_to_stderr, silence_stdout
from ._parser import build_parser
from ._store import open_store

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable, Sequence

    from ..testing import Fault

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
    "EXIT_WRITER_GONE",
    "main",
]


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
            from ._fault_table import validate_command

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
                f"--backend trio needs trio: {install_hint('trio')}", EXIT_USAGE
            ) from None
    if args.command in ("demo", "agent"):
        try:
            import hypercorn  # noqa: F401
            import rich  # noqa: F401
        except ImportError as exc:
            raise CommandError(
                f"follower {args.command} needs the testing extra ({exc.name} is missing): "
                f"{install_hint('testing')}",
                EXIT_USAGE,
            ) from None


# --- agent and demo ----------------------------------------------------------------


def _fault(text: str | None, events: int) -> Fault | None:
    from ..testing import parse_fault

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
    from ._demo import STREAMED_TURN, new_step_prefix, run_demo, streamed_prefix

    prefix = new_step_prefix()
    ok = await run_demo(
        store.store,  # the store itself: the demo says where it stored, by its kind
        turns=args.turns,
        events=args.events,
        interval_seconds=args.interval,
        fault=fault,
        fault_label=args.fault,
        prefix=prefix,
    )
    endpoint = [] if args.endpoint_url is None else ["--endpoint-url", args.endpoint_url]
    tail = [*follower_command(), "tail", str(args.store)]
    streamed = [*tail, streamed_prefix(prefix), STREAMED_TURN, *endpoint]
    print(f"read the streamed step back: {shlex.join(streamed)}", flush=True)
    # Last, the step of cursor-read turns: the line a reader of the demo looks for.
    print(f"read it back: {shlex.join([*tail, prefix, 'turn-1', *endpoint])}", flush=True)
    return EXIT_OK if ok else EXIT_ERROR


def follower_command() -> list[str]:
    """How this shell runs this ``follower`` again, for a line that says what to run next.

    ``follower`` when ``PATH`` finds this one; else its script beside this interpreter (as
    after ``make demo``, whose venv is not activated), relative when under the current
    folder; else this interpreter with ``-m follower``."""
    script = Path(sys.executable).parent / "follower"
    if not (script.is_file() and os.access(script, os.X_OK)):
        return [_as_typed(Path(sys.executable)), "-m", "follower"]
    found = shutil.which("follower")
    if found is not None and os.path.samefile(found, script):
        return ["follower"]
    return [_as_typed(script)]


def _as_typed(path: Path) -> str:
    """``path`` relative to the current folder when under it (with a slash, so a shell runs
    it as a path), else absolute."""
    try:
        relative = path.absolute().relative_to(Path.cwd())
    except ValueError:
        return str(path.absolute())
    return str(relative) if relative.parent != Path() else f"./{relative}"


_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "demo": _demo,
    "agent": _agent,
    "follow": follow_command,
    "tail": tail_command,
}
