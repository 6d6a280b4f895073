"""Follow an A2A agent's live trajectory while a step runs, store it as it is read,
and never outlive the step that started it."""

from importlib import metadata as _metadata

from . import lowlevel as lowlevel
from ._a2a._client import A2AAgent as A2AAgent
from ._a2a._client import A2ATask as A2ATask
from ._a2a._client import connect_agent as connect_agent
from ._a2a._turn import follow_a2a_task as follow_a2a_task
from ._a2a._turn import run_a2a_turn as run_a2a_turn
from ._errors import A2AProtocolError as A2AProtocolError
from ._errors import AgentCardError as AgentCardError
from ._errors import AgentError as AgentError
from ._errors import AgentRefusedError as AgentRefusedError
from ._errors import AgentUnavailableError as AgentUnavailableError
from ._errors import ClientClosedError as ClientClosedError
from ._errors import CorruptObjectError as CorruptObjectError
from ._errors import FollowerError as FollowerError
from ._errors import InvalidArgumentError as InvalidArgumentError
from ._errors import InvalidKeyError as InvalidKeyError
from ._errors import MalformedPageError as MalformedPageError
from ._errors import MalformedPageReason as MalformedPageReason
from ._errors import ObjectConflictError as ObjectConflictError
from ._errors import ObjectExistsError as ObjectExistsError
from ._errors import ObjectNotFoundError as ObjectNotFoundError
from ._errors import PoolBusyError as PoolBusyError
from ._errors import ReaderIdleError as ReaderIdleError
from ._errors import StoreAccessDeniedError as StoreAccessDeniedError
from ._errors import StoreError as StoreError
from ._errors import StoreEscapeError as StoreEscapeError
from ._errors import StoreNotFoundError as StoreNotFoundError
from ._errors import StoreUnavailableError as StoreUnavailableError
from ._errors import TaskNotFoundError as TaskNotFoundError
from ._errors import TaskTimeoutError as TaskTimeoutError
from ._errors import TurnConflictError as TurnConflictError
from ._errors import TurnExistsError as TurnExistsError
from ._errors import TurnStateError as TurnStateError
from ._errors import UsageError as UsageError
from ._errors import WriterGoneError as WriterGoneError
from ._format._a2a import TaskSource as TaskSource
from ._format._a2a import Via as Via
from ._format._wire import TrajectoryState as TrajectoryState
from ._public import name_as_public as _name_as_public
from ._statistics import LiveTurnsStatistics as LiveTurnsStatistics
from ._statistics import LiveTurnStatistics as LiveTurnStatistics
from ._stores import FilesystemStore as FilesystemStore
from ._stores import MemoryStore as MemoryStore
from ._stores import ObjectStore as ObjectStore
from ._storing._reader import StoredEvent as StoredEvent
from ._storing._reader import TurnEnd as TurnEnd
from ._storing._reader import read_live_trajectory as read_live_trajectory
from ._turns._block import LiveTurn as LiveTurn
from ._turns._chain import TurnProgress as TurnProgress
from ._turns._step import LiveTurns as LiveTurns
from ._turns._step import following_live_trajectory as following_live_trajectory

# One source: the installed package's metadata, which pyproject.toml's version gives.
__version__ = _metadata.version("follower")

__all__ = (
    "A2AAgent",
    "A2AProtocolError",
    "A2ATask",
    "AgentCardError",
    "AgentError",
    "AgentRefusedError",
    "AgentUnavailableError",
    "ClientClosedError",
    "CorruptObjectError",
    "FilesystemStore",
    "FollowerError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "LiveTurn",
    "LiveTurnStatistics",
    "LiveTurns",
    "LiveTurnsStatistics",
    "MalformedPageError",
    "MalformedPageReason",
    "MemoryStore",
    "ObjectConflictError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectStore",
    "PoolBusyError",
    "ReaderIdleError",
    "StoreAccessDeniedError",
    "StoreError",
    "StoreEscapeError",
    "StoreNotFoundError",
    "StoreUnavailableError",
    "StoredEvent",
    "TaskNotFoundError",
    "TaskSource",
    "TaskTimeoutError",
    "TrajectoryState",
    "TurnConflictError",
    "TurnEnd",
    "TurnExistsError",
    "TurnProgress",
    "TurnStateError",
    "UsageError",
    "Via",
    "WriterGoneError",
    "connect_agent",
    "follow_a2a_task",
    "following_live_trajectory",
    "read_live_trajectory",
    "run_a2a_turn",
)

_name_as_public(__name__, globals(), __all__)
