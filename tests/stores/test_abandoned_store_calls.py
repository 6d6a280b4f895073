"""A store call that a step abandoned cannot hold the process either: it exits within the bounds.

Each case is a real process (this interpreter, on each backend) whose store
calls block for ever: a FilesystemStore whose writes wait on an event nobody
sets (a stalled fsync), an S3Store whose endpoint takes connections and never
answers. The step abandons them at its bounds; the process must then exit, not
wait for the threads. The bound asserted is generous: what the protocol promises
is that the process ends, not how fast.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.s3 import FAKE_AWS_ENVIRONMENT
from ..support.silent import silent_endpoint

pytestmark = pytest.mark.waiting

BACKENDS = ["asyncio", "trio"]
ROOT = Path(__file__).resolve().parents[2]
# The block's bounds below (drain 0.5 s, cleanup 1 s; the S3 turn's entry 10 s) and
# generous room for a busy machine: a process that waits for its threads never ends.
PROCESS_SECONDS = 45.0

# The step's bounds made short, then a turn whose every put blocks for ever.
STALLED_DISK = """
import sys, threading
import anyio, anyio.from_thread, anyio.lowlevel
import follower._turns._endings, follower._turns._block
from follower import FilesystemStore, LiveTurns
from tests.support.agents import ENDPOINT, ScriptedAgent

follower._turns._endings.CLEANUP_WRITE_SECONDS = 0.5
follower._turns._endings.CLEANUP_SECONDS = 1.0
NEVER = threading.Event()

class StalledStore(FilesystemStore):
    def _put_sync(self, path, key, body):
        anyio.from_thread.run_sync(self.stalled.set, token=self.token)
        NEVER.wait()

async def main():
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")
    store = StalledStore(sys.argv[2])
    store.token = anyio.lowlevel.current_token()
    store.stalled = anyio.Event()
    async with (
        LiveTurns(ENDPOINT, store, "steps/", poll_interval_seconds=0.05, drain_seconds=0.5,
                  client=agent.client()) as turns,
        turns.following("turn-1") as turn,
    ):
        turn.follow("t1")
        await store.stalled.wait()
    print("the block ended", flush=True)

anyio.run(main, backend=sys.argv[1])
"""

# A turn of a bucket whose endpoint never answers: entering it gives up after 10 s.
HUNG_S3 = """
import sys
import anyio
from follower import LiveTurns, StoreError
from follower.s3 import S3Store

async def main():
    store = S3Store("bucket", endpoint_url=sys.argv[2], region_name="us-east-1")
    try:
        async with (
            LiveTurns("http://127.0.0.1:9/", store, "steps/", poll_interval_seconds=0.05) as turns,
            turns.following("turn-1"),
        ):
            raise AssertionError("entered a turn of a store that never answers")
    except StoreError as exc:
        print("the block ended:", exc, flush=True)

anyio.run(main, backend=sys.argv[1])
"""


def run_program(program: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``program`` to its end within PROCESS_SECONDS; what it printed."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", program, *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=PROCESS_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"the process was still running {PROCESS_SECONDS} s on, its store calls "
            f"abandoned; it printed {exc.stdout!r}, {exc.stderr!r}"
        ) from None
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stalled_disk_does_not_hold_the_process_after_the_step(
    backend: str, tmp_path: Path
) -> None:
    printed = run_program(STALLED_DISK, backend, str(tmp_path))
    assert printed == "the block ended\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hung_s3_endpoint_does_not_hold_the_process_after_the_step(backend: str) -> None:
    with silent_endpoint() as url:
        printed = run_program(HUNG_S3, backend, url, env={**os.environ, **FAKE_AWS_ENVIRONMENT})
    assert printed.startswith("the block ended: "), printed


# A put whose fsync never returns, abandoned: the process exits with its temp file written.
EXIT_MID_PUT = """
import functools, os, sys, threading
import anyio, anyio.from_thread, anyio.lowlevel
from follower import FilesystemStore

NEVER = threading.Event()

async def main():
    token = anyio.lowlevel.current_token()
    syncing = anyio.Event()

    def stalled_fsync(fd):
        anyio.from_thread.run_sync(syncing.set, token=token)
        NEVER.wait()

    os.fsync = stalled_fsync
    store = FilesystemStore(sys.argv[2])
    async with anyio.create_task_group() as tg:
        put = functools.partial(store.put, "a/b.json", b"x" * 100_000, content_type="text/plain")
        tg.start_soon(put)
        await syncing.wait()
        names = [name for _, _, files in os.walk(sys.argv[2]) for name in files]
        print("written:", len(names), flush=True)
        tg.cancel_scope.cancel()
    print("the put was abandoned", flush=True)

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_process_that_exits_mid_put_leaves_no_temporary_file(
    backend: str, tmp_path: Path
) -> None:
    printed = run_program(EXIT_MID_PUT, backend, str(tmp_path))
    # The temporary file was there while its fsync stalled; gone once the process was.
    assert printed == "written: 1\nthe put was abandoned\n"
    assert [path for path in tmp_path.rglob("*") if path.is_file()] == []
