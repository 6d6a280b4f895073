"""Follow an A2A agent's live trajectory while a step runs, store it as it is read,
and never outlive the step that started it."""

from importlib import metadata as _metadata

from ._a2a import A2AAgent as A2AAgent
from ._a2a import A2ATask as A2ATask
from ._a2a import connect_agent as connect_agent
from ._a2a_turn import follow_a2a_task as follow_a2a_task
from ._a2a_turn import run_a2a_turn as run_a2a_turn
from ._chain import TurnProgress as TurnProgress
from ._chunks import LiveTrajectoryChunks as LiveTrajectoryChunks
from ._discovery import live_trajectory_endpoint as live_trajectory_endpoint
from ._errors import A2AProtocolError as A2AProtocolError
from ._errors import AgentCardError as AgentCardError
from ._errors import AgentError as AgentError
from ._errors import AgentRefusedError as AgentRefusedError
from ._errors import AgentUnavailableError as AgentUnavailableError
from ._errors import ClientClosedError as ClientClosedError
from ._errors import CorruptObjectError as CorruptObjectError
from ._errors import CursorMismatchError as CursorMismatchError
from ._errors import EventTooLargeError as EventTooLargeError
from ._errors import FollowerError as FollowerError
from ._errors import InvalidArgumentError as InvalidArgumentError
from ._errors import InvalidKeyError as InvalidKeyError
from ._errors import MalformedPageError as MalformedPageError
from ._errors import NoProgressError as NoProgressError
from ._errors import ObjectConflictError as ObjectConflictError
from ._errors import ObjectExistsError as ObjectExistsError
from ._errors import ObjectNotFoundError as ObjectNotFoundError
from ._errors import PageFieldError as PageFieldError
from ._errors import PageNotAnObjectError as PageNotAnObjectError
from ._errors import PageNumberError as PageNumberError
from ._errors import PageTooDeepError as PageTooDeepError
from ._errors import PageTooLargeError as PageTooLargeError
from ._errors import PoolBusyError as PoolBusyError
from ._errors import ReaderIdleError as ReaderIdleError
from ._errors import StoreAccessDeniedError as StoreAccessDeniedError
from ._errors import StoreError as StoreError
from ._errors import StoreEscapeError as StoreEscapeError
from ._errors import StoreNotFoundError as StoreNotFoundError
from ._errors import StoreUnavailableError as StoreUnavailableError
from ._errors import TaskMismatchError as TaskMismatchError
from ._errors import TaskNotFoundError as TaskNotFoundError
from ._errors import TaskTimeoutError as TaskTimeoutError
from ._errors import TooManyEventsError as TooManyEventsError
from ._errors import TurnConflictError as TurnConflictError
from ._errors import TurnExistsError as TurnExistsError
from ._errors import TurnStateError as TurnStateError
from ._errors import UnknownStateError as UnknownStateError
from ._errors import UsageError as UsageError
from ._follow import FollowOutcome as FollowOutcome
from ._follow import follow_trajectory as follow_trajectory
from ._public import name_as_public as _name_as_public
from ._reader import StoredEvent as StoredEvent
from ._reader import TurnEnd as TurnEnd
from ._reader import read_live_trajectory as read_live_trajectory
from ._statistics import LiveTurnsStatistics as LiveTurnsStatistics
from ._statistics import LiveTurnStatistics as LiveTurnStatistics
from ._step import LiveTurns as LiveTurns
from ._step import following_live_trajectory as following_live_trajectory
from ._stores import FilesystemStore as FilesystemStore
from ._stores import MemoryStore as MemoryStore
from ._stores import ObjectStore as ObjectStore
from ._turns import LiveTurn as LiveTurn
from ._wire import TrajectoryBatch as TrajectoryBatch
from ._wire import TrajectoryState as TrajectoryState

# One source: the installed package's metadata, which pyproject.toml's version gives.
__version__ = _metadata.version("follower")

__all__ = [
    "A2AAgent",
    "A2AProtocolError",
    "A2ATask",
    "AgentCardError",
    "AgentError",
    "AgentRefusedError",
    "AgentUnavailableError",
    "ClientClosedError",
    "CorruptObjectError",
    "CursorMismatchError",
    "FilesystemStore",
    "FollowOutcome",
    "FollowerError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "LiveTrajectoryChunks",
    "LiveTurn",
    "LiveTurnStatistics",
    "LiveTurns",
    "LiveTurnsStatistics",
    "MalformedPageError",
    "MemoryStore",
    "NoProgressError",
    "ObjectConflictError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectStore",
    "PageFieldError",
    "PageNotAnObjectError",
    "PageTooLargeError",
    "PageTooDeepError",
    "PageNumberError",
    "EventTooLargeError",
    "TooManyEventsError",
    "PoolBusyError",
    "ReaderIdleError",
    "StoreAccessDeniedError",
    "StoreEscapeError",
    "StoreError",
    "StoreNotFoundError",
    "StoreUnavailableError",
    "StoredEvent",
    "TaskMismatchError",
    "TaskNotFoundError",
    "TaskTimeoutError",
    "TrajectoryBatch",
    "TrajectoryState",
    "TurnConflictError",
    "TurnExistsError",
    "TurnEnd",
    "TurnProgress",
    "TurnStateError",
    "UnknownStateError",
    "UsageError",
    "connect_agent",
    "follow_a2a_task",
    "follow_trajectory",
    "following_live_trajectory",
    "live_trajectory_endpoint",
    "read_live_trajectory",
    "run_a2a_turn",
]

_name_as_public(__name__, globals(), __all__)
