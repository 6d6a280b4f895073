"""Running the ``follower`` command line as a user does, and finding what it left behind.

Every run is a real subprocess of the venv's interpreter, started in the test's
own folder, bounded by a timeout; its output is decoded text. What a run stored
is read back from its files by :mod:`tests.support.stored`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs
import httpx
from anyio.streams.buffered import BufferedByteReceiveStream

from follower.testing import ReferenceAgent, serve_agent

CLI = (sys.executable, "-m", "follower")
CONSOLE_SCRIPT = Path(sys.executable).parent / "follower"
# A shell gives its foreground job the default SIGINT handling; a test runner started
# in the background may not (its children then inherit SIGINT ignored, and Python
# installs no KeyboardInterrupt handler). This runs ``python -m follower`` as a
# terminal would, so that an interrupt reaches the command.
CLI_WITH_CTRL_C = (
    sys.executable,
    "-c",
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('follower', run_name='__main__', alter_sys=True)",
)
RUN_SECONDS = 60.0
MAX_LINE_BYTES = 1024 * 1024
# A command interrupted with Ctrl-C has this long to clean up and exit.
INTERRUPT_SECONDS = 20.0

VERDICT = "every followed turn is stored, contiguous, linked and ended"


# --- running the command -----------------------------------------------------------------


def run_cli(
    args: Sequence[str | os.PathLike[str]],
    cwd: Path,
    *,
    command: Sequence[str | os.PathLike[str]] = CLI,
    timeout: float = RUN_SECONDS,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``follower ARGS`` in ``cwd`` to its end; never raises on a non-zero exit.

    ``env``: variables set for the run, on top of this process's environment."""
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


async def run_cli_async(
    args: Sequence[str | os.PathLike[str]], cwd: Path, *, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` for async tests: the event loop (and any agent it serves) runs on.

    The caller bounds it (``anyio.fail_after``); a cancelled run is killed.
    """
    done = await anyio.run_process(
        [*CLI, *args],
        cwd=cwd,
        check=False,
        stdin=subprocess.DEVNULL,
        env=None if env is None else {**os.environ, **env},
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@attrs.define
class Interrupted:
    """What a run interrupted with Ctrl-C printed, and how it exited."""

    returncode: int
    first_line: str
    """The first line, without its newline."""
    stdout: str
    """What came after the first line."""
    stderr: str


async def run_until_first_line_then_interrupt(
    args: Sequence[str | os.PathLike[str]],
    cwd: Path,
    on_first_line: Callable[[str], Awaitable[None]] | None = None,
    *,
    signal_number: int = signal.SIGINT,
    times: int = 1,
) -> Interrupted:
    """Start ``follower ARGS``, wait for its first line on stdout, then press Ctrl-C.

    Ordered on the output itself: the interrupt is sent once the command has
    shown it is under way (and ``on_first_line`` has looked at it), never after
    a sleep. ``signal_number=signal.SIGKILL`` kills it instead: a worker that died.
    ``times=2``: Ctrl-C twice in a row, as an impatient user does.
    """
    stderr = bytearray()

    async def drain(stream: anyio.abc.ByteReceiveStream) -> None:
        async for chunk in stream:
            stderr.extend(chunk)

    async with await anyio.open_process(
        [*CLI_WITH_CTRL_C, *args], cwd=cwd, stdin=subprocess.DEVNULL
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, process.stderr)
                stdout = BufferedByteReceiveStream(process.stdout)
                first = await stdout.receive_until(b"\n", MAX_LINE_BYTES)
                if on_first_line is not None:
                    await on_first_line(first.decode())
                for _ in range(times):
                    process.send_signal(signal_number)
                rest = bytearray()
                with anyio.move_on_after(INTERRUPT_SECONDS) as waiting:
                    try:
                        while True:
                            rest.extend(await stdout.receive())
                    except (anyio.EndOfStream, anyio.ClosedResourceError):
                        pass
                    returncode = await process.wait()
                if waiting.cancelled_caught:
                    process.kill()
                    raise AssertionError(
                        f"still running {INTERRUPT_SECONDS} s after Ctrl-C; stderr: {stderr!r}"
                    )
        except BaseException:
            # Whatever went wrong here, the command must not outlive the test.
            process.kill()
            raise
    return Interrupted(returncode, first.decode(), rest.decode(), stderr.decode())


@attrs.define
class BackgroundRun:
    """A run started now and collected later, so that a slow one overlaps other tests."""

    args: tuple[str, ...]
    cwd: Path
    _process: subprocess.Popen[bytes]
    _stdout: Path
    _stderr: Path

    @classmethod
    def start(cls, args: Sequence[str], cwd: Path) -> BackgroundRun:
        cwd.mkdir(parents=True, exist_ok=True)
        stdout, stderr = cwd / "cli-stdout.txt", cwd / "cli-stderr.txt"
        # Files, not pipes: nobody reads a pipe while the run goes on, and a full one
        # would stall it.
        with stdout.open("wb") as out, stderr.open("wb") as err:
            process = subprocess.Popen(
                [*CLI, *args], cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL
            )
        return cls(tuple(args), cwd, process, stdout, stderr)

    def result(self, timeout: float = RUN_SECONDS) -> subprocess.CompletedProcess[str]:
        returncode = self._process.wait(timeout=timeout)
        return subprocess.CompletedProcess(
            [*CLI, *self.args],
            returncode,
            self._stdout.read_text(),
            self._stderr.read_text(),
        )

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()


# --- checking what a run printed ---------------------------------------------------------


def assert_no_traceback(result: subprocess.CompletedProcess[str] | Interrupted) -> None:
    assert "Traceback" not in result.stderr, result.stderr


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int | None) -> str:
    """The run failed with ``code`` (any non-zero code for None) and said why in one
    ``follower: error:`` line; that line's text.

    A ``follow`` names its task first, so that an interrupted run can be resumed,
    then the way it follows it: those lines may come before."""
    assert_no_traceback(result)
    lines = result.stderr.splitlines()
    # A bucket slow to answer its first listing (a busy machine) is said while it is
    # waited for: the line the command prints after a second, then its verdict.
    if lines and re.fullmatch(
        r"follower: waiting for .+ to answer \(giving up after \S+ s\)", lines[0]
    ):
        lines = lines[1:]
    said = re.fullmatch(r"follower: task (\S+)", lines[0]) if len(lines) == 3 else None
    if said and lines[1].startswith(f"follower: following task {said.group(1)} by "):
        lines = lines[2:]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("follower: error: "), result.stderr
    if code is None:
        assert result.returncode != 0, result.stderr
    else:
        assert result.returncode == code, (result.returncode, result.stderr)
    return lines[0].removeprefix("follower: error: ")


def json_lines(text: str) -> list[Any]:
    """Each line of ``text`` as JSON; every line must be one value."""
    return [json.loads(line) for line in text.splitlines()]


def printed_events(text: str, turn: str = "turn-1") -> list[Any]:
    """The events ``follow`` (or ``tail``, of one turn) printed: each line is
    ``{"turn", "index", "event"}``, the indexes counting from 0; the events alone."""
    lines = json_lines(text)
    assert [set(line) for line in lines] == [{"turn", "index", "event"}] * len(lines), lines
    assert [(line["turn"], line["index"]) for line in lines] == [
        (turn, index) for index in range(len(lines))
    ]
    return [line["event"] for line in lines]


def without_padding(event: Any) -> Any:
    """An event of the reference agent with its size padding dropped."""
    return {k: v for k, v in event.items() if k != "padding"}


# --- where a demo stored its step --------------------------------------------------------


def only_step(store: Path) -> Path:
    """The one step of cursor-read turns a demo run stored under ``store``: ``store/steps/<step>``.

    Its streamed step is beside it, ``<step>-streamed`` (:func:`streamed_step`)."""
    steps = [path for path in (store / "steps").iterdir() if not path.name.endswith("-streamed")]
    assert len(steps) == 1, steps
    return steps[0]


def streamed_step(store: Path) -> Path:
    """The demo run's streamed step: ``store/steps/<step>-streamed``, beside its first."""
    step = only_step(store)
    return step.with_name(f"{step.name}-streamed")


# --- agents and addresses ----------------------------------------------------------------


@asynccontextmanager
async def serving(agent: ReferenceAgent) -> AsyncIterator[str]:
    """Serve ``agent`` on a loopback port for the block; its base URL."""
    async with anyio.create_task_group() as tg:
        url: str = await tg.start(serve_agent, agent)
        yield url
        tg.cancel_scope.cancel()


class AgentWithoutLiveTrajectory(ReferenceAgent):
    """The reference agent, but its card offers no trajectory extension."""

    def card(self, base_url: str) -> dict[str, Any]:
        card = super().card(base_url)
        del card["capabilities"]["extensions"]
        return card


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def send_message(url: str, text: str) -> str:
    """Start a task on the agent at ``url`` with A2A ``message/send``; its id."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": "cli-test-1",
                "parts": [{"kind": "text", "text": text}],
            }
        },
    }
    async with httpx.AsyncClient() as client:
        response = await client.post(url, json=request)
    response.raise_for_status()
    task_id: str = response.json()["result"]["id"]
    return task_id


async def get_card(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        response = await client.get(url + ".well-known/agent-card.json")
    response.raise_for_status()
    card: dict[str, Any] = response.json()
    return card
