"""The agent and the store of a property example: each answers as the script says and records it.

:class:`WorldAgent` is the trajectory extension's cursor read behind an
``httpx.MockTransport``; :class:`WorldStore` is a write-once memory store. Both
stamp what they see on the world's clock (:meth:`World.mark`), so the checks
can order a read against a write against a turn's end.

The role differs from :class:`tests.support.agents.ScriptedAgent`'s, the agent
an example test drives statement by statement: here every answer, failures and
hangs included, comes from a script fixed before the run, and the agent ends a
runaway follower by itself. The page a read gets is built the same way for both
(:func:`tests.support.agents.cursor_page`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import attrs
import httpx

from follower import MemoryStore, ObjectExistsError, StoreError, TrajectoryState
from follower._format._layout import ALIVE_FOLDER, parse_chunk_name

from ..support.agents import cursor_page
from .records import PutRecord, ReadRecord
from .scripts import EPS, Answer, PutOp, ReadScript, StoreScript, turn_keys

if TYPE_CHECKING:
    from .world import World

# A follower that reads this often is looping: the agent then answers 404 to end it.
READ_CAP = 4000


@attrs.define
class _Task:
    script: ReadScript
    events: list[str] = attrs.field(factory=list)
    state: TrajectoryState = TrajectoryState.PENDING
    answered: int = 0
    pushed: list[Answer] = attrs.field(factory=list)
    tail_reached: bool = False

    def grow(self, task: str, count: int) -> None:
        if self.state.is_terminal:
            return  # sealed
        start = len(self.events)
        self.events.extend(f"{task}/{i}" for i in range(start, start + count))
        if self.events:
            self.state = TrajectoryState.RUNNING

    def finish(self, state: TrajectoryState) -> None:
        if not self.state.is_terminal:
            self.state = state

    def next_answer(self) -> Answer:
        if self.pushed:
            return self.pushed.pop(0)
        i = self.answered
        self.answered += 1
        if i < len(self.script.answers):
            return self.script.answers[i]
        tail = self.script.tail
        if tail == "terminal":
            return Answer("page", finish=self.script.tail_state)
        return Answer(
            {"running": "page", "failing": "transport", "hanging": "hang", "gone": "404"}[tail]
        )


class WorldAgent:
    """The world's agent: the cursor read, answering each read as its task's script says.

    Records every read with its start and end stamps and its outcome.
    """

    def __init__(self, world: World, tasks: dict[str, ReadScript]) -> None:
        self.world = world
        self.tasks = {tid: _Task(script) for tid, script in tasks.items()}
        self.reads: list[ReadRecord] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        world = self.world
        body = json.loads(request.content)
        tid, after = body["task_id"], body["after"]
        read = ReadRecord(tid, after, world.mark())
        self.reads.append(read)
        try:
            if len(self.reads) > READ_CAP:
                world.release_now(f"over {READ_CAP} reads: a follower is looping")
            task = self.tasks.get(tid)
            if world.released or task is None:
                read.outcome = "404"
                return httpx.Response(404, text="unknown task")
            answer = task.next_answer()
            task.grow(tid, answer.grow)
            if answer.finish is not None:
                task.finish(answer.finish)
            if answer.delay:
                await anyio.sleep(answer.delay)
            if answer.kind == "hang":
                await world.release.wait()
            if world.released:
                read.outcome = "404"
                return httpx.Response(404, text="released")
            match answer.kind:
                case "404":
                    read.outcome = "404"
                    return httpx.Response(404, text="unknown task")
                case "4xx":
                    read.outcome = "4xx"
                    return httpx.Response(403, text="forbidden")
                case "5xx":
                    read.outcome = "5xx"
                    return httpx.Response(503, text="busy")
                case "transport":
                    read.outcome = "transport"
                    raise httpx.ConnectError("connection refused", request=request)
            return self._page(read, task)
        except anyio.get_cancelled_exc_class():
            # The read's own deadline, or the follower being cancelled.
            waited = anyio.current_time() - read.start.at
            timed_out = abs(waited - world.read_deadline_seconds) < EPS
            read.outcome = "timeout" if timed_out else "cancelled"
            raise
        finally:
            read.end = world.mark()

    def _page(self, read: ReadRecord, task: _Task) -> httpx.Response:
        if read.after > len(task.events):
            read.outcome = "400"
            return httpx.Response(400, text="after is past the end")
        state = task.state  # read before the length, as the extension requires
        page = cursor_page(
            read.task_id, state, task.script.format, task.events, read.after, task.script.page_limit
        )
        read.outcome = "last" if state.is_terminal and not page["has_more"] else "page"
        read.next = page["next"]
        return httpx.Response(200, json=page)


# Each mark's kind by its object name, as the layout names them (the same in every turn).
_KEYS = turn_keys(0)
MARK_KINDS = ("task", "meta", "end", "next")
_MARKS = dict(
    zip(_KEYS.names([_KEYS.task, _KEYS.meta, _KEYS.end, _KEYS.next]), MARK_KINDS, strict=True)
)


def _kind(key: str) -> str:
    name = key.rsplit("/", 1)[-1]
    if parse_chunk_name(name) is not None:
        return "chunk"
    return _MARKS[name]


class WorldStore(MemoryStore):
    """The world's store: write-once in memory, answering each write as the script says."""

    def __init__(self, world: World, script: StoreScript) -> None:
        super().__init__()
        self.world = world
        self.queues: dict[str, list[PutOp]] = {
            kind: list(getattr(script, kind)) for kind in ("chunk", *MARK_KINDS)
        }
        self.puts: list[PutRecord] = []
        self.heartbeats: list[str] = []  # the writers' signs of life, beside the turns

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        if ALIVE_FOLDER in key:
            # Not the turn's objects, nor scripted: a heartbeat's put costs the step
            # nothing, whatever it does (tests/storing/test_writer_gone.py).
            await super().put(key, body, content_type=content_type)
            self.heartbeats.append(key)
            return
        world = self.world
        kind = _kind(key)
        queue = self.queues[kind]
        op = queue.pop(0) if queue else PutOp()
        record = PutRecord(key, kind, op, bytes(body), world.mark())
        self.puts.append(record)
        try:
            if op.kind == "slow":
                await anyio.sleep(op.seconds)
            elif op.kind == "hang":
                await world.release.wait()
                raise StoreError("a hanging write, released by the test")
            elif op.kind == "fail":
                await anyio.lowlevel.checkpoint()
                raise StoreError("the store failed, as scripted")
            await super().put(key, body, content_type=content_type)
            record.outcome = "stored"
        except ObjectExistsError:
            record.outcome = "exists"
            raise
        except StoreError:
            record.outcome = "failed"
            raise
        except BaseException:
            record.outcome = "cancelled"
            raise
        finally:
            record.end = world.mark()

    def landed(self, key: str) -> PutRecord | None:
        return next((p for p in self.puts if p.key == key and p.outcome == "stored"), None)
