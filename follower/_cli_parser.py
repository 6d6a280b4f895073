"""The command line's grammar: every command, its arguments and their checks.

Parsing only: ``command`` in the parsed arguments names what ``_cli`` runs.
"""

from __future__ import annotations

import argparse

from ._cli_auth import add_credential_arguments
from ._cli_store import store_argument


def build_parser() -> argparse.ArgumentParser:
    """The grammar of every command; ``command`` in the parsed arguments names the one to run."""
    parser = argparse.ArgumentParser(
        prog="follower",
        description="Follow an A2A agent's live trajectory and store it as it is read.",
    )
    _backend(parser, default=None)
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
        type=store_argument,
        default="follower-demo",
        help="the folder or s3://BUCKET/PREFIX/ to store the trajectory in "
        "(default: ./follower-demo/)",
    )
    _endpoint_url(demo)
    demo.add_argument("--turns", type=int, default=3, help="how many turns (default: 3)")
    demo.add_argument("--events", type=int, default=40, help="events per turn (default: 40)")
    demo.add_argument(
        "--interval", type=float, default=0.02, help="seconds between events (default: 0.02)"
    )
    demo.add_argument(
        "--fault", default=None, help="make the agent misbehave (see 'follower agent --help')"
    )
    demo.set_defaults(command="demo")

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
    agent.set_defaults(command="agent")

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
    add_credential_arguments(follow)
    follow.set_defaults(command="follow")

    tail = commands.add_parser(
        "tail",
        help="print a stored step's events as they arrive, turn after turn",
        description="Print the events stored under STORE/PREFIX, from TURN on, as JSON "
        'lines {"turn", "index", "event"}, until the step\'s last turn ends.',
    )
    tail.add_argument(
        "store", type=store_argument, help="the store's folder, or s3://BUCKET/PREFIX/"
    )
    _endpoint_url(tail)
    tail.add_argument("prefix", help="the step's key prefix, ending with '/' (or '')")
    tail.add_argument("turn", help="the first turn's id")
    tail.add_argument("--poll", type=_positive, default=0.5, help="seconds between listings")
    tail.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help="give up after this many seconds without a new object",
    )
    tail.set_defaults(command="tail")
    _validate(commands)
    return parser


# `follower validate`'s exit code when a bound broke: named here, where its help says
# it, and returned by follower._cli, which lists it with the other codes.
BOUND_BROKEN = 8


def _validate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    validate = commands.add_parser(
        "validate",
        help="check on loopback that no follower outlives its step (the operators' table)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Run a step against the reference agent on a loopback socket for every step
outcome (cancelled, raises, returns) x agent x backend, and print a row for
each: did the step end, how long after the body ended its block exited, the
reads the agent saw after the body ended and after the block exited, the reads
the agent failed, and the turn's end.json.

The agents: close (closes every connection), silent (accepts, never answers),
5xx (answers 503), healthy. Each answers the step's first 2 reads, then turns
bad; the body ends once the follower has met the fault, so that it is waiting
to retry (or inside a read that will time out) when the step stops.

The bounds (from the design): cancelled or raises: no read after the body
ended, and a prompt exit; returns: an exit within the drain, and at most 1 read
after the body ended from an agent that went bad (the read that ends
following); always: no read reaching the agent after the block exited (watched
for a grace window) and no follower task left running; end.json written,
canceled / failed / completed.""",
        epilog=f"""\
exit status: 0 every cell kept its bounds; {BOUND_BROKEN} a follower outlived its step or a
bound broke (the row says 'BROKEN' and which); 2 usage (also --backend trio
without trio; without --backend, a missing trio is said and asyncio runs).""",
    )
    _backend(validate, default=argparse.SUPPRESS, both=True)
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
    validate.set_defaults(command="validate")


def _backend(command: argparse.ArgumentParser, *, default: str | None, both: bool = False) -> None:
    which = "both, asyncio then trio" if both else "asyncio; validate: both"
    command.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default=default,
        help=f"the async backend to run on (default: {which})",
    )


def _endpoint_url(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--endpoint-url",
        default=None,
        help="the S3 service of an s3:// store (default: boto3's, e.g. from AWS_ENDPOINT_URL)",
    )


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


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a count of 1 or more")
    return value
