"""``follower validate``, one cell: a step against an agent turning bad, measured on both sides.

A cell is one step outcome (cancelled, raises, returns) against one agent (closes
every connection, never answers, answers 503, healthy), for one way of following
(cursor reads, the agent's stream, polls of its task). The reference agent is
served on a loopback socket and keeps a log of the requests that reach it. The
step follows a task of it; the agent answers the first reads, then turns bad;
the body ends (as the cell says) once the first read meets the fault, so that
the follower is retrying (in its backoff, or inside a read that will time out)
when the step stops. A stream's first read is its subscription: an agent that
turns bad cuts it (close, 5xx) or holds it silent, and its next subscription
meets the fault. What is measured, and the design's bounds on it:

- how long after the body ended the block exited: promptly when the body was
  cancelled or raised; within ``drain_seconds`` when it returned;
- reads the agent saw after the body ended: none when cancelled or raised; at
  most one (the post-stop sentinel's) when it returned and the agent is bad;
- reads after the block exited, over a grace window: none, and no follower
  task still running: no follower outlives its block;
- the turn's ``end.json``: written, with the state the outcome implies.

``_fault_table`` runs the cells and prints the table; the teardown benchmark
uses the same :func:`measure_cell`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import anyio
import attrs

from .._a2a._client import connect_agent
from .._format._a2a import Via
from .._format._layout import TurnKeys
from .._stores import MemoryStore
from .._storing._stored_turn import read_stored_turn
from .._turns._step import following_live_trajectory
from ..testing import Fault, FaultKind, ReferenceAgent, TaskScript, serve_agent
from ..testing._agent import RPC_PATH, _noting_status
from ..testing._asgi import TEXT, read_body, respond

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    import httpx

    from .._format._a2a import TaskSource
    from .._stores import ObjectStore
    from .._turns._block import LiveTurn
    from ..testing import AgentRequest
    from ..testing._asgi import Receive, Scope, Send
    from ..testing._tasks import ScriptedTask

OUTCOMES = ("cancelled", "raises", "returns")
AGENTS = ("close", "silent", "5xx", "healthy")
BACKENDS = ("asyncio", "trio")
WAYS = tuple(way.value for way in Via)
GONE_AGENTS = frozenset({"close", "silent", "5xx"})
# The end mark each outcome implies (the follower never reads the task's last page).
EXPECTED_STATE = {"cancelled": "canceled", "raises": "failed", "returns": "completed"}
PREFIX = "validate/"


def _fault(agent: str) -> Fault | None:
    return {
        "close": Fault.close(),
        "silent": Fault.silent(),
        "5xx": Fault.unavailable(status=503),
        "healthy": None,
    }[agent]


@attrs.frozen(kw_only=True)
class Timings:
    """The step's options and the table's bounds, short enough for loopback."""

    poll_interval_seconds: float
    read_timeout_seconds: float
    drain_seconds: float
    grace_seconds: float
    """How long the agent's log is watched after the block exits, for a follower left reading."""
    prompt_exit_seconds: float
    """The bound on exiting after a cancelled or raising body, and the slack past the drain."""
    healthy_reads: int = 2
    """Reads the agent answers before it turns bad."""
    setup_seconds: float = 10.0
    """The bound on starting the agent and the follower's healthy reads."""

    @property
    def exit_limit_seconds(self) -> float:
        """After the body ends, the block is cancelled from outside past this: it did not end."""
        return self.drain_seconds + self.read_timeout_seconds + 5.0


QUICK = Timings(
    poll_interval_seconds=0.05,
    read_timeout_seconds=0.25,
    drain_seconds=0.5,
    grace_seconds=0.2,
    prompt_exit_seconds=0.25,
)
FULL = Timings(
    poll_interval_seconds=0.1,
    read_timeout_seconds=1.0,
    drain_seconds=2.0,
    grace_seconds=0.5,
    prompt_exit_seconds=0.5,
)


@attrs.frozen
class Cell:
    backend: str
    outcome: str
    agent: str
    way: str = Via.CURSOR.value


@attrs.define(eq=False)
class _DrillAgent(ReferenceAgent):
    """The reference agent, whose 503s (the ``5xx`` agent) reach every way of following.

    The reference agent answers 503 to cursor reads only: here its A2A calls
    (``GetTask``, ``SubscribeToTask``) are answered 503 too, and its open streams
    are cut, as a server gone behind a load balancer does. Each 503 is in the
    request log, as the cursor reads' are. The streams it cuts are counted
    (``streams_cut``): a cut is a read the agent failed.
    """

    streams_cut: int = attrs.field(default=0, init=False)
    _cut: anyio.Event = attrs.field(factory=anyio.Event, init=False)

    def _answers_503(self) -> bool:
        fault = self.fault
        return fault is not None and fault.kind is FaultKind.UNAVAILABLE

    def cuts(self, task: ScriptedTask) -> bool:
        cut = super().cuts(task) or self._answers_503()
        if cut:
            self.streams_cut += 1
            self._cut.set()
            self._cut = anyio.Event()
        return cut

    async def wait_streams_cut(self, count: int) -> None:
        """Return once ``count`` streams in all have been cut."""
        while self.streams_cut < count:
            await self._cut.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fault = self.fault
        if (
            fault is None
            or not self._answers_503()
            or scope["type"] != "http"
            or (scope["path"], scope["method"]) != (RPC_PATH, "POST")
        ):
            await super().__call__(scope, receive, send)
            return
        await read_body(receive)
        arrival = self._note_arrival(scope["path"])
        if arrival is not None:
            send = _noting_status(send, arrival)
        await respond(send, fault.status or 503, b"agent unavailable", TEXT)


@attrs.frozen(kw_only=True)
class CellRun:
    """What one run of a cell measured, and the bounds it broke (``problems``)."""

    ended: bool
    """The block exited by itself, before :attr:`Timings.exit_limit_seconds`."""
    exit_seconds: float
    """From the body's end to the block's exit."""
    reads_after_stop: int
    """Requests of the follower the agent saw from the body's end to the block's exit."""
    reads_after_exit: int
    """Requests of the follower the agent saw in the grace window after the exit."""
    failed_reads: int
    """The follower's requests the agent failed: dropped, answered 5xx, or never answered."""
    followers_alive: int
    """The turn's follower tasks still running after the block exited."""
    end_mark: dict[str, Any] | None
    """``end.json`` as stored (``state``, ``next``, ``complete``), or ``None``."""
    problems: tuple[str, ...]


class OpenTurn(Protocol):
    """What opens a turn's block: :func:`following_live_trajectory`, or a test's broken one."""

    def __call__(
        self,
        endpoint: TaskSource,
        store: ObjectStore,
        prefix_key: str,
        turn_id: str,
        *,
        poll_interval_seconds: float,
        drain_seconds: float,
        read_timeout_seconds: float,
    ) -> AbstractAsyncContextManager[LiveTurn]: ...


async def measure_cell(
    cell: Cell,
    timings: Timings,
    *,
    turn_id: str = "turn-1",
    a2a_client: httpx.AsyncClient | None = None,
    open_turn: OpenTurn = following_live_trajectory,
) -> CellRun:
    """Run ``cell``'s step once against its own agent on loopback; measure it.

    ``a2a_client`` sends the step's message (by default a client is leased for
    it). ``open_turn`` is for tests: a broken block there must show in ``problems``.
    """
    agent = _DrillAgent(
        # Runs far longer than any cell: the follower never reads its last page.
        script=TaskScript(events=100_000, interval_seconds=timings.poll_interval_seconds / 4),
        log_requests=True,
    )
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(timings.setup_seconds):
            url = await tg.start(serve_agent, agent)
            async with connect_agent(url, client=a2a_client, via=cell.way) as a2a:
                task = await a2a.send_message("validate")
                source = a2a.task_source
        assert source is not None  # the reference agent offers every way
        run = await _Step(cell, timings, agent, source, turn_id, open_turn).run(task.id)
        tg.cancel_scope.cancel()
    return run


@attrs.define(eq=False)
class _Step:
    cell: Cell
    timings: Timings
    agent: _DrillAgent
    source: TaskSource
    turn_id: str
    open_turn: OpenTurn
    store: MemoryStore = attrs.field(factory=MemoryStore)
    problems: list[str] = attrs.field(factory=list)
    # The agent's log before the step: the message that started the task goes to the
    # same URL as a stream's or a poll's reads, and is not the follower's.
    log_before: int = attrs.field(init=False)
    # The follower's requests in the agent's log when the body ended.
    body_mark: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self.log_before = len(self.agent.request_log())

    async def run(self, task_id: str) -> CellRun:
        body_ended, exited, ended = await self._step(task_id)
        # Reads are told apart by where they stand in the agent's log, not by the
        # time the agent logged them: one sent before the body ended (or the block
        # exited) may reach the agent's log later on a busy machine. So the log is
        # marked once every request sent by then has reached it (``wait_quiet``).
        if not await self._quiet_within(self.timings.setup_seconds):
            self.problems.append(
                f"the agent did not go quiet within {self.timings.setup_seconds:g} s of the "
                "block's exit: a follower reads on without a pause"
            )
        exit_mark = len(self._follower_requests())
        await self._watch_after(exit_mark)
        log = self._follower_requests()
        after_stop = log[self.body_mark : exit_mark]
        after_exit = log[exit_mark:]
        alive = sum(t.name == f"follower {self.turn_id}" for t in anyio.get_running_tasks())
        stored = await read_stored_turn(self.store, TurnKeys(PREFIX, self.turn_id))
        end = stored.end
        end_mark = None
        if end is not None:
            end_mark = {"state": end.state.value, "next": end.next, "complete": end.complete}
        run = CellRun(
            ended=ended,
            exit_seconds=exited - body_ended,
            reads_after_stop=len(after_stop),
            reads_after_exit=len(after_exit),
            failed_reads=sum(_failed(r) for r in log) + self.agent.streams_cut,
            followers_alive=alive,
            end_mark=end_mark,
            problems=(),
        )
        return attrs.evolve(
            run, problems=(*self.problems, *broken_bounds(self.cell, run, self.timings))
        )

    async def _step(self, task_id: str) -> tuple[float, float, bool]:
        """Run the step; return when its body ended, when its block exited, and if by itself."""
        outcome, timings = self.cell.outcome, self.timings
        error = RuntimeError("the step failed (as validate asked)")
        body_ended = anyio.current_time()
        escaped: BaseException | None = None
        stopped = (anyio.get_cancelled_exc_class(), KeyboardInterrupt)
        with anyio.CancelScope() as watchdog, anyio.CancelScope() as step_scope:
            try:
                async with self.open_turn(
                    self.source,
                    self.store,
                    PREFIX,
                    self.turn_id,
                    poll_interval_seconds=timings.poll_interval_seconds,
                    drain_seconds=timings.drain_seconds,
                    read_timeout_seconds=timings.read_timeout_seconds,
                ) as turn:
                    turn.follow(task_id)
                    await self._turn_agent_bad()
                    # No checkpoint from the agent's quiet (or, healthy, the read just
                    # logged) to the body's end: nothing the follower sends after the
                    # mark is sent before the end.
                    self.body_mark = len(self._follower_requests())
                    body_ended = anyio.current_time()
                    watchdog.deadline = body_ended + timings.exit_limit_seconds
                    await _end_body(outcome, turn, step_scope, error)
            except stopped:
                raise
            except BaseException as exc:
                escaped = exc
        exited = anyio.current_time()
        kept = {
            "cancelled": escaped is None and step_scope.cancelled_caught,
            "raises": escaped is error,
            "returns": escaped is None and not step_scope.cancelled_caught,
        }[outcome]
        if not kept:
            came_out = "a cancel" if escaped is None else repr(escaped)
            self.problems.append(f"the body {outcome} but the block gave {came_out}")
        return body_ended, exited, not watchdog.cancel_called

    async def _turn_agent_bad(self) -> None:
        """Let the follower read a healthy agent, then turn it bad; return once a read met it.

        A healthy agent stays healthy: the body ends at the next read. A stream
        is one read: once it is open, the agent turns bad, which cuts it (close,
        5xx: the cut is the read that met the fault, the next subscription comes
        after the follower's backoff) or holds it (silent: the follower waits
        inside it); a healthy stream flows on.
        """
        agent, timings = self.agent, self.timings
        streamed = self.cell.way == Via.STREAM
        healthy_reads = 1 if streamed else timings.healthy_reads
        with anyio.move_on_after(timings.setup_seconds) as setup:
            await self._wait_follower_requests(healthy_reads)
            if streamed:
                await anyio.wait_all_tasks_blocked()  # its first frames are stored
            fault = agent.fault = _fault(self.cell.agent)
            if streamed and self.cell.agent in ("close", "5xx"):
                await agent.wait_streams_cut(1)
            elif not streamed:
                await self._wait_follower_requests(len(self._follower_requests()) + 1)
        if setup.cancelled_caught:
            self.problems.append(
                f"the follower did not read the agent {healthy_reads + 1} times "
                f"within {timings.setup_seconds} s"
            )
        # A healthy agent: its read was just logged (a stream flows), and the body ends
        # with no checkpoint before it, while the follower waits for the answer; its
        # next read is a poll interval after that answer. A bad agent: until the
        # follower has taken the failure in (it is then waiting in its backoff, or
        # inside a read that never gets an answer) and every read it sent is logged.
        if fault is not None and not await self._quiet_within(timings.setup_seconds):
            self.problems.append(
                f"the agent did not go quiet within {timings.setup_seconds:g} s of its "
                "fault: the follower reads on without a pause"
            )

    async def _wait_follower_requests(self, count: int) -> None:
        while len(self._follower_requests()) < count:
            await self.agent.wait_requests(len(self.agent.request_log()) + 1)

    async def _quiet_within(self, bound_seconds: float) -> bool:
        """Whether every request sent to the agent reached its log within ``bound_seconds``.

        A follower that reads without a pause never lets the agent be quiet.
        """
        with anyio.move_on_after(bound_seconds):
            await self.agent.wait_quiet()
            return True
        return False

    async def _watch_after(self, exit_mark: int) -> None:
        """Watch the agent's log for the grace window, or until a read comes after the exit."""
        with anyio.move_on_after(self.timings.grace_seconds):
            while len(self._follower_requests()) <= exit_mark:
                await self.agent.wait_requests(len(self.agent.request_log()) + 1)

    def _follower_requests(self) -> list[AgentRequest]:
        """What the follower sent: its reads, and connections the agent dropped unread."""
        path = urlsplit(self.source.url).path
        log = self.agent.request_log()[self.log_before :]
        return [r for r in log if r.path in (None, path)]


async def _end_body(
    outcome: str, turn: LiveTurn, step_scope: anyio.CancelScope, error: Exception
) -> None:
    """End the body as the cell says: cancelled by its runner, raising, or returning."""
    if outcome == "cancelled":
        step_scope.cancel()
        await anyio.sleep_forever()
    if outcome == "raises":
        raise error
    turn.ended("completed")


def _failed(request: AgentRequest) -> bool:
    return request.status is None or request.status >= 500


def broken_bounds(cell: Cell, run: CellRun, timings: Timings) -> tuple[str, ...]:
    """The design's bounds that ``run`` broke, each as a line an operator can read."""
    broken = []
    exit_ms, prompt_ms = run.exit_seconds * 1000, timings.prompt_exit_seconds * 1000
    if not run.ended:
        broken.append(
            f"the block did not exit within {timings.exit_limit_seconds:g} s of the body's "
            "end (cancelled from outside): a follower outlived its step"
        )
    if cell.outcome in ("cancelled", "raises"):
        if run.reads_after_stop:
            broken.append(f"{run.reads_after_stop} read(s) after the body ended (bound: 0)")
        if exit_ms > prompt_ms:
            broken.append(
                f"exited {exit_ms:.0f} ms after the body ended (bound: {prompt_ms:.0f} ms)"
            )
    else:
        limit_ms = (timings.drain_seconds + timings.prompt_exit_seconds) * 1000
        if exit_ms > limit_ms:
            broken.append(
                f"exited {exit_ms:.0f} ms after the body returned (bound: the "
                f"{timings.drain_seconds:g} s drain + {prompt_ms:.0f} ms)"
            )
        if cell.agent in GONE_AGENTS and run.reads_after_stop > 1:
            broken.append(
                f"{run.reads_after_stop} reads after stop from an agent that is gone (bound: 1)"
            )
    if run.reads_after_exit:
        broken.append(
            f"a follower outlived its block: {run.reads_after_exit} read(s) after the block exited"
        )
    if run.followers_alive:
        broken.append(f"{run.followers_alive} follower task(s) still running after the block")
    expected = EXPECTED_STATE[cell.outcome]
    if run.end_mark is None:
        broken.append("no end.json: the turn was not marked ended")
    elif run.end_mark["state"] != expected:
        broken.append(f"end.json says {run.end_mark['state']!r}, not {expected!r}")
    return tuple(broken)
