"""The building blocks under ``follower``'s everyday API, for those who assemble their own.

The rule (as trio keeps ``trio.lowlevel``): :mod:`follower` holds what a step
runner or a reader writes by name, the values those hand back, and the error
tree. This module holds the parts the everyday API is built from, for a caller
who runs a read loop of their own, stores pages with their own sink, or finds
an agent's endpoint without a turn: the read loop (:func:`follow_trajectory`,
its :class:`FollowOutcome`, the :class:`TrajectoryBatch` it hands a sink), the
sink that stores a turn's pages (:class:`LiveTrajectoryChunks`), and the agent
card's discovery (:func:`live_trajectory_endpoint`). They are as stable as the
rest of the public API; they just ask more of their caller (a task group, a
``stop`` event, the stored layout's rules). Errors stay in :mod:`follower`.
"""

from ._format._discovery import live_trajectory_endpoint as live_trajectory_endpoint
from ._format._wire import TrajectoryBatch as TrajectoryBatch
from ._public import name_as_public as _name_as_public
from ._reading._follow import FollowOutcome as FollowOutcome
from ._reading._follow import follow_trajectory as follow_trajectory
from ._storing._chunks import LiveTrajectoryChunks as LiveTrajectoryChunks

__all__ = (
    "FollowOutcome",
    "LiveTrajectoryChunks",
    "TrajectoryBatch",
    "follow_trajectory",
    "live_trajectory_endpoint",
)

_name_as_public(__name__, globals(), __all__)
