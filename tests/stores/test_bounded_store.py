"""A store whose writes stall cannot hold a step past its bounds: the write is abandoned.

Real time and real worker threads: a FilesystemStore whose every write blocks its
thread (for 20 s, or until the test ends) stands for a stalled disk or network.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest

import follower._turns._block
import follower._turns._endings
from follower import FilesystemStore, LiveTurns

from ..support.agents import ENDPOINT, ScriptedAgent

pytestmark = [pytest.mark.anyio, pytest.mark.waiting]

STALL_SECONDS = 20.0
DRAIN_SECONDS = 0.5
WRITE_BOUND_SECONDS = 0.5
CLEANUP_BOUND_SECONDS = 1.0
# What the block may take on top of its bounds: scheduling, a read, a listing.
SLACK_SECONDS = 2.0


class StallingStore(FilesystemStore):
    """Every write's thread blocks until released, as a stalled fsync would."""

    def __init__(self, root: Path, released: threading.Event) -> None:
        super().__init__(root)
        self.released = released
        self.stalled = 0
        self.first_stall = anyio.Event()
        self.token = anyio.lowlevel.current_token()

    def _put_sync(self, path: Path, key: str, body: bytes) -> None:
        self.stalled += 1
        anyio.from_thread.run_sync(self.first_stall.set, token=self.token)
        self.released.wait(STALL_SECONDS)
        super()._put_sync(path, key, body)


@pytest.fixture
def released() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # let the abandoned threads finish


@pytest.fixture(autouse=True)
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follower._turns._endings, "CLEANUP_WRITE_SECONDS", WRITE_BOUND_SECONDS)
    monkeypatch.setattr(follower._turns._endings, "CLEANUP_SECONDS", CLEANUP_BOUND_SECONDS)


@pytest.mark.parametrize("ending", ["returns", "raises", "cancelled"])
async def test_a_stalled_store_cannot_hold_the_block_past_its_bounds(
    tmp_path: Path, released: threading.Event, ending: str
) -> None:
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")
    store = StallingStore(tmp_path, released)
    bound = DRAIN_SECONDS + CLEANUP_BOUND_SECONDS + WRITE_BOUND_SECONDS + SLACK_SECONDS
    started = anyio.current_time()
    with anyio.fail_after(STALL_SECONDS / 2), anyio.CancelScope() as scope:
        try:
            async with (
                LiveTurns(
                    ENDPOINT,
                    store,
                    "steps/",
                    poll_interval_seconds=0.05,
                    drain_seconds=DRAIN_SECONDS,
                    client=agent.client(),
                ) as turns,
                turns.following("turn-1") as turn,
            ):
                turn.follow("t1")
                await store.first_stall.wait()
                if ending == "raises":
                    raise RuntimeError("the step failed")
                if ending == "cancelled":
                    scope.cancel()
                    await anyio.sleep_forever()
        except RuntimeError:
            assert ending == "raises"
    took = anyio.current_time() - started
    assert store.stalled >= 1, "the store was written to, and stalled"
    assert took < bound, f"the block took {took:.1f} s, its bounds {bound:.1f} s"
    assert not released.is_set()


async def test_a_callers_deadline_holds_around_a_body_that_raised(
    tmp_path: Path, released: threading.Event
) -> None:
    # The case: move_on_after(1) around a body that raised, its writes stalled.
    agent = ScriptedAgent()
    agent.add_task("t1")
    agent.publish("t1", "a")
    store = StallingStore(tmp_path, released)
    started = anyio.current_time()
    with anyio.move_on_after(1):
        try:
            async with (
                LiveTurns(
                    ENDPOINT, store, "steps/", poll_interval_seconds=0.05, client=agent.client()
                ) as turns,
                turns.following("turn-1") as turn,
            ):
                turn.follow("t1")
                await store.first_stall.wait()
                raise RuntimeError("the step failed")
        except RuntimeError:
            pass
    took = anyio.current_time() - started
    # Cleanup is shielded but bounded: the caller's deadline plus the cleanup bound.
    assert took < 1 + CLEANUP_BOUND_SECONDS + WRITE_BOUND_SECONDS + SLACK_SECONDS
