"""Ctrl-C pressed more than once during `follower follow --message`.

GNU ``timeout -s INT`` sends two, and so does an impatient user: the second must
not cut short what the first started: the turn's end mark, the task's cancel at
the agent and the step's last link (all bounded). A third quits at once.

Real processes against the reference agent on a loopback socket, both backends.
The agent holds the answer to ``tasks/cancel`` until the test lets it go, so
every press lands while that cleanup is under way: ordered on what the agent
and the command said, never on a sleep.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from follower._cli._exits import EXIT_INTERRUPTED
from follower._cli._interrupt import STILL_ENDING_LINE
from follower.testing import ReferenceAgent, TaskScript

from ..support.cli import CLI_WITH_CTRL_C, MAX_LINE_BYTES, serving
from ..support.stored import StoredTurn, read_turn

pytestmark = pytest.mark.anyio

# The command's cleanup after Ctrl-C: the task's cancel (5 s), the turn's marks and the
# step's (10 s each), with room for a busy machine.
CLEANUP_BOUNDS_SECONDS = 45.0


class CancelHoldingAgent(ReferenceAgent):
    """The reference agent, but a cancel (``CancelTask``, 0.3's ``tasks/cancel``) waits for
    ``release`` before it is answered."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.cancel_asked = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        # The reference agent's card names A2A 1.0, so the command asks with CancelTask.
        if b'"tasks/cancel"' in body or b'"CancelTask"' in body:
            self.cancel_asked.set()
            await self.release.wait()
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:  # the body is whole: what a client waits for next is its end
                await anyio.sleep_forever()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await super().__call__(scope, replay, send)


async def wait_for_line(stream: BufferedByteReceiveStream, text: str, seen: bytearray) -> None:
    """Read ``stream`` (into ``seen``) until a line holds ``text``."""
    while True:
        line = await stream.receive_until(b"\n", MAX_LINE_BYTES)
        seen.extend(line + b"\n")
        if text in line.decode():
            return


async def press_ctrl_c_during_the_cancel(
    agent: CancelHoldingAgent, url: str, backend: str, cwd: Path, *, presses: int
) -> tuple[int, str]:
    """Run `follow --message`, press Ctrl-C ``presses`` times (2 or 3) while the agent
    holds the task's cancel; how the command exited, and what it said on stderr.

    The first press once the first event shows; the second once the agent holds the
    cancel (the command is inside its cleanup); the third, if any, once the second
    was heard. With two, the cancel is answered once the second was heard.
    """
    process = await anyio.open_process(
        [
            *CLI_WITH_CTRL_C,
            "--backend",
            backend,
            "follow",
            url,
            "--poll",
            "0.05",
            "--message",
            "hi",
            "--store",
            "out",
        ],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    async with process:
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", MAX_LINE_BYTES)
            process.send_signal(signal.SIGINT)
            await agent.cancel_asked.wait()
            stderr, seen = BufferedByteReceiveStream(process.stderr), bytearray()
            process.send_signal(signal.SIGINT)
            # The second press is heard (a command that quit on it has said so too)
            # before anything else happens.
            await wait_for_line(stderr, "follower: interrupted again", seen)
            if presses == 3:
                process.send_signal(signal.SIGINT)  # quits with the cancel still held
            else:
                agent.release.set()
            with anyio.fail_after(CLEANUP_BOUNDS_SECONDS):
                said = await rest_of(stderr, seen)
                returncode = await process.wait()
        except BaseException:
            process.kill()
            raise
        finally:
            agent.release.set()
    return returncode, said


async def rest_of(stream: BufferedByteReceiveStream, seen: bytearray) -> str:
    try:
        while True:
            seen.extend(await stream.receive())
    except (anyio.EndOfStream, anyio.ClosedResourceError):
        pass
    return seen.decode()


def the_turn(cwd: Path, stderr: str) -> StoredTurn:
    """The one turn the run stored (under the task it named first)."""
    said = re.match(r"follower: task (\S+)\n", stderr)
    assert said, stderr
    return read_turn(cwd / "out" / "follow" / said.group(1), "turn-1")


async def test_a_second_ctrl_c_still_ends_the_turn_and_cancels_the_task(
    anyio_backend: str, tmp_path: Path
) -> None:
    agent = CancelHoldingAgent(script=TaskScript(events=10_000, interval_seconds=0.01))
    with anyio.fail_after(CLEANUP_BOUNDS_SECONDS + 30):
        async with serving(agent) as url:
            returncode, said = await press_ctrl_c_during_the_cancel(
                agent, url, anyio_backend, tmp_path, presses=2
            )
    # The turn is marked ended, canceled, and last; the cancel reached the agent.
    turn = the_turn(tmp_path, said)
    assert turn.next_turn == {"turn": None}, said
    assert turn.end is not None, said
    assert turn.end["state"] == "canceled"
    assert turn.end["next"] <= len(turn.events)  # at least this many are stored
    assert agent.statistics().canceled_tasks == 1
    # And the user was told why the second press did not quit.
    assert returncode == EXIT_INTERRUPTED, said
    assert STILL_ENDING_LINE in said
    assert "Traceback" not in said, said
    assert said.splitlines()[-1] == "follower: interrupted", said


async def test_a_third_ctrl_c_quits_at_once(anyio_backend: str, tmp_path: Path) -> None:
    agent = CancelHoldingAgent(script=TaskScript(events=10_000, interval_seconds=0.01))
    with anyio.fail_after(CLEANUP_BOUNDS_SECONDS + 30):
        async with serving(agent) as url:
            returncode, said = await press_ctrl_c_during_the_cancel(
                agent, url, anyio_backend, tmp_path, presses=3
            )
    assert returncode == EXIT_INTERRUPTED, said
    assert said.splitlines()[-1] == "follower: interrupted once more: quitting without waiting"
    assert "Traceback" not in said, said
    # It quit while the cancel was still held: what comes after it (the step's last
    # link) was never written; nothing waited.
    assert the_turn(tmp_path, said).next_turn is None
