"""The public surface: exactly the names users import, re-exported from private modules."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import follower
import follower.testing

DESIGN_NAMES = {
    # docs/protocol.md and the README
    "TrajectoryState",
    "TrajectoryBatch",
    "live_trajectory_endpoint",
    "follow_trajectory",
    "FollowOutcome",
    "following_live_trajectory",
    "LiveTurn",
    "LiveTurns",
    "LiveTurnStatistics",
    "LiveTurnsStatistics",
    "TurnProgress",
    "LiveTrajectoryChunks",
    "ObjectStore",
    "FilesystemStore",
    "MemoryStore",
    "FollowerError",
    "ObjectExistsError",
    "ObjectConflictError",
    "ObjectNotFoundError",
    "InvalidKeyError",
    "MalformedPageError",
    "read_live_trajectory",
    "StoredEvent",
    "TurnEnd",
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
    "PageTooDeepError",
    "PageNumberError",
    "EventTooLargeError",
    "TooManyEventsError",
    "StoreError",
    "CorruptObjectError",
    "StoreEscapeError",
    "StoreNotFoundError",
    "StoreAccessDeniedError",
    "StoreUnavailableError",
    "UsageError",
    "TurnStateError",
    "ClientClosedError",
    "TurnExistsError",
    "TurnConflictError",
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
    "follow_a2a_task",
    "run_a2a_turn",
}


def test_exported_names_are_exactly_the_public_api() -> None:
    # Subpackages (follower.testing, follower.s3) appear as attributes once imported: not names.
    public = {
        name
        for name in dir(follower)
        if not name.startswith("_") and not inspect.ismodule(getattr(follower, name))
    }
    assert public == DESIGN_NAMES


def test_every_export_lives_in_a_private_module() -> None:
    values = {name: getattr(follower, name) for name in DESIGN_NAMES}
    private = [m for n, m in sys.modules.items() if n.startswith("follower._")]
    for name, value in values.items():
        homes = [m.__name__ for m in private if vars(m).get(name) is value]
        assert homes, f"{name} is defined in no private module"


def test_all_lists_the_public_api() -> None:
    assert set(follower.__all__) == DESIGN_NAMES
    assert len(follower.__all__) == len(DESIGN_NAMES)
    testing_public = {
        name
        for name, value in vars(follower.testing).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert set(follower.testing.__all__) == testing_public


@pytest.mark.parametrize(
    ("package", "names"),
    [(follower, sorted(DESIGN_NAMES)), (follower.testing, follower.testing.__all__)],
    ids=["follower", "follower.testing"],
)
def test_public_classes_and_functions_report_the_public_module(
    package: Any, names: list[str]
) -> None:
    for name in names:
        value = getattr(package, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ == package.__name__, name


# Made by the turn's block for the body, never by users: its parameter is the block.
_NOT_USER_SIGNATURES = {"LiveTurn.__init__"}


def _public_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    for package in (follower, follower.testing):
        for name in package.__all__:
            value = getattr(package, name)
            if inspect.isfunction(value):
                yield name, value
            elif inspect.isclass(value) and not issubclass(value, BaseException):
                for attr, member in vars(value).items():
                    if attr == "__init__" or not attr.startswith("_"):
                        function = getattr(member, "__func__", member)
                        if isinstance(member, property):
                            function = member.fget
                        if inspect.isfunction(function):
                            yield f"{name}.{attr}", function


def test_no_private_type_in_a_public_signature() -> None:
    checked = 0
    for where, function in _public_callables():
        if where in _NOT_USER_SIGNATURES:
            continue
        annotations = " ".join(str(a) for a in function.__annotations__.values())
        private = re.findall(r"(?<![\w.])_[A-Za-z]\w*", annotations)
        assert not private, f"{where} names private types {private}: {annotations}"
        checked += 1
    assert checked > 40


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
