"""Blocking store calls in worker threads that the interpreter does not wait for at exit.

anyio's worker threads on asyncio are joined when the interpreter exits, so a
call that a step rightly abandoned (a stalled fsync, an S3 request that never
answers) would keep the process alive long after the step's bounds. Stores run
their blocking calls here instead: on daemon threads the library owns, each
result handed back to the event loop that waits for it (``anyio.from_thread``
with that loop's token), the same on asyncio and on trio.

A cancel abandons the call: the waiting task leaves at once, and the thread
finishes the call on its own, waited for by nobody, not even the interpreter at
exit. How many calls are waited on at once is bounded by a
:class:`anyio.CapacityLimiter`, as with ``anyio.to_thread``; an abandoned call's
slot is free at once, its thread busy until the call returns. Idle threads are
reused, and end after :data:`IDLE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import contextvars
import queue
import threading
from typing import TYPE_CHECKING, Generic, TypeVar, TypeVarTuple

import anyio
import anyio.from_thread
import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Callable

_T = TypeVar("_T")
_Args = TypeVarTuple("_Args")

IDLE_SECONDS = 10.0


async def run_sync_abandoning(
    call: Callable[[*_Args], _T], *args: *_Args, limiter: anyio.CapacityLimiter
) -> _T:
    """``call(*args)`` in a daemon worker thread; a cancel abandons it there.

    The call runs in a copy of the caller's context, as with ``anyio.to_thread``.
    """
    async with limiter:
        token = anyio.lowlevel.current_token()
        outcome = _Outcome[_T]()
        context = contextvars.copy_context()

        def job() -> None:
            try:
                outcome.value = context.run(call, *args)
            except BaseException as exc:  # handed to the waiting task, raised there
                outcome.error = exc
            # Abandoned, and its event loop ended (or is closing) since: nobody waits.
            with contextlib.suppress(anyio.RunFinishedError, RuntimeError):
                anyio.from_thread.run_sync(outcome.done.set, token=token)

        _submit(job)
        await outcome.done.wait()
    return outcome.result()


class _Outcome(Generic[_T]):
    """What a call in a worker thread returned or raised, once ``done`` is set."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: _T | None = None
        self.error: BaseException | None = None

    def result(self) -> _T:
        error, self.error = self.error, None  # no cycle through the traceback
        if error is not None:
            raise error
        return self.value  # type: ignore[return-value]  # None when _T is None


class _Worker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="follower store worker", daemon=True)
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with _LOCK:
                    if self in _IDLE:  # nobody handed it a job meanwhile: end
                        _IDLE.remove(self)
                        return
                continue  # taken as it timed out: its job is on the way
            job()
            del job
            with _LOCK:
                _IDLE.append(self)


_LOCK = threading.Lock()
_IDLE: list[_Worker] = []


def _submit(job: Callable[[], None]) -> None:
    with _LOCK:
        worker = _IDLE.pop() if _IDLE else None
    if worker is None:
        worker = _Worker()
        worker.jobs.put(job)
        worker.start()
    else:
        worker.jobs.put(job)
