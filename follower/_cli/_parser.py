"""The command line's grammar: every command, its arguments and their checks.

Parsing only: ``command`` in the parsed arguments names what ``_cli`` runs.
The options every command takes (``--backend``, ``-v``) are accepted before
and after the command's name: each command has them too, with no default of its
own, so that one given before is not overwritten.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, TypeAlias
from urllib.parse import urlsplit

from .. import __version__
from .._extras import install_hint
from .._format._a2a import Via
from .._redact import scrub
from ._auth import AgentUrl, add_credential_arguments
from ._exits import (
    EXIT_BOUND_BROKEN,
    EXIT_CODES_HELP,
    EXIT_INCOMPLETE,
    EXIT_NO_LIVE_TRAJECTORY,
)
from ._store import store_argument

# The faults `--fault` takes, as follower.testing.parse_fault reads them: a copy (a
# test keeps the two equal), so that parsing never imports follower.testing.
FAULT_NAMES = (
    "close, silent, unavailable[:READS], not-json, not-an-object, missing-field, "
    "unknown-state, cursor-mismatch, other-task, no-progress, oversized, gone[:EVENTS], "
    "restart, slow[:SECONDS]"
)


class _HelpFormatter(argparse.HelpFormatter):
    """Each option's default after its help, when it has one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


class _DrawnHelpFormatter(argparse.RawDescriptionHelpFormatter, _HelpFormatter):
    """For a description laid out by hand: kept as written."""


def build_parser() -> argparse.ArgumentParser:
    """The grammar of every command; ``command`` in the parsed arguments names the one to run."""
    parser = argparse.ArgumentParser(
        prog="follower",
        description="Follow an A2A agent's live trajectory and store it as it is read.",
        epilog=EXIT_CODES_HELP,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _global_options(parser, top_level=True)
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    _demo(commands)
    _agent(commands)
    _follow(commands)
    _tail(commands)
    _validate(commands)
    return parser


_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _command(
    commands: _Commands,
    name: str,
    formatter_class: type[argparse.HelpFormatter] = _HelpFormatter,
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """A command's parser, its help formatted as the others' (see the module's docstring)."""
    command: argparse.ArgumentParser = commands.add_parser(
        name, formatter_class=formatter_class, **kwargs
    )
    command.set_defaults(command=name)
    return command


def _global_options(
    parser: argparse.ArgumentParser, *, top_level: bool = False, backend_help: str | None = None
) -> None:
    """``--backend`` and ``-v``: defaults on the top level, none on each command."""
    parser.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default=None if top_level else argparse.SUPPRESS,
        help=backend_help or "the async backend to run on (default: asyncio; validate: both)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=False if top_level else argparse.SUPPRESS,
        help="log what the follower does",
    )


def _demo(commands: _Commands) -> None:
    demo = _command(
        commands,
        "demo",
        help="run a 3-turn step against the reference agent and show it live",
        description="Start the reference agent on loopback, run a step of several turns "
        "against it, store the live trajectory under a folder and show it as it is read. "
        f"Needs the testing extra: {install_hint('testing')}.",
    )
    _global_options(demo)
    demo.add_argument(
        "--store",
        type=store_argument,
        default="follower-demo",
        help="the folder or s3://BUCKET/PREFIX/ to store the trajectory in",
    )
    _endpoint_url(demo)
    demo.add_argument("--turns", type=_at_least_one, default=3, help="how many turns")
    demo.add_argument("--events", type=_count, default=40, help="events per turn")
    demo.add_argument("--interval", type=_seconds, default=0.02, help="seconds between events")
    _fault(demo)


def _agent(commands: _Commands) -> None:
    agent = _command(
        commands,
        "agent",
        help="serve the reference agent",
        description="Serve the reference agent (A2A JSON-RPC, agent card, live trajectory) "
        f"until interrupted. Needs the testing extra: {install_hint('testing')}.",
    )
    _global_options(agent)
    agent.add_argument("--host", default="127.0.0.1", help="address to listen on")
    agent.add_argument("--port", type=_port, default=8000, help="port to listen on (0: any)")
    agent.add_argument("--events", type=_count, default=40, help="events per task")
    agent.add_argument("--interval", type=_seconds, default=0.05, help="seconds between events")
    agent.add_argument("--event-bytes", type=_count, default=64, help="padding bytes per event")
    agent.add_argument(
        "--final-state",
        default="completed",
        choices=["completed", "failed", "canceled"],
        help="how tasks end",
    )
    _fault(agent)


def _follow(commands: _Commands) -> None:
    follow = _command(
        commands,
        "follow",
        help="follow a task of an agent, printing its events as JSON lines",
        description="Follow a task of the agent and print each event as a JSON line "
        '{"turn", "index", "event"} on stdout, as it is stored (--events-only: the bare '
        "events). The task is followed the way the agent's card offers: cursor reads of its "
        "live trajectory, else its stream, else polls of its task (--via chooses). On "
        "stderr, follow names the task at once ('follower: task ID'), then the way and why "
        "('follower: following task ID by its stream (the card offers streaming, no live "
        "trajectory)'), and at the end how the task ended. A streamed or polled task's "
        "events are A2A's own: one object each, naming its kind (task, message, "
        "statusUpdate, artifactUpdate; gap where a stream was lost).",
        epilog=f"When the task ends but its trajectory was not read to its end (the agent "
        f"served malformed pages, its stream was lost, or it went away), follow says how "
        f"many events were stored and exits {EXIT_INCOMPLETE}. --via cursor on an agent "
        f"whose card offers no live trajectory exits {EXIT_NO_LIVE_TRAJECTORY} before "
        f"sending anything. Every exit code: follower --help.",
    )
    _global_options(follow)
    follow.add_argument(
        "url",
        type=_agent_url,
        action=AgentUrl,
        help="the agent's http(s) A2A URL (its card is under it); user info in it "
        "(http://USER:PASSWORD@HOST/) is sent as basic auth",
    )
    which = follow.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--task",
        help="the id of a task the agent is running; a task stored before (an "
        "interrupted run) is resumed; if following it fails or is interrupted, the agent "
        "is asked to cancel it, as with --message",
    )
    which.add_argument("--message", help="send this message and follow the new task")
    follow.add_argument(
        "--store",
        type=store_argument,
        default=None,
        help="also store it under this folder or s3://BUCKET/PREFIX/",
    )
    _endpoint_url(follow)
    follow.add_argument(
        "--prefix",
        default=None,
        help="the key prefix (default: follow/<task id>/, so that runs never mix)",
    )
    follow.add_argument("--turn", default="turn-1", help="the turn id")
    follow.add_argument(
        "--via",
        choices=[way.value for way in Via],
        default=None,
        help="follow the task this way: cursor (the live-trajectory extension's reads), "
        "stream (the agent's SubscribeToTask stream), poll (polls of GetTask) "
        "(default: the first of these the card offers)",
    )
    follow.add_argument(
        "--poll", type=_positive, default=0.5, help="seconds between reads and task checks"
    )
    follow.add_argument(
        "--deadline",
        type=_positive,
        default=600.0,
        help="seconds to wait for the task to end, then cancel it",
    )
    add_credential_arguments(follow)
    _events_only(follow)


def _tail(commands: _Commands) -> None:
    tail = _command(
        commands,
        "tail",
        help="print a stored step's events as they arrive, turn after turn",
        description="Print the events stored under STORE/PREFIX, from TURN on, as JSON "
        'lines {"turn", "index", "event"} (--events-only: the bare events), until the '
        "step's last turn ends. A step still running has no end yet: tail waits for it "
        "(and says so on stderr) until --idle-timeout. A turn whose writer stored heartbeats "
        "and then stopped without an end mark (a worker that died) ends tail with exit 10, "
        "3 heartbeat intervals and 5 s after its last sign of life.",
    )
    _global_options(tail)
    tail.add_argument(
        "store", type=store_argument, help="the store's folder, or s3://BUCKET/PREFIX/"
    )
    _endpoint_url(tail)
    tail.add_argument("prefix", help="the step's key prefix, ending with '/' (or '')")
    tail.add_argument("turn", help="the first turn's id")
    tail.add_argument("--poll", type=_positive, default=0.5, help="seconds between listings")
    tail.add_argument(
        "--idle-timeout",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="give up (exit 1) after this many seconds without a new object "
        "(default: wait for ever)",
    )
    _events_only(tail)


def _validate(commands: _Commands) -> None:
    validate = _command(
        commands,
        "validate",
        formatter_class=_DrawnHelpFormatter,
        help="check on loopback that no follower outlives its step (the operators' table)",
        description="""\
Run a step against the reference agent on a loopback socket for every step
outcome (cancelled, raises, returns) x agent x way of following x backend, and
print a row for each: did the step end, how long after the body ended its
block exited, the reads the agent saw after the body ended and after the block
exited, the reads the agent failed, and the turn's end.json.

The agents: close (closes every connection), silent (accepts, never answers),
5xx (answers 503), healthy. Each answers the step's first 2 reads, then turns
bad; the body ends once the follower has met the fault, so that it is waiting
to retry (or inside a read that will time out) when the step stops.

The ways (--via): cursor (reads of the live trajectory), stream (the agent's
SubscribeToTask stream: one read, which an agent turning bad cuts, close and
5xx, or holds, silent; the next subscription meets the fault), poll (polls of
GetTask). The same bounds hold for each.

The bounds (from the design): cancelled or raises: no read after the body
ended, and a prompt exit; returns: an exit within the drain, and at most 1 read
after the body ended from an agent that went bad (the read that ends
following); always: no read reaching the agent after the block exited (watched
for a grace window) and no follower task left running; end.json written,
canceled / failed / completed.""",
        epilog=f"""\
exit status: 0 every cell kept its bounds; {EXIT_BOUND_BROKEN} a follower outlived its step or a
bound broke (the row says 'BROKEN' and which); 2 usage (also --backend trio
without trio; without --backend, a missing trio is said and asyncio runs).""",
    )
    _global_options(
        validate,
        backend_help="the async backend to run on (default: both, asyncio then trio)",
    )
    validate.add_argument(
        "--via",
        action="append",
        choices=[way.value for way in Via],
        default=None,
        help="run the cells of this way of following only (repeatable; default: all three)",
    )
    validate.add_argument(
        "--quick",
        action="store_true",
        help="short intervals (poll 0.05 s, read timeout 0.25 s, drain 0.5 s): about 10 s, "
        "for make test (default: poll 0.1 s, read timeout 1 s, drain 2 s: under a minute)",
    )
    validate.add_argument(
        "--repeats",
        type=_at_least_one,
        default=1,
        help="runs of each cell; rows then give the median / max (default: 1)",
    )
    validate.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write the table as JSON to PATH ('-': stdout, the table going to stderr)",
    )


def _fault(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--fault",
        default=None,
        metavar="MODE",
        help=f"make the agent misbehave; one of: {FAULT_NAMES}",
    )


def _events_only(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--events-only",
        action="store_true",
        help='print each event alone, not in its {"turn", "index", "event"} line',
    )


def _endpoint_url(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--endpoint-url",
        default=None,
        help="the S3 service of an s3:// store (default: boto3's, e.g. from AWS_ENDPOINT_URL)",
    )


# Argument types: each says what it wants in its own words, which argparse prints
# as is (a ValueError would make it say "invalid _port value").


def _agent_url(text: str) -> str:
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a port out of range or not a number
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{scrub(repr(text))} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{scrub(repr(text))} is not an agent's URL: http://HOST[:PORT]/... or https://..."
        )
    return text


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return port


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    return value


def _seconds(text: str) -> float:
    value = _number(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0 or more)")
    return value


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a count of 1 or more")
    return value
