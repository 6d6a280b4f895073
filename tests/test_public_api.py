"""The public surface: exactly the names users import, re-exported from private modules."""

from __future__ import annotations

import inspect

import follower

DESIGN_NAMES = {
    # DESIGN §4
    "TrajectoryState",
    "TrajectoryBatch",
    "live_trajectory_endpoint",
    "follow_trajectory",
    "following_live_trajectory",
    "LiveTurn",
    "LiveTurns",
    "LiveTrajectoryChunks",
    "ObjectStore",
    "FilesystemStore",
    "MemoryStore",
    "FollowerError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "InvalidKeyError",
    "MalformedPageError",
    "read_live_trajectory",
    "StoredEvent",
    # the agent's errors, the malformed kinds, the other branches of the tree
    "AgentError",
    "TaskNotFoundError",
    "AgentRefusedError",
    "AgentUnavailableError",
    "PageNotAnObjectError",
    "PageFieldError",
    "UnknownStateError",
    "CursorMismatchError",
    "TaskMismatchError",
    "NoProgressError",
    "PageTooLargeError",
    "StoreError",
    "CorruptObjectError",
    "UsageError",
    "TurnStateError",
    "ReaderIdleError",
    "AgentCardError",
    "A2AProtocolError",
    "TaskTimeoutError",
    "PoolBusyError",
    "InvalidArgumentError",
    # a whole A2A turn
    "A2AAgent",
    "A2ATask",
    "connect_agent",
    "run_a2a_turn",
}


def test_exported_names_are_exactly_the_public_api() -> None:
    # Subpackages (follower.testing) appear as attributes once imported: not names.
    public = {
        name
        for name, value in vars(follower).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == DESIGN_NAMES


def test_every_export_lives_in_a_private_module() -> None:
    for name in DESIGN_NAMES:
        module = inspect.getmodule(getattr(follower, name))
        assert module is not None
        assert module.__name__.startswith("follower._"), name


def test_every_error_is_a_follower_error() -> None:
    errors = [getattr(follower, n) for n in DESIGN_NAMES if n.endswith("Error")]
    assert errors
    for error in errors:
        assert issubclass(error, follower.FollowerError), error


def test_the_sentinel_is_not_exported_and_not_an_error() -> None:
    from follower._errors import FollowingEnded

    assert not issubclass(FollowingEnded, follower.FollowerError)
    assert issubclass(FollowingEnded, Exception)
    assert "FollowingEnded" not in vars(follower)
