"""The public face: every public module, its names, and the fences on its classes.

The public modules are ``follower`` (the everyday API and the error tree),
``follower.lowlevel`` (the building blocks under it), ``follower.testing``,
``follower.temporal`` and ``follower.s3``. For each: ``__all__`` is a sorted tuple
of exactly its public names; every name reports a public module; every concrete
class is ``typing.final``; every class only the library makes has no public
constructor (``follower._public.NoPublicConstructor``).
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Protocol

import pytest

import follower
from follower._public import NoPublicConstructor

PUBLIC_MODULES = (
    "follower",
    "follower.lowlevel",
    "follower.testing",
    "follower.temporal",
    "follower.s3",
)
# A public module that only defines the types a Temporal workflow imports: it has no
# __all__ tier of its own, its names are re-exported by follower.temporal.
TYPES_ONLY_MODULES = ("follower.temporal.workflow_types",)

EVERYDAY_NAMES = {
    # a step's turns
    "LiveTurns",
    "following_live_trajectory",
    "LiveTurn",
    "TurnProgress",
    "LiveTurnStatistics",
    "LiveTurnsStatistics",
    "TrajectoryState",
    # a whole A2A turn
    "A2AAgent",
    "A2ATask",
    "connect_agent",
    "follow_a2a_task",
    "run_a2a_turn",
    # how a task is followed: cursor reads, its stream, or polls
    "TaskSource",
    "Via",
    # stores
    "ObjectStore",
    "FilesystemStore",
    "MemoryStore",
    # reading a step back
    "read_live_trajectory",
    "StoredEvent",
    "TurnEnd",
    # the error tree (docs/errors.md)
    "FollowerError",
    "AgentError",
    "TaskNotFoundError",
    "AgentRefusedError",
    "AgentUnavailableError",
    "AgentCardError",
    "A2AProtocolError",
    "TaskTimeoutError",
    "MalformedPageError",
    "MalformedPageReason",
    "StoreError",
    "ObjectExistsError",
    "ObjectConflictError",
    "ObjectNotFoundError",
    "CorruptObjectError",
    "StoreEscapeError",
    "StoreNotFoundError",
    "StoreAccessDeniedError",
    "StoreUnavailableError",
    "PoolBusyError",
    "UsageError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "TurnStateError",
    "ClientClosedError",
    "TurnExistsError",
    "TurnConflictError",
    "ReaderIdleError",
    "WriterGoneError",
}
LOWLEVEL_NAMES = {
    "follow_trajectory",
    "FollowOutcome",
    "TrajectoryBatch",
    "LiveTrajectoryChunks",
    "live_trajectory_endpoint",
}

# Objects only the library makes: the caller is handed one, never builds one.
LIBRARY_MADE = {
    "follower.LiveTurn",
    "follower.A2AAgent",
    "follower.A2ATask",
    "follower.temporal.StepAttempt",
}
# Values the library returns (statistics, progress, stored events, a read's outcome) are
# frozen attrs values, and keep their constructor, as trio's statistics do: a caller's
# own tests build them to compare with. The fence is for resources, whose state only the
# library may set up.

# The one concrete class meant to be subclassed: a test's misbehaving agent is a
# ReferenceAgent with one handler overridden (docs/testing.md).
MEANT_FOR_SUBCLASSING = {"follower.testing.ReferenceAgent"}


def module(name: str) -> ModuleType:
    return importlib.import_module(name)


def public_names(package: ModuleType) -> set[str]:
    """The names a module binds that are not private and not submodules."""
    return {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }


def exported() -> Iterator[tuple[str, str, Any]]:
    """``(public module, name, value)`` for every name of every public module."""
    for name in PUBLIC_MODULES:
        package = module(name)
        for attr in package.__all__:
            yield name, attr, getattr(package, attr)


def concrete_classes() -> Iterator[tuple[str, type]]:
    """Every exported class that can be made: not an error, an enum or a protocol.

    Errors are a tree callers catch by branch and may extend (a caller's store
    raises its own subclasses); an enum with members cannot be subclassed anyway;
    a protocol is for the caller to implement.
    """
    for where, attr, value in exported():
        if not inspect.isclass(value):
            continue
        if issubclass(value, BaseException | enum.Enum):
            continue
        if Protocol in getattr(value, "__mro__", ()) or getattr(value, "_is_protocol", False):
            continue
        yield f"{where}.{attr}", value


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_a_sorted_tuple_of_exactly_the_public_names(name: str) -> None:
    package = module(name)
    assert isinstance(package.__all__, tuple), name
    assert list(package.__all__) == sorted(set(package.__all__)), name
    assert set(package.__all__) == public_names(package), name


def test_the_everyday_tier_and_the_lowlevel_tier_hold_the_names_the_docs_give() -> None:
    assert set(follower.__all__) == EVERYDAY_NAMES
    assert set(follower.lowlevel.__all__) == LOWLEVEL_NAMES
    assert follower.lowlevel is module("follower.lowlevel")


def test_no_name_is_exported_by_two_public_modules() -> None:
    seen: dict[int, str] = {}
    for where, attr, value in exported():
        if inspect.isclass(value) or inspect.isfunction(value):
            assert id(value) not in seen, f"{where}.{attr} is also {seen[id(value)]}"
            seen[id(value)] = f"{where}.{attr}"


def test_every_name_reports_a_public_module() -> None:
    checked = 0
    for where, attr, value in exported():
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        home = value.__module__
        assert not any(part.startswith("_") for part in home.split(".")), (where, attr, home)
        assert home == where or home in TYPES_ONLY_MODULES, (where, attr, home)
        assert getattr(module(home), attr) is value, (where, attr)
        checked += 1
    assert checked > 60


def test_every_concrete_public_class_is_final() -> None:
    unfenced = {name for name, cls in concrete_classes() if not getattr(cls, "__final__", False)}
    assert unfenced == MEANT_FOR_SUBCLASSING


def test_every_class_the_library_alone_makes_has_no_public_constructor() -> None:
    classes = dict(concrete_classes())
    assert set(classes) >= LIBRARY_MADE, sorted(LIBRARY_MADE - set(classes))
    unfenced = set()
    for name in LIBRARY_MADE:
        cls = classes[name]
        if isinstance(cls, NoPublicConstructor):
            with pytest.raises(TypeError, match="has no public constructor"):
                cls()
        else:
            unfenced.add(name)
    assert not unfenced, sorted(unfenced)


def test_a_class_callers_make_keeps_its_constructor() -> None:
    # The fence is for the library's own objects only: the metaclass on a class
    # callers build (a store, LiveTurns, a test agent) would break their code.
    made_by_callers = {n: c for n, c in concrete_classes() if n not in LIBRARY_MADE}
    assert "follower.LiveTurns" in made_by_callers
    for name, cls in made_by_callers.items():
        assert not isinstance(cls, NoPublicConstructor), name


def test_the_fence_refuses_a_call_and_lets_the_library_make_one() -> None:
    class Made(metaclass=NoPublicConstructor):
        def __init__(self, value: int) -> None:
            self.value = value

    with pytest.raises(TypeError, match="has no public constructor"):
        Made(1)
    made = Made._create(2)  # type: ignore[attr-defined]
    assert isinstance(made, Made)
    assert made.value == 2


def _public_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    for where, attr, value in exported():
        if inspect.isfunction(value):
            yield f"{where}.{attr}", value
        elif inspect.isclass(value) and not issubclass(value, BaseException):
            for member_name, member in vars(value).items():
                if member_name == "__init__" or not member_name.startswith("_"):
                    function = getattr(member, "__func__", member)
                    if isinstance(member, property):
                        function = member.fget
                    if inspect.isfunction(function):
                        yield f"{where}.{attr}.{member_name}", function


# Made by the turn's block for the body, never by users: its parameter is the block.
_NOT_USER_SIGNATURES = {"follower.LiveTurn.__init__"}


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


def test_every_exported_error_is_a_follower_error_and_lives_at_the_top() -> None:
    for where, attr, value in exported():
        if inspect.isclass(value) and issubclass(value, BaseException):
            assert issubclass(value, follower.FollowerError), (where, attr)
            assert where == "follower", f"{where}.{attr}: errors stay in follower"


def test_the_sentinel_is_not_exported_and_not_an_error() -> None:
    from follower._errors import FollowingEnded

    assert not issubclass(FollowingEnded, follower.FollowerError)
    assert issubclass(FollowingEnded, Exception)
    for name in PUBLIC_MODULES:
        assert "FollowingEnded" not in vars(module(name))
