"""Ctrl-C while a command runs: the first cancels it, a third quits at once.

A ``KeyboardInterrupt`` lands wherever the program happens to be: inside the
event loop's own machinery, inside a shielded cleanup, after ``asyncio`` has
begun to close. Received as a signal instead, the first Ctrl-C is an ordinary
cancellation of the command (its turns are ended, its task is cancelled at the
agent, as on any failure) on both backends alike. That cleanup is bounded, and
it is what a resumed run and the agent rely on, so a second Ctrl-C (an
impatient user, or GNU ``timeout -s INT``, which sends two) only says what is
still being done; a third, for a user who will not wait even for that, ends
the process at once, quietly, with the same code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING

import anyio

from ._exits import EXIT_INTERRUPTED

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable

INTERRUPTED_LINE = "follower: interrupted"
STILL_ENDING_LINE = (
    f"{INTERRUPTED_LINE} again: still marking the turn ended and cancelling the task "
    "(bounded); Ctrl-C once more to quit without them"
)


async def run_interruptible(
    command: Callable[[argparse.Namespace], Awaitable[int]], args: argparse.Namespace
) -> int:
    """Run ``command(args)``; its exit code, or :data:`EXIT_INTERRUPTED` after a Ctrl-C.

    Whatever the cancelled command raises on its way out is dropped: the user
    asked it to stop, and it did.
    """
    interrupted = False
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:
            command_scope = anyio.CancelScope()

            async def watch() -> None:
                nonlocal interrupted
                presses = 0
                async for _ in signals:
                    presses += 1
                    if presses == 1:
                        interrupted = True
                        command_scope.cancel()
                    elif presses == 2:
                        print(STILL_ENDING_LINE, file=sys.stderr, flush=True)
                    else:
                        quit_now()

            tg.start_soon(watch)
            try:
                with command_scope:
                    code = await command(args)
            except Exception:
                if not interrupted:
                    raise
            finally:
                tg.cancel_scope.cancel()
    if interrupted:
        print(INTERRUPTED_LINE, file=sys.stderr, flush=True)
        ignore_further_interrupts()
        return EXIT_INTERRUPTED
    return code


def ignore_further_interrupts() -> None:
    """Let the process exit in peace: a Ctrl-C now would only print a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def quit_now() -> None:
    """A third Ctrl-C: say so, and end the process without waiting for its cleanup."""
    with contextlib.suppress(OSError, ValueError):  # a closed stdout has nothing left to say
        sys.stdout.flush()
    print(f"{INTERRUPTED_LINE} once more: quitting without waiting", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)
