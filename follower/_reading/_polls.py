"""Following one task by polling ``GetTask``: for an agent that offers no live read and no stream.

Each poll that finds the task changed stores what changed, in the same kinds a
streamed turn stores (``_format._stream``): the first poll the ``task`` as it
stands, then a ``statusUpdate`` when its status changes and an
``artifactUpdate`` (the whole artifact) when an artifact is new or grew. What
happened between two polls is not seen (a status message superseded before
the next poll), so a polled turn is complete only once the task has ended and
is stored as ``GetTask`` gives it then, whole history included.

The read loop's rules hold: polls every ``poll_interval_seconds`` (or until
``stop``), a failed poll retried with jittered backoff before stop and ending
following after it (the sentinel), our own full pool never the agent's
failure, a task the agent does not know ending following quietly.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs

from .._errors import (
    AgentUnavailableError,
    FollowerError,
    MalformedPageError,
    MalformedPageReason,
    PoolBusyError,
    TaskNotFoundError,
)
from .._format._a2a import ends_turn
from .._format._stream import (
    ARTIFACT_UPDATE,
    STATUS_UPDATE,
    task_item,
    trajectory_state,
)
from .._http._jsonrpc import call_jsonrpc
from .._retries import FailureStreak
from ._policy import AFTER_STOP_PAUSE_SECONDS
from ._shell import (
    beat_before,
    beat_if_due,
    cut_for_beat,
    failed_call,
    follow_by,
    sent_again_if_cut,
    store_events,
    wait_or_stop,
)

if TYPE_CHECKING:
    from collections.abc import Coroutine

    import httpx

    from .._format._a2a import TaskSource
    from .._options import FollowOptions
    from ._record import Beats, FollowOutcome, FollowProgress, Sink

logger = logging.getLogger("follower.polls")


@attrs.define(eq=False, kw_only=True)
class _Poller:
    """One task's polls, and what the last one saw."""

    source: TaskSource
    task_id: str
    sink: Sink
    options: FollowOptions
    stop: anyio.Event
    progress: FollowProgress
    turn_id: str | None = None
    beats: Beats | None = None
    """The turn's heartbeats, written between polls (``_shell.beat_if_due``)."""
    failing: FailureStreak = attrs.field(init=False)
    seen: dict[str, Any] | None = None
    """The task as the last poll saw it (None before the first)."""
    failures: int = 0

    noun = "poll"

    def __attrs_post_init__(self) -> None:
        what = f"polls of task {self.task_id} at {self.source.url}"
        self.failing = FailureStreak(logger, what, noun="poll", extra=self.extra)

    @property
    def extra(self) -> dict[str, object]:
        return {"task_id": self.task_id, "turn_id": self.turn_id}

    def left(self, ending: str) -> None:
        self.failing.close(ending)

    async def run(self, client: httpx.AsyncClient, after: int) -> None:
        while True:
            await beat_if_due(self.beats, self.stop, anyio.current_time())
            try:
                task = await self._poll(client, history=False)
            except (AgentUnavailableError, PoolBusyError) as exc:
                await self._after_failure(exc)
                continue
            except TaskNotFoundError:
                logger.warning(
                    "task %s is unknown to the agent at %s; not following it",
                    self.task_id,
                    self.source.url,
                    extra=self.extra,
                )
                return
            if self.failures:
                self.failing.recovered()
            self.failures = 0
            state = task_item(task, task_id=self.task_id, url=self.source.url).state
            if ends_turn(state):
                # The task as it ended, whole history included: the turn's last event.
                final = await self._poll(client, history=True)
                await self._store([{"task": final}], final, last=True)
                return
            changes = self._changes(task)
            if changes:
                await self._store(changes, task, last=False)
            self.seen = task
            self.progress.caught_up_at = anyio.current_time()
            await self._wait(self.options.poll_interval_seconds)

    async def _poll(self, client: httpx.AsyncClient, *, history: bool) -> dict[str, Any]:
        method, params = self.source.wire.get_task(self.task_id, history=history)
        self.progress.reads += 1
        started = anyio.current_time()
        bound = self.options.read_timeout_seconds
        try:
            cut_at = cut_for_beat(self.beats, self.stop, bound, started)
            result = await sent_again_if_cut(
                self.beats, cut_at, self._call, client, method, params, bound
            )
        finally:
            if (observer := self.progress.observer) is not None:
                observer.read_took(anyio.current_time() - started)
        if not isinstance(result, dict):
            raise MalformedPageError(
                f"{method} of task {self.task_id!r} at {self.source.url} answered with no task",
                reason=MalformedPageReason.BAD_FIELD,
                task_id=self.task_id,
                url=self.source.url,
            )
        task_item(result, task_id=self.task_id, url=self.source.url)  # checked: its id, its state
        return result

    async def _call(
        self,
        client: httpx.AsyncClient,
        method: str,
        params: dict[str, Any],
        bound: float,
        cut_at: float | None,
    ) -> Any:
        return await call_jsonrpc(
            client,
            self.source.url,
            method,
            params,
            timeout_seconds=bound,
            headers=(*self.options.headers, *self.source.wire.headers),
            task_id=self.task_id,
            cut_at=cut_at,
        )

    def _changes(self, task: dict[str, Any]) -> list[Any]:
        """What the task says now that the last poll did not: the events to store."""
        seen = self.seen
        if seen is None:
            return [{"task": task}]
        events: list[Any] = []
        common = {"taskId": self.task_id, "contextId": task.get("contextId")}
        if task.get("status") != seen.get("status"):
            events.append({STATUS_UPDATE: {**common, "status": task.get("status")}})
        before = {_artifact_id(a): a for a in _artifacts(seen)}
        for artifact in _artifacts(task):
            if before.get(_artifact_id(artifact)) != artifact:
                events.append({ARTIFACT_UPDATE: {**common, "artifact": artifact}})
        return events

    async def _store(self, events: list[Any], task: dict[str, Any], *, last: bool) -> None:
        item = task_item(task, task_id=self.task_id, url=self.source.url)
        state = trajectory_state(item.state or "working")
        await store_events(self.sink, self.progress, events, state, last=last)

    async def _after_failure(self, failure: FollowerError) -> None:
        if not isinstance(failure, PoolBusyError):
            self.failures += 1
        delay = failed_call(
            failure,
            failures=self.failures,
            failing=self.failing,
            progress=self.progress,
            stop=self.stop,
            options=self.options,
            what=f"task {self.task_id}: a poll",
        )
        await self._wait(delay)

    async def _wait(self, seconds: float) -> None:
        if self.stop.is_set():
            # The step has stopped: poll on briefly until the task ends or the drain does.
            await anyio.sleep(min(seconds, AFTER_STOP_PAUSE_SECONDS))
            return
        due = anyio.current_time() + seconds
        await beat_before(self.beats, self.stop, due)
        await wait_or_stop(self.stop, due - anyio.current_time())


def _artifacts(task: dict[str, Any]) -> list[Any]:
    artifacts = task.get("artifacts")
    return artifacts if isinstance(artifacts, list) else []


def _artifact_id(artifact: Any) -> Any:
    return artifact.get("artifactId") if isinstance(artifact, dict) else None


def follow_polls(
    source: TaskSource,
    task_id: str,
    sink: Sink,
    *,
    stop: anyio.Event,
    options: FollowOptions,
    after: int = 0,
    progress: FollowProgress | None = None,
    turn_id: str | None = None,
    beats: Beats | None = None,
) -> Coroutine[Any, Any, FollowOutcome]:
    """Follow ``task_id`` by polling ``GetTask``, handing each change to ``sink``.

    The coroutine it returns, awaited at once, returns once the task is done with
    the turn (its final form stored), for a task the agent does not know, when a
    poll fails after ``stop``, or after ``options.max_follow_seconds``, and raises
    the typed errors of a read, or whatever ``sink`` raises.
    """
    return follow_by(
        _Poller,
        source,
        task_id,
        sink,
        stop=stop,
        options=options,
        after=after,
        progress=progress,
        turn_id=turn_id,
        logger=logger,
        beats=beats,
    )
