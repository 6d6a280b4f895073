"""The command line on a store that never answers: it says what it waits for, and ends.

The endpoint is a real loopback socket that takes connections and never answers
(tests/support/silent.py); every run is a real subprocess. Without a bound of its
own, the bucket's pre-flight waited for botocore's 3 attempts x 30 s, and a
Ctrl-C for the worker thread the interpreter joined at exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from follower._cli._main import EXIT_BAD_STORE, EXIT_INTERRUPTED
from follower.testing import ReferenceAgent, TaskScript

from ..support.cli import CLI_WITH_CTRL_C, MAX_LINE_BYTES, assert_no_traceback, run_cli, serving
from ..support.s3 import FAKE_AWS_ENVIRONMENT
from ..support.silent import s3_that_never_stores, silent_endpoint

pytestmark = [pytest.mark.anyio, pytest.mark.waiting]

BACKENDS = ["asyncio", "trio"]
STORE = "s3://bucket/steps/"
# What the issue asks: a silent store ends the command by itself within 30 s.
COMMAND_SECONDS = 30.0
# A Ctrl-C ends it at once; this is room for a busy machine, not a speed.
INTERRUPT_SECONDS = 10.0
# A turn's cleanup (10 s) and the step's end (10 s), with room: the writes a cancel
# still tries, each bounded, before the process ends.
CLEANUP_BOUNDS_SECONDS = 30.0
WAITING = "follower: waiting for "


@pytest.fixture(scope="module")
def silent_url() -> Iterator[str]:
    with silent_endpoint() as url:
        yield url


def command_args(backend: str, command: str, silent_url: str) -> list[str]:
    args = {
        "tail": [STORE, "", "turn-1", "--idle-timeout", "20"],
        # No agent listens there: the bucket is checked before the agent is asked.
        "follow": ["http://127.0.0.1:9/", "--message", "hi", "--store", STORE],
    }[command]
    return ["--backend", backend, command, *args, "--endpoint-url", silent_url]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("command", ["tail", "follow"])
def test_a_silent_bucket_ends_the_command_with_one_line_and_exit_6(
    backend: str, command: str, tmp_path: Path, silent_url: str
) -> None:
    try:
        result = run_cli(
            command_args(backend, command, silent_url),
            tmp_path,
            env=FAKE_AWS_ENVIRONMENT,
            timeout=COMMAND_SECONDS,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"still running {COMMAND_SECONDS} s on a silent store: {exc.stderr!r}"
        ) from None
    assert_no_traceback(result)
    assert result.returncode == EXIT_BAD_STORE, result.stderr
    waiting, error = result.stderr.splitlines()
    # What it waited for, said while it waited; then why it gave up.
    assert waiting.startswith(f"{WAITING}{STORE} at {silent_url} to answer"), waiting
    assert error.startswith(f"follower: error: store: cannot use {STORE} at {silent_url}: "), error
    assert "no answer within" in error, error
    assert result.stdout == ""


PRESSES = pytest.mark.parametrize("presses", [1, 2], ids=["ctrl-c", "ctrl-c-twice"])


@PRESSES
async def test_ctrl_c_ends_a_command_waiting_for_a_silent_bucket(
    anyio_backend: str, presses: int, tmp_path: Path, silent_url: str
) -> None:
    args = command_args(anyio_backend, "tail", silent_url)
    with anyio.fail_after(COMMAND_SECONDS):
        async with await open_command(args, tmp_path) as process:
            assert process.stderr is not None
            try:
                lines = BufferedByteReceiveStream(process.stderr)
                # Ordered on what it says: pressed once it says it waits for the store.
                waiting = await lines.receive_until(b"\n", MAX_LINE_BYTES)
                assert waiting.decode().startswith(WAITING), waiting
                returncode, stderr = await interrupt(process, lines, presses)
            except BaseException:
                process.kill()
                raise
    assert returncode == EXIT_INTERRUPTED, stderr
    assert "follower: interrupted" in stderr, stderr
    assert "Traceback" not in stderr, stderr


async def test_ctrl_c_ends_a_follow_whose_store_put_hangs_within_the_cleanup_bounds(
    anyio_backend: str, tmp_path: Path
) -> None:
    # A Ctrl-C is a cancel: the turn's end mark is still tried, each write within its
    # bound (docs/design.md), and then the process ends; its hung put does not hold it.
    agent = ReferenceAgent(script=TaskScript(events=50, interval_seconds=0.1))
    with s3_that_never_stores() as s3, anyio.fail_after(2 * CLEANUP_BOUNDS_SECONDS):
        async with serving(agent) as url:
            follow = ["follow", url, "--message", "hi", "--poll", "0.05", "--store", STORE]
            args = ["--backend", anyio_backend, *follow, "--endpoint-url", s3.url]
            async with await open_command(args, tmp_path) as process:
                assert process.stderr is not None
                try:
                    # Ordered on what the endpoint saw: pressed once a write hangs there.
                    await anyio.to_thread.run_sync(s3.put_seen.wait, abandon_on_cancel=True)
                    lines = BufferedByteReceiveStream(process.stderr)
                    returncode, stderr = await interrupt(
                        process, lines, 1, within=CLEANUP_BOUNDS_SECONDS
                    )
                except BaseException:
                    process.kill()
                    raise
    assert returncode == EXIT_INTERRUPTED, stderr
    assert "follower: interrupted" in stderr, stderr
    assert "Traceback" not in stderr, stderr


async def open_command(args: list[str], cwd: Path) -> anyio.abc.Process:
    return await anyio.open_process(
        [*CLI_WITH_CTRL_C, *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        env={**os.environ, **FAKE_AWS_ENVIRONMENT},
    )


async def interrupt(
    process: anyio.abc.Process,
    stderr: BufferedByteReceiveStream,
    presses: int,
    *,
    within: float = INTERRUPT_SECONDS,
) -> tuple[int, str]:
    """Press Ctrl-C ``presses`` times; how the command exited, and what else it said."""
    for _ in range(presses):
        process.send_signal(signal.SIGINT)
    said = b""
    with anyio.fail_after(within):
        try:
            while True:
                said += await stderr.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            pass
        returncode = await process.wait()
    return returncode, said.decode()
