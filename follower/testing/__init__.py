"""A reference A2A agent that serves the live trajectory extension, for tests.

:class:`ReferenceAgent` is an ASGI app: an agent card, A2A JSON-RPC 2.0
(``message/send``, ``tasks/get``, ``tasks/cancel``) and the cursor read
(docs/protocol.md). Its tasks run a :class:`TaskScript` computed from the clock,
so it works in-process (:meth:`ReferenceAgent.client`), on virtual time, and on
a loopback socket (:func:`serve_agent`, which needs the ``testing`` extra's
hypercorn). A :class:`Fault` makes it misbehave the ways real agents do;
:func:`parse_fault` reads one from its text form.
"""

from .._public import name_as_public as _name_as_public
from ._agent import AgentRequest as AgentRequest
from ._agent import AgentStatistics as AgentStatistics
from ._agent import ReferenceAgent as ReferenceAgent
from ._fault_text import FAULT_NAMES as FAULT_NAMES
from ._fault_text import parse_fault as parse_fault
from ._faults import Fault as Fault
from ._faults import FaultKind as FaultKind
from ._script import TaskScript as TaskScript
from ._serve import serve_agent as serve_agent

__all__ = (
    "AgentRequest",
    "AgentStatistics",
    "FAULT_NAMES",
    "Fault",
    "FaultKind",
    "ReferenceAgent",
    "TaskScript",
    "parse_fault",
    "serve_agent",
)

_name_as_public(__name__, globals(), __all__)
