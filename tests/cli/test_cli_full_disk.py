"""``follow`` into a folder on a full disk: the store's fault, exit 6, as on a read-only one.

The disk is real: a 64 KiB tmpfs mounted for the run alone (a mount namespace
of its own, ``unshare``), where the turn's small marks fit and its chunks of
100 KB events do not (ENOSPC). Before, the end mark landed, said incomplete, and
``follow`` blamed the agent's pages with exit 9.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from follower._cli._main import EXIT_BAD_STORE
from follower.testing import ReferenceAgent, TaskScript

from ..support.cli import serving

pytestmark = pytest.mark.anyio

SCRIPT = TaskScript(events=3, interval_seconds=0.01, event_bytes=100_000)
# Mounts a small tmpfs on $1 in a mount namespace of this run's own, then runs the rest.
ON_A_FULL_DISK = (
    "unshare",
    "--map-root-user",
    "--mount",
    "sh",
    "-c",
    'mount -t tmpfs -o size=64k tmpfs "$1" && shift && exec "$@"',
    "sh",
)


def can_mount_a_small_disk(folder: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(
        [*ON_A_FULL_DISK, str(folder), "true"], capture_output=True, timeout=30, check=False
    )
    return done.returncode == 0


async def test_follow_on_a_full_disk_exits_6_and_names_the_store(
    anyio_backend: str, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if not can_mount_a_small_disk(disk):
        pytest.skip("this system lets no process mount a tmpfs of its own (unshare)")
    agent = ReferenceAgent(script=SCRIPT)
    with anyio.fail_after(60):
        async with serving(agent) as url:
            done = await anyio.run_process(
                [
                    *ON_A_FULL_DISK,
                    str(disk),
                    *(sys.executable, "-m", "follower", "--backend", anyio_backend),
                    *("follow", url, "--message", "hi", "--poll", "0.05", "--store", str(disk)),
                ],
                cwd=tmp_path,
                check=False,
                stdin=subprocess.DEVNULL,
            )
    stderr = done.stderr.decode()
    assert done.returncode == EXIT_BAD_STORE, stderr
    last = stderr.splitlines()[-1]
    assert last.startswith("follower: error: store: "), stderr
    assert "No space left on device" in last, stderr
