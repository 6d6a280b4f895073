"""Playing a script: one example's world run on a fresh virtual clock, with a chosen follower.

:func:`run_step` runs a :class:`~tests.properties.scripts.StepScript` once, in a
fresh event loop on a fresh virtual clock (trio ``MockClock`` or ``looptime``),
with the library's follower or a :class:`Variant` of it, and hands back the
:class:`~tests.properties.world.World` with everything it recorded.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import attrs
import pytest

import follower._reading._follow
import follower._turns._block
from follower.lowlevel import TrajectoryBatch

from ..support.virtual_time import virtual_clock
from .records import FollowerRecord
from .scripts import StepScript
from .world import World


@attrs.frozen
class Variant:
    """A follower under test: the library, or the library with pieces replaced.

    ``patches``: (object, attribute, value) set for the duration of each example.
    ``backends``: where it can run at all.
    """

    name: str
    patches: tuple[tuple[Any, str, Any], ...] = ()
    backends: tuple[str, ...] = ("asyncio", "trio")


LIBRARY = Variant("follower")


def _tracked_follow(world: World, real: Callable[..., Any]) -> Callable[..., Any]:
    """The turns' follower, counting live followers and the batches their sink accepted."""

    @functools.wraps(real)
    async def follow_task(endpoint: str, tid: str, sink: Any, **options: Any) -> Any:
        record = world.current.followers.setdefault(tid, FollowerRecord(tid))
        record.starts += 1
        record.alive += 1

        async def accepting(batch: TrajectoryBatch) -> None:
            await sink(batch)
            record.accepted.append(batch)

        try:
            return await real(endpoint, tid, accepting, **options)
        finally:
            record.alive -= 1
            record.ended = world.mark()

    return follow_task


@contextmanager
def _quiet_library() -> Iterator[None]:
    # Thousands of examples' worth of captured records only slow the run down.
    # What is logged is tested elsewhere (test_logs.py). The modules' loggers sit
    # under "follower" and take its level.
    logger = logging.getLogger("follower")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_step(script: StepScript, backend: str, variant: Variant = LIBRARY) -> World:
    """Run ``script`` once on ``backend`` with ``variant``'s follower; return what happened."""
    world = World(script, backend)
    with pytest.MonkeyPatch.context() as patch, _quiet_library():
        patch.setattr(
            follower._reading._ways,  # where a turn's block finds the cursor read loop
            "follow_task",
            _tracked_follow(world, follower._reading._follow.follow_task),
        )
        # The world places "retry" anchors where the backoff ends (retry_delay at
        # its ceiling): the jitter is pinned there. It is tested in test_retries.py.
        patch.setattr(follower._reading._follow, "backoff_fraction", lambda: 1.0)
        for target, name, value in variant.patches:
            patch.setattr(target, name, value)
        try:
            anyio.run(world.main, backend=backend, backend_options=virtual_clock(backend))
        except BaseException as exc:
            world.crash = exc
    return world
