"""Steps as async Temporal activities: the cancel path, heartbeats, resume and end marks.

The activity side (this module) imports temporalio, anyio and follower; a
workflow must not import it (the sandbox refuses anyio). Workflows import
:mod:`follower.temporal.workflow_types` only, and call the activity by name.
Needs the ``temporal`` extra (temporalio). docs/temporal.md tells the whole story.
"""

from .._public import name_as_public as _name_as_public
from ._activity import open_store as open_store
from ._activity import run_a2a_step as run_a2a_step
from ._attempt import StepAttempt as StepAttempt
from ._attempt import heartbeat_interval_seconds_for as heartbeat_interval_seconds_for
from ._attempt import run_activity_step as run_activity_step
from ._bridge import STEP_CLEANUP_SECONDS as STEP_CLEANUP_SECONDS
from ._bridge import run_cancel_safe as run_cancel_safe
from ._rule import cancel_ends_for_good as cancel_ends_for_good
from ._rule import failure_ends_for_good as failure_ends_for_good
from ._rule import is_last_attempt as is_last_attempt
from .workflow_types import RUN_A2A_STEP as RUN_A2A_STEP
from .workflow_types import TURN_OF_ANOTHER_RUN as TURN_OF_ANOTHER_RUN
from .workflow_types import A2AStepParams as A2AStepParams
from .workflow_types import A2AStepResult as A2AStepResult
from .workflow_types import StepTurn as StepTurn
from .workflow_types import StoreSpec as StoreSpec
from .workflow_types import TurnResult as TurnResult

__all__ = (
    "A2AStepParams",
    "A2AStepResult",
    "RUN_A2A_STEP",
    "STEP_CLEANUP_SECONDS",
    "StepAttempt",
    "StepTurn",
    "StoreSpec",
    "TURN_OF_ANOTHER_RUN",
    "TurnResult",
    "cancel_ends_for_good",
    "failure_ends_for_good",
    "heartbeat_interval_seconds_for",
    "is_last_attempt",
    "open_store",
    "run_a2a_step",
    "run_activity_step",
    "run_cancel_safe",
)

_name_as_public(__name__, globals(), __all__)
