"""The running event loop's anyio backend, looked up once by the objects that hold it.

Each of anyio's functions (``anyio.current_time()``, ``anyio.CancelScope()``,
``anyio.Event()``, ``anyio.sleep()``, ``anyio.lowlevel.checkpoint_if_cancelled()``)
first asks which library runs the loop (sniffio's context variable, or asyncio's
running task), then calls the method of the same name on that library's backend. A
turn's steady read made fourteen such calls, each lookup a few hundred nanoseconds to
two microseconds on these machines, from run to run. What lives on one loop and is
on a read's path (the loop's timekeeper, a follower, a connection) looks the backend
up once, by anyio's own token for the loop, and calls those methods itself: the same
calls, without the lookups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio.lowlevel

if TYPE_CHECKING:
    from anyio.abc import AsyncBackend


def running_backend() -> type[AsyncBackend]:
    """The anyio backend of the event loop running in this thread.

    Raises anyio's ``NoEventLoopError`` (a ``RuntimeError``) outside one.
    """
    return anyio.lowlevel.current_token().backend_class
