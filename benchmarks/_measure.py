"""What the benchmarks measure, shared by ours and the old follower's child processes.

Plain Python and anyio only (httpx where a canned agent needs it): the benchmarks
run the old follower's side in a venv of its own, where ``follower`` is not
installed, and that side measures with this too.
Nothing here asserts: these are figures, and they belong to the machine they ran on.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import logging
import math
import os
import platform
import resource
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

HEARTBEAT_SECONDS = 0.01
# Events visible this close to the window's end may still be waiting for their
# read: lag is measured over events visible before end - (poll + this).
LAG_SETTLE_SECONDS = 1.0
RESULT_MARK = "RESULT "
CHECKOUT = Path(__file__).resolve().parent.parent


# --- the process ----------------------------------------------------------------------


def rss_kib() -> int:
    """This process's resident set size, from /proc (0 where there is none)."""
    return _status_kib("/proc/self/status", "VmRSS")


def _status_kib(path: str, name: str) -> int:
    try:
        with open(path) as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def open_sockets() -> int:
    """How many sockets this process holds open."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    count = 0
    for name in names:
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{name}").startswith("socket:")
    return count


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of another process, from /proc (0 where there is none)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the ")" that ends the command name, utime and stime are fields 12 and 13.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float | None:
    """CPU seconds every core of the machine has spent busy since boot (None off Linux).

    From the first line of /proc/stat: user, nice, system, irq, softirq and steal (the
    hypervisor's); idle and iowait are not busy.
    """
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_and_children_cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class OthersClock:
    """How much CPU the machine spent on anything but this process and its children.

    Started before a run and read after its children were waited for: what other
    processes (and the hypervisor, as steal) took meanwhile, as a share of one core.
    A benchmark's figures from a run where that share was high are a loaded machine's.
    """

    busy: float | None = None
    ours: float = 0.0
    began: float = 0.0

    def start(self) -> None:
        self.busy, self.ours, self.began = (
            machine_busy_seconds(),
            own_and_children_cpu_seconds(),
            time.monotonic(),
        )

    def others_seconds(self) -> float | None:
        """Others' CPU seconds since :meth:`start` (None where it cannot be told)."""
        busy = machine_busy_seconds()
        if busy is None or self.busy is None:
            return None
        return max(0.0, (busy - self.busy) - (own_and_children_cpu_seconds() - self.ours))

    def share_of_a_core(self) -> float | None:
        """Others' CPU since :meth:`start` over the wall time (None where it cannot be told)."""
        others = self.others_seconds()
        elapsed = time.monotonic() - self.began
        return None if others is None or elapsed <= 0 else others / elapsed


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit: thousands of sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo ("" where there is none)."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return ""


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "load_average": os.getloadavg(),
    }


def run_about() -> dict[str, Any]:
    """When, on what and by which command a benchmark ran: every JSON's ``"about"``.

    ``date`` is when the figures were written (UTC, ISO 8601), ``machine`` one line (the
    CPU's model, its cores, the OS), ``command`` the command line (``sys.argv``, with paths
    inside the checkout shown relative to it; ``argv`` keeps them as given). ``plots.py``
    writes these under every image it draws.
    """
    cores = os.cpu_count()
    system = f"{platform.system()} {platform.release()} {platform.machine()}".strip()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{cpu_model() or 'unknown CPU'}, {cores} cores, {system}",
        "cpu_model": cpu_model(),
        "cores": cores,
        "os": system,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "command": shlex.join(["python", *(_from_checkout(arg) for arg in sys.argv)]),
        "argv": list(sys.argv),
    }


def _from_checkout(arg: str) -> str:
    """``arg`` relative to the checkout when it is a path inside it, else as it is."""
    path = Path(arg)
    if not path.is_absolute():
        return arg
    try:
        return str(path.relative_to(CHECKOUT))
    except ValueError:
        return arg


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


# --- the event loop -------------------------------------------------------------------


@dataclass
class Heartbeat:
    """The longest the event loop kept a 10 ms sleep waiting, per phase of the run."""

    phase: str = "setup"
    worst: dict[str, float] = field(default_factory=dict)

    async def run(self) -> None:
        while True:
            asked = anyio.current_time()
            await anyio.sleep(HEARTBEAT_SECONDS)
            late = anyio.current_time() - asked - HEARTBEAT_SECONDS
            if late > self.worst.get(self.phase, 0.0):
                self.worst[self.phase] = late


class GcClock:
    """Time spent in the garbage collector, per phase of the run: total, worst pause, passes.

    A full collection walks every tracked object of the process, so with thousands
    of followers it is the loop block the heartbeat sees; this says how much of it.
    """

    def __init__(self) -> None:
        self.phase = "setup"
        self.total: dict[str, float] = {}
        self.worst: dict[str, float] = {}
        self.full_passes: dict[str, int] = {}
        self._began = 0.0

    def install(self) -> None:
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, stage: str, info: dict[str, Any]) -> None:
        if stage == "start":
            self._began = time.perf_counter()
            return
        pause = time.perf_counter() - self._began
        self.total[self.phase] = self.total.get(self.phase, 0.0) + pause
        self.worst[self.phase] = max(self.worst.get(self.phase, 0.0), pause)
        if info.get("generation") == 2:
            self.full_passes[self.phase] = self.full_passes.get(self.phase, 0) + 1

    def figures(self) -> dict[str, Any]:
        return {
            "gc_ms": {phase: 1000 * t for phase, t in self.total.items()},
            "gc_worst_ms": {phase: 1000 * t for phase, t in self.worst.items()},
            "gc_full_passes": dict(self.full_passes),
        }


class LogCounter(logging.Handler):
    """Counts what a follower logs: failed reads (WARNING and up) and, given a predicate,
    the DEBUG records that say our own pool was full."""

    def __init__(self, is_pool_busy: Callable[[logging.LogRecord], bool] | None = None) -> None:
        super().__init__(logging.DEBUG)
        self._is_pool_busy = is_pool_busy
        self.warnings = 0
        self.pool_busy = 0
        self.samples: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.warnings += 1
            if len(self.samples) < 3:
                self.samples.append(record.getMessage()[:200])
        elif self._is_pool_busy is not None and self._is_pool_busy(record):
            self.pool_busy += 1

    def attach(self, logger_name: str, *, debug: bool) -> None:
        """Count this logger's records (and nothing else sees them)."""
        target = logging.getLogger(logger_name)
        target.addHandler(self)
        target.setLevel(logging.DEBUG if debug else logging.WARNING)
        target.propagate = False


# --- pages stored, and how late ---------------------------------------------------------


@dataclass
class Turn:
    """One follower's task: when its first event became visible, and what is stored of it."""

    task_id: str
    started_wall: float | None = None
    stored_next: int = 0
    first_page_wall: float | None = None
    last_page_wall: float | None = None


@dataclass
class Lags:
    """How late a window's pages were, two ways, in seconds, sorted.

    ``event``: when an event was stored minus when the agent made it visible; a poll
    interval of 1 s puts this between 0 and 1 s by design. ``poll``: how much later
    than its schedule each page came, the gap between two pages of one follower minus
    the poll interval (the read's own time and every wait for the event loop); a
    follower silent at the window's end counts as late as it is by then.
    """

    event: list[float]
    poll: list[float]
    unstored: int
    """Events due in the window but not stored by its end (counted in ``event`` as late as then)."""


class PageLog:
    """When each page of each turn was stored: start-up, page counts and the lag window.

    Fed by a store's ``put`` (from the event loop or, for the old follower, from its
    worker threads: hence the lock). During the lag window it only appends what it
    needs; the lags are worked out after the window, once every task's start is known.
    """

    def __init__(self, turns: dict[str, Turn], on_all_started: Callable[[], None]) -> None:
        self.turns = turns
        self._on_all_started = on_all_started
        self._lock = threading.Lock()
        self.started = 0
        self.pages = 0
        # By turn id, not Turn: a tuple of strings and numbers is left untracked by the
        # cyclic collector, so a window's pages do not feed the collector of the
        # process they measure (one holding a Turn would be walked by every full pass).
        self._recording: list[tuple[str, int, int, float, float | None]] | None = None

    def page_stored(self, turn_id: str, after: int, next_: int) -> None:
        now = time.time()
        turn = self.turns[turn_id]
        with self._lock:
            self.pages += 1
            turn.stored_next = max(turn.stored_next, next_)
            previous, turn.last_page_wall = turn.last_page_wall, now
            if self._recording is not None:
                self._recording.append((turn_id, after, next_, now, previous))
            if turn.first_page_wall is not None:
                return
            turn.first_page_wall = now
            self.started += 1
            everyone = self.started == len(self.turns)
        if everyone:
            self._on_all_started()

    def open_lag_window(self) -> None:
        with self._lock:
            self._recording = []

    def close_lag_window(
        self, low: float, high: float, event_interval: float, poll_interval: float
    ) -> Lags:
        """The lags of the window's pages; event lag over the events visible in [low, high].

        A turn whose ``started_wall`` is still unknown has no visible events.
        """
        now = time.time()
        with self._lock:
            recorded, self._recording = self._recording or [], None
        events: list[float] = []
        polls: list[float] = []
        for turn_id, after, next_, stored, previous in recorded:
            turn = self.turns[turn_id]
            if previous is not None:
                polls.append(stored - previous - poll_interval)
            if turn.started_wall is None:
                continue
            first, end = _visible_between(turn, low, high, event_interval)
            start = turn.started_wall
            events.extend(
                stored - (start + index * event_interval)
                for index in range(max(after, first), min(next_, end))
            )
        unstored = 0
        for turn in self.turns.values():
            if turn.last_page_wall is not None and now - turn.last_page_wall > poll_interval:
                polls.append(now - turn.last_page_wall - poll_interval)
            if turn.started_wall is None:
                continue  # never read: none of its events became visible
            first, end = _visible_between(turn, low, high, event_interval)
            start = turn.started_wall
            for index in range(max(turn.stored_next, first), end):
                events.append(now - (start + index * event_interval))
                unstored += 1
        return Lags(sorted(events), sorted(polls), unstored)


def _visible_between(turn: Turn, low: float, high: float, interval: float) -> tuple[int, int]:
    """The indexes of ``turn``'s events that became visible within [low, high]: [first, end)."""
    assert turn.started_wall is not None
    start = turn.started_wall
    first = max(0, math.ceil((low - start) / interval))
    end = max(0, math.floor((high - start) / interval) + 1)
    return first, end


# --- a long trajectory, canned (throughput.py and _old_throughput.py) ----------------

PAGE_EVENTS = 1000
"""The most events a read returns: the agent serves full pages."""
CANNED_TASK = "task-1"
CANNED_FORMAT = "agentenv.trajectory/v1"


def small_event(index: int) -> dict[str, Any]:
    """A small event, as the reference agent makes them (about 45 bytes of JSON)."""
    return {"index": index, "kind": "step", "text": f"step {index}"}


def canned_pages(events: int) -> dict[int, bytes]:
    """Every page a follower reads from 0, by its ``after``, encoded once."""
    pages = {}
    for after in range(0, max(events, 1), PAGE_EVENTS):
        next_ = min(after + PAGE_EVENTS, events)
        page = {
            "context_id": "ctx-1",
            "task_id": CANNED_TASK,
            "state": "completed",
            "format": CANNED_FORMAT,
            "events": [small_event(i) for i in range(after, next_)],
            "next": next_,
            "has_more": next_ < events,
        }
        pages[after] = json.dumps(page).encode()
    return pages


def canned_agent(events: int) -> Any:
    """An ``httpx.MockTransport`` answering each cursor read with its page, encoded beforehand."""
    import httpx

    pages = canned_pages(events)

    def answer(request: httpx.Request) -> httpx.Response:
        after = json.loads(request.content)["after"]
        return httpx.Response(
            200, content=pages[after], headers={"content-type": "application/json"}
        )

    return httpx.MockTransport(answer)


# --- printing -------------------------------------------------------------------------


def number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded for a terminal: the first left-aligned, the rest right-aligned."""
    everything = [list(header), *[list(row) for row in rows]]
    widths = [max(len(row[i]) for row in everything) for i in range(len(header))]
    out = []
    for index, row in enumerate(everything):
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        out.append("  ".join(cells).rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    return out


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The same table as markdown, to paste into docs/benchmarks.md."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
