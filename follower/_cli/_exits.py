"""The command line's exit codes, and the one line each failure a user can act on ends with.

One code per failure a user can act on; docs/errors.md lists them, and the
top-level help (``EXIT_CODES_HELP``) too.
"""

from __future__ import annotations

from .._errors import (
    AgentUnavailableError,
    FollowerError,
    StoreError,
    TaskNotFoundError,
    TurnExistsError,
    UsageError,
    WriterGoneError,
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NO_LIVE_TRAJECTORY = 4  # follow --via cursor: the card offers no cursor reads
EXIT_UNKNOWN_TASK = 5
EXIT_BAD_STORE = 6
EXIT_TURN_EXISTS = 7
EXIT_BOUND_BROKEN = 8  # validate: a follower outlived its step, or a bound broke
EXIT_INCOMPLETE = 9  # follow: the task ended, its trajectory was not read to its end
EXIT_WRITER_GONE = 10  # tail: a turn's writer stopped without an end mark
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `cat` or `grep` stopped by `| head`

EXIT_CODES_HELP = f"""\
exit status: {EXIT_OK} done; {EXIT_ERROR} an error; {EXIT_USAGE} usage (a bad argument, a \
missing extra); {EXIT_UNREACHABLE} the agent is unreachable; {EXIT_NO_LIVE_TRAJECTORY} follow \
--via cursor: the agent offers no live trajectory; {EXIT_UNKNOWN_TASK} unknown task; \
{EXIT_BAD_STORE} bad store; {EXIT_TURN_EXISTS} the turn is stored for another task; \
{EXIT_BOUND_BROKEN} validate: a bound broke; {EXIT_INCOMPLETE} follow: the task's trajectory \
was not read to its end; {EXIT_WRITER_GONE} tail: a turn's writer stopped without an end mark; \
{EXIT_INTERRUPTED} interrupted (Ctrl-C); {EXIT_BROKEN_PIPE} stdout closed (e.g. by '| head')."""


class CommandError(Exception):
    """A failure to report as one line, with its exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def explain(exc: BaseException) -> tuple[str, int] | None:
    """One line and an exit code for a failure a user can act on, else None."""
    if isinstance(exc, BaseExceptionGroup):
        # A task group wraps what its body raised: explain the first thing we know.
        for inner in exc.exceptions:
            explained = explain(inner)
            if explained is not None:
                return explained
        return None
    if isinstance(exc, CommandError):
        return str(exc), exc.code
    if isinstance(exc, AgentUnavailableError):
        return f"the agent is unreachable: {exc}", EXIT_UNREACHABLE
    if isinstance(exc, TaskNotFoundError):
        return f"unknown task: {exc}", EXIT_UNKNOWN_TASK
    if isinstance(exc, WriterGoneError):
        return str(exc), EXIT_WRITER_GONE
    if isinstance(exc, TurnExistsError):
        return f"store: {exc}", EXIT_TURN_EXISTS
    if isinstance(exc, StoreError):
        return f"store: {exc}", EXIT_BAD_STORE
    if isinstance(exc, UsageError):
        return str(exc), EXIT_USAGE
    if isinstance(exc, FollowerError):
        return str(exc), EXIT_ERROR
    return None


def raised(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``exc`` is a ``kind``, bare or inside task groups' exception groups.

    Trio raises a Ctrl-C inside the run's nursery; a closed stdout fails the
    printing task of a task group.
    """
    if isinstance(exc, BaseExceptionGroup):
        return any(raised(inner, kind) for inner in exc.exceptions)
    return isinstance(exc, kind)
