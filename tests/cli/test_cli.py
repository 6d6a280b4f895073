"""The ``follower`` command line, run as a user runs it: a subprocess, its output, its exit code.

Each command runs in a folder of the test's own (``cwd=tmp_path``), with
``python -m follower`` or the console script. ``follow`` tests serve the
reference agent in the test process, on a loopback socket, under asyncio and
trio, and run the command on the same backend. The demo runs (one per backend,
and the slow ones against a faulty agent) start in the background with the
module and are collected by the tests that read them, so they overlap the rest.
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from follower import FilesystemStore, TrajectoryState
from follower._cli._main import (
    EXIT_BAD_STORE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NO_LIVE_TRAJECTORY,
    EXIT_OK,
    EXIT_UNKNOWN_TASK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    EXIT_WRITER_GONE,
)
from follower._format._layout import HeartbeatMark, TurnKeys
from follower._format._wire import TRAJECTORY_EXTENSION_URI
from follower._storing._chunks import write_next_turn
from follower.lowlevel import LiveTrajectoryChunks, TrajectoryBatch
from follower.testing import ReferenceAgent, TaskScript

from ..support.cli import (
    CONSOLE_SCRIPT,
    VERDICT,
    AgentWithoutLiveTrajectory,
    BackgroundRun,
    assert_no_traceback,
    assert_one_line_error,
    closed_port,
    get_card,
    json_lines,
    only_step,
    printed_events,
    run_cli,
    run_cli_async,
    run_until_first_line_then_interrupt,
    send_message,
    serving,
    without_padding,
)
from ..support.stored import StoredTurn, read_linked_turns

pytestmark = pytest.mark.anyio

BACKENDS = ["asyncio", "trio"]
DEMO_TURNS = ["turn-1", "turn-2", "turn-3"]
DEMO_EVENTS = 10
SMALL_DEMO = ["--events", str(DEMO_EVENTS), "--interval", "0.01"]
# The demo's own events, padding aside (the demo pads them; the content is the script's).
SCRIPT = TaskScript()
SUMMARY_TURN = re.compile(
    r"^  (turn-\d+): (?:not run|(\d+) events? in (\d+) chunks?, ended (\w+)(, incomplete)?, "
    r"next turn: (\S+))$",
    re.MULTILINE,
)


def script_events(script: TaskScript) -> list[Any]:
    return [script.event(index) for index in range(script.events)]


# --- runs started with the module, collected by the tests that need them -------------------

# The demo per backend (shared by the demo and tail tests), and the demo against a faulty
# agent: under ``gone`` every turn waits out the demo's task deadline (15 s), so these
# runs start first and overlap every other test.
FAULTS = ["gone", "not-json"]
FAULT_RUNS = [f"{fault}-{backend}" for fault in FAULTS for backend in BACKENDS]


def _demo_args(backend: str, *more: str) -> list[str]:
    return ["--backend", backend, "demo", "--store", "store", *SMALL_DEMO, *more]


@pytest.fixture(scope="module")
def background_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, BackgroundRun]]:
    wanted = {
        name
        for item in request.session.items
        if item.module is request.module
        for name in getattr(item, "fixturenames", ())
    }
    planned: dict[str, list[str]] = {}
    if "demo" in wanted:
        planned.update({f"demo-{backend}": _demo_args(backend) for backend in BACKENDS})
    if "fault_run" in wanted:
        for fault in FAULTS:
            for backend in BACKENDS:
                planned[f"demo-{fault}-{backend}"] = _demo_args(backend, "--fault", fault)
    runs: dict[str, BackgroundRun] = {}
    try:
        for run_id, args in planned.items():
            runs[run_id] = BackgroundRun.start(args, tmp_path_factory.mktemp(run_id))
        yield runs
    finally:
        for run in runs.values():
            run.stop()


@pytest.fixture(scope="module", autouse=True)
def _start_background_runs(background_runs: dict[str, BackgroundRun]) -> None:
    """Start the module's slow runs before its first test (only those its tests need)."""


# --- --help ------------------------------------------------------------------------------

HELP_MENTIONS = {
    (): ["demo", "agent", "follow", "tail", "--backend", "--verbose"],
    ("demo",): ["--store", "--turns", "--events", "--interval", "--fault"],
    ("agent",): [
        "--host",
        "--port",
        "--events",
        "--interval",
        "--event-bytes",
        "--final-state",
        "--fault",
    ],
    ("follow",): [
        "url",
        "--via",
        "--task",
        "--message",
        "--store",
        "--prefix",
        "--turn",
        "--poll",
        "--deadline",
    ],
    ("tail",): ["store", "prefix", "turn", "--poll", "--idle-timeout"],
}


@pytest.mark.parametrize("command", list(HELP_MENTIONS), ids=lambda c: " ".join(c) or "main")
def test_help_names_every_option(command: tuple[str, ...], tmp_path: Path) -> None:
    result = run_cli([*command, "--help"], tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith(" ".join(["usage: follower", *command]))
    for mention in HELP_MENTIONS[command]:
        assert mention in result.stdout, (mention, result.stdout)


# --- usage errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["follow", "http://127.0.0.1:9/"],  # neither --task nor --message
    ],
    ids=["no-command", "follow-without-task-or-message"],
)
def test_bad_arguments_are_a_usage_error(args: list[str], tmp_path: Path) -> None:
    result = run_cli(args, tmp_path)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert_no_traceback(result)
    # argparse's own errors: its usage, then one error line (named after the subcommand).
    assert re.fullmatch(r"follower( \w+)?: error: .+", result.stderr.splitlines()[-1])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["demo", "--store", "s", "--fault", "nonsense"], ["unknown fault 'nonsense'", "gone"]),
        (["tail", ".", "no-slash", "turn-1"], ["invalid prefix 'no-slash'"]),
    ],
    ids=["unknown-fault", "prefix-without-slash"],
)
def test_bad_values_are_one_line_usage_errors(
    args: list[str], says: list[str], tmp_path: Path
) -> None:
    message = assert_one_line_error(run_cli(args, tmp_path), EXIT_USAGE)
    for text in says:
        assert text in message
    # Refused before anything was stored.
    assert not (tmp_path / "s").exists()


# --- demo --------------------------------------------------------------------------------


@attrs.frozen
class DemoRun:
    backend: str
    cwd: Path
    result: subprocess.CompletedProcess[str]

    @property
    def store(self) -> Path:
        return self.cwd / "store"

    @property
    def step(self) -> Path:
        return only_step(self.store)

    @property
    def prefix(self) -> str:
        return f"steps/{self.step.name}/"


@pytest.fixture(scope="module", params=BACKENDS)
def demo(request: pytest.FixtureRequest, background_runs: dict[str, BackgroundRun]) -> DemoRun:
    """One small demo per backend, stored under ``./store``; shared by the demo and tail tests."""
    backend: str = request.param
    run = background_runs[f"demo-{backend}"]
    return DemoRun(backend, run.cwd, run.result())


def check_demo_summary(result: subprocess.CompletedProcess[str], store: Path) -> list[StoredTurn]:
    """The demo exited 0 with its verdict, and its summary says what the files hold."""
    assert result.returncode == EXIT_OK, result.stderr
    lines = result.stdout.splitlines()
    verdicts = [line for line in lines if line.startswith(VERDICT)]
    assert len(verdicts) == 1, result.stdout
    step = only_step(store)
    stored_under = re.search(r"^stored under (.+)$", result.stdout, re.MULTILINE)
    assert stored_under is not None, result.stdout
    assert Path(stored_under.group(1)) == step.resolve()
    turns = read_linked_turns(step, "turn-1")
    by_id = {turn.turn_id: turn for turn in turns}
    reported = SUMMARY_TURN.findall(result.stdout)
    assert [turn_id for turn_id, *_ in reported] == DEMO_TURNS, result.stdout
    incomplete = []
    for turn_id, events, chunks, state, said_incomplete, link in reported:
        if not events:  # "not run"
            assert turn_id not in by_id
            continue
        turn = by_id[turn_id]
        # The summary read the store when the step ended; a put abandoned at a drain's
        # deadline may land later, so the files read now may hold more than it counted.
        assert int(events) <= len(turn.events)
        assert int(chunks) <= len(turn.chunks)
        assert turn.end is not None
        assert turn.next_turn is not None
        assert state == turn.end["state"]
        assert bool(said_incomplete) == (turn.end["complete"] is False)
        assert link == (turn.next_turn["turn"] or "(last)")
        if said_incomplete:
            incomplete.append(turn_id)
    # The verdict names every turn stored incomplete, and only those.
    if incomplete:
        assert verdicts[0].startswith(f"{VERDICT}; INCOMPLETE: {', '.join(incomplete)} ")
    else:
        assert verdicts == [VERDICT]
    total = sum(len(turn.events) for turn in turns)
    events = "1 event" if total == 1 else f"{total} events"
    followed = "1 turn" if len(turns) == 1 else f"{len(turns)} turns"
    assert f"  read back: {events} across {followed}" in lines
    for turn in turns:
        # Whatever a fault did, what is stored is the start of the script, in order.
        assert [without_padding(e) for e in turn.events] == [
            SCRIPT.event(index) for index in range(len(turn.events))
        ]
    return turns


STREAMED_SUMMARY = re.compile(
    r"^  streamed turn-1: (\d+) events? in (\d+) chunks?, ended (\w+), next turn: \(last\)$",
    re.MULTILINE,
)


def check_streamed_step(result: subprocess.CompletedProcess[str], step: Path) -> StoredTurn:
    """The demo's streamed step, beside ``step`` (``<step>-streamed``): one turn, as its
    summary says."""
    assert re.search(r"^streamed step completed in ", result.stdout, re.MULTILINE), result.stdout
    said = STREAMED_SUMMARY.search(result.stdout)
    assert said is not None, result.stdout
    [turn] = read_linked_turns(step.with_name(f"{step.name}-streamed"), "turn-1")
    assert int(said.group(1)) == len(turn.events)
    assert int(said.group(2)) == len(turn.chunks)
    assert said.group(3) == "completed"
    assert f"  read back (streamed): {len(turn.events)} events across 1 turn" in result.stdout
    read_back = re.search(r"^read the streamed step back: (.+)$", result.stdout, re.MULTILINE)
    assert read_back is not None, result.stdout
    assert read_back.group(1).endswith(f" tail store steps/{step.name}-streamed/ turn-1")
    return turn


def test_demo_stores_three_linked_ended_turns(demo: DemoRun) -> None:
    result = demo.result
    assert_no_traceback(result)
    assert "error" not in result.stderr.lower(), result.stderr
    assert f"{len(DEMO_TURNS)} turns of {DEMO_EVENTS} events" in result.stdout
    assert re.search(r"^step completed in ", result.stdout, re.MULTILINE), result.stdout
    turns = check_demo_summary(result, demo.store)
    assert [turn.turn_id for turn in turns] == DEMO_TURNS
    assert [turn.next_turn for turn in turns] == [
        {"turn": "turn-2"},
        {"turn": "turn-3"},
        {"turn": None},
    ]
    for turn in turns:
        assert turn.end == {"state": "completed", "next": DEMO_EVENTS, "complete": True}
        assert turn.meta == {"format": SCRIPT.format}
        assert len(turn.events) == DEMO_EVENTS


def test_demo_stores_a_streamed_turn_beside_them(demo: DemoRun) -> None:
    # The agent's stream, as A2A events: its snapshot and updates carry every event once.
    turn = check_streamed_step(demo.result, demo.step)
    assert turn.meta == {"format": "a2a-stream/v1"}
    assert turn.end == {"state": "completed", "next": len(turn.events), "complete": True}
    assert turn.next_turn == {"turn": None}
    kinds = [kind for event in turn.events for kind in event]
    assert len(kinds) == len(turn.events)  # one kind an event
    assert kinds[0] == "task"
    assert set(kinds[1:]) <= {"statusUpdate", "artifactUpdate"}, kinds
    carried: dict[int, list[Any]] = {}
    for message in messages_in(turn.events):
        index = re.search(r"-event-(\d+)$", message["messageId"])
        if index is not None:
            [part] = message["parts"]
            carried.setdefault(int(index.group(1)), []).append(without_padding(part["data"]))
    assert carried == {index: [SCRIPT.event(index)] for index in range(DEMO_EVENTS)}
    # The tail the demo printed reads it back, as stored.
    tail = [
        "--backend",
        demo.backend,
        "tail",
        "store",
        f"steps/{demo.step.name}-streamed/",
        "turn-1",
    ]
    result = run_cli(tail, demo.cwd)
    assert result.returncode == EXIT_OK, result.stderr
    assert printed_events(result.stdout) == turn.events


def messages_in(value: Any) -> list[dict[str, Any]]:
    """Every A2A message inside ``value`` (one with a ``messageId``), in order, at any depth."""
    if isinstance(value, dict):
        here = [value] if "messageId" in value else []
        return here + [m for inner in value.values() for m in messages_in(inner)]
    if isinstance(value, list):
        return [m for inner in value for m in messages_in(inner)]
    return []


# --- tail --------------------------------------------------------------------------------


def expected_tail(turns: list[StoredTurn]) -> list[dict[str, Any]]:
    return [
        {"turn": turn.turn_id, "index": index, "event": event}
        for turn in turns
        for index, event in enumerate(turn.events)
    ]


def test_tail_prints_every_stored_event_across_turns(demo: DemoRun) -> None:
    turns = read_linked_turns(demo.step, "turn-1")
    result = run_cli(["--backend", demo.backend, "tail", "store", demo.prefix, "turn-1"], demo.cwd)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stderr == ""
    printed = json_lines(result.stdout)
    assert printed == expected_tail(turns)
    assert len(printed) == len(DEMO_TURNS) * DEMO_EVENTS


def test_console_script_tails_from_a_later_turn(demo: DemoRun) -> None:
    assert CONSOLE_SCRIPT.is_file(), "install the project: tools/venv X.Y test"
    turns = read_linked_turns(demo.step, "turn-2", first=False)
    result = run_cli(
        ["--backend", demo.backend, "tail", str(demo.store), demo.prefix, "turn-2"],
        demo.cwd,
        command=[CONSOLE_SCRIPT],
    )
    assert result.returncode == EXIT_OK, result.stderr
    assert json_lines(result.stdout) == expected_tail(turns)
    assert [turn.turn_id for turn in turns] == ["turn-2", "turn-3"]


def test_tail_needs_a_store_folder(tmp_path: Path) -> None:
    message = assert_one_line_error(
        run_cli(["tail", "missing", "steps/s/", "turn-1"], tmp_path), EXIT_BAD_STORE
    )
    assert "'missing'" in message
    assert not (tmp_path / "missing").exists()  # tail reads; it never makes the store


async def write_step_that_never_ends(root: Path) -> list[Any]:
    """Turn t1 (ended, linked to t2) and t2 (two events, never ended); the events."""
    store = FilesystemStore(root)
    first, second = [{"n": 1}, {"n": 2}, {"n": 3}], [{"n": 4}, {"n": 5}]
    t1 = LiveTrajectoryChunks(store, "step/", "t1")
    await t1(TrajectoryBatch(0, 3, first, "test/v1", TrajectoryState.COMPLETED, True))
    await t1.end(TrajectoryState.COMPLETED)
    await write_next_turn(store, TurnKeys("step/", "t1"), "t2")
    t2 = LiveTrajectoryChunks(store, "step/", "t2")
    await t2(TrajectoryBatch(0, 2, second, "test/v1", TrajectoryState.RUNNING, False))
    return [("t1", i, e) for i, e in enumerate(first)] + [
        ("t2", i, e) for i, e in enumerate(second)
    ]


def test_tail_gives_up_on_a_turn_that_never_ends(tmp_path: Path) -> None:
    stored = anyio.run(write_step_that_never_ends, tmp_path / "store")
    result = run_cli(
        ["tail", "store", "step/", "t1", "--idle-timeout", "0.5", "--poll", "0.1"], tmp_path
    )
    # Everything stored is printed first, across the link; then the reader gives up.
    assert json_lines(result.stdout) == [
        {"turn": turn, "index": index, "event": event} for turn, index, event in stored
    ]
    message = assert_one_line_error(result, EXIT_ERROR)
    assert "step/t2/live/" in message
    assert "0.5 s" in message


async def write_turn_whose_writer_is_gone(root: Path) -> None:
    """A turn whose writer beat every 0.2 s, stored an event, and stopped: no end mark."""
    store = FilesystemStore(root)
    sink = LiveTrajectoryChunks(
        store, "step/", "t1", task_id="k1", endpoint="http://agent.test/", heartbeat_seconds=0.2
    )
    await sink(TrajectoryBatch(0, 1, ("a",), "test/v1", TrajectoryState.RUNNING, False))
    beat = HeartbeatMark.beating_now(0, 0.2).encode()
    await store.put(TurnKeys("step/", "t1").heartbeat(0), beat, content_type="application/json")


def test_tail_says_when_a_turns_writer_stopped_without_an_end_mark(tmp_path: Path) -> None:
    anyio.run(write_turn_whose_writer_is_gone, tmp_path / "store")
    # No --idle-timeout: a tail waits for ever on a turn of a live writer, not on this one.
    result = run_cli(["tail", "store", "step/", "t1", "--poll", "0.1"], tmp_path)
    assert json_lines(result.stdout) == [{"turn": "t1", "index": 0, "event": "a"}]
    message = assert_one_line_error(result, EXIT_WRITER_GONE)
    assert "the writer of turn 't1' stopped without an end mark" in message
    assert "step/t1/alive/" in message


# --- agent -------------------------------------------------------------------------------


def test_agent_refuses_a_port_out_of_range(tmp_path: Path) -> None:
    # The parser refuses it, as it refuses any bad option: usage, one error line, exit 2.
    result = run_cli(["agent", "--port", "99999"], tmp_path)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "Traceback" not in result.stderr
    assert "'99999' is not a port" in result.stderr


def test_agent_says_when_its_port_is_taken(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = run_cli(["agent", "--port", port], tmp_path)
    message = assert_one_line_error(result, None)
    assert f"cannot listen on 127.0.0.1:{port}" in message


async def test_agent_serves_its_card_until_interrupted(anyio_backend: str, tmp_path: Path) -> None:
    cards: list[dict[str, Any]] = []

    async def fetch_card(line: str) -> None:
        match = re.fullmatch(r"reference agent serving on (http://127\.0\.0\.1:\d+/)", line)
        assert match is not None, line
        cards.append(await get_card(match.group(1)))

    with anyio.fail_after(60):
        run = await run_until_first_line_then_interrupt(
            ["--backend", anyio_backend, "agent", "--port", "0"], tmp_path, fetch_card
        )
    [card] = cards
    assert [e["uri"] for e in card["capabilities"]["extensions"]] == [TRAJECTORY_EXTENSION_URI]
    assert "card: http://127.0.0.1:" in run.stdout
    assert_no_traceback(run)
    assert run.stderr.splitlines() == ["follower: interrupted"]
    assert run.returncode == EXIT_INTERRUPTED


# --- follow ------------------------------------------------------------------------------


def follow_args(backend: str, url: str, *args: str) -> list[str]:
    return ["--backend", backend, "follow", url, "--poll", "0.05", *args]


def assert_ended(result: subprocess.CompletedProcess[str], task_id: str = r"\S+") -> str:
    """The run says its task first (to resume it by), the way it follows it, then how it
    ended; its id."""
    assert result.returncode == EXIT_OK, result.stderr
    said = re.fullmatch(
        rf"follower: task ({task_id})\nfollower: following task \1 by cursor reads of its "
        r"live trajectory \(the card offers a live trajectory\)\n"
        r"follower: task \1 ended completed\n",
        result.stderr,
    )
    assert said, result.stderr
    return said.group(1)


async def test_follow_a_message_prints_each_event_as_a_json_line(
    anyio_backend: str, tmp_path: Path
) -> None:
    # Every event at once, and done: the command's first tasks/get sees the task ended
    # (a running task costs the command's 1 s tasks/get poll).
    agent = ReferenceAgent(script=TaskScript(events=8, interval_seconds=0, event_bytes=16))
    with anyio.fail_after(60):
        async with serving(agent) as url:
            result = await run_cli_async(
                follow_args(anyio_backend, url, "--message", "hi"), tmp_path
            )
    assert_ended(result)
    assert printed_events(result.stdout) == script_events(agent.script)
    assert agent.statistics().tasks == 1
    assert [p async for p in anyio.Path(tmp_path).iterdir()] == []  # no --store: nothing written


async def test_follow_a_message_also_stores_it(anyio_backend: str, tmp_path: Path) -> None:
    agent = ReferenceAgent(script=TaskScript(events=8, interval_seconds=0))
    args = ["--message", "hi", "--store", "out", "--prefix", "run/", "--turn", "t1"]
    with anyio.fail_after(60):
        async with serving(agent) as url:
            result = await run_cli_async(follow_args(anyio_backend, url, *args), tmp_path)
    assert_ended(result)
    assert printed_events(result.stdout, "t1") == script_events(agent.script)
    [turn] = read_linked_turns(tmp_path / "out" / "run", "t1")
    assert turn.events == script_events(agent.script)
    assert turn.end == {"state": "completed", "next": agent.script.events, "complete": True}
    assert turn.next_turn == {"turn": None}


async def test_follow_a_running_task_to_its_end(anyio_backend: str, tmp_path: Path) -> None:
    # The task runs about a second: the command joins it while it runs.
    agent = ReferenceAgent(script=TaskScript(events=20, interval_seconds=0.05))
    with anyio.fail_after(60):
        async with serving(agent) as url:
            task_id = await send_message(url, "started elsewhere")
            result = await run_cli_async(
                follow_args(anyio_backend, url, "--task", task_id, "--store", "out"), tmp_path
            )
    assert_ended(result, re.escape(task_id))
    assert printed_events(result.stdout) == script_events(agent.script)
    # By default each task has a prefix of its own, so runs never mix.
    [turn] = read_linked_turns(tmp_path / "out" / "follow" / task_id, "turn-1")
    assert turn.events == script_events(agent.script)
    assert turn.end == {"state": "completed", "next": agent.script.events, "complete": True}
    assert agent.statistics().tasks == 1  # followed, not started again


async def test_follow_an_unknown_task(anyio_backend: str, tmp_path: Path) -> None:
    agent = ReferenceAgent()
    with anyio.fail_after(60):
        async with serving(agent) as url:
            result = await run_cli_async(
                follow_args(anyio_backend, url, "--task", "no-such-task"), tmp_path
            )
    message = assert_one_line_error(result, EXIT_UNKNOWN_TASK)
    assert "unknown task" in message
    assert result.stdout == ""


@pytest.mark.parametrize("backend", BACKENDS)
def test_follow_an_unreachable_agent(backend: str, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/"
    result = run_cli(follow_args(backend, url, "--message", "hi"), tmp_path)
    message = assert_one_line_error(result, EXIT_UNREACHABLE)
    assert "unreachable" in message
    assert url.removesuffix("/") in message
    assert result.stdout == ""


async def test_follow_via_cursor_an_agent_without_the_live_extension(
    anyio_backend: str, tmp_path: Path
) -> None:
    # Without --via, its stream is taken (test_cli_ways); asked for, cursor reads are refused.
    agent = AgentWithoutLiveTrajectory()
    with anyio.fail_after(60):
        async with serving(agent) as url:
            result = await run_cli_async(
                follow_args(anyio_backend, url, "--message", "hi", "--via", "cursor"), tmp_path
            )
    message = assert_one_line_error(result, EXIT_NO_LIVE_TRAJECTORY)
    assert "offers no live trajectory" in message
    assert TRAJECTORY_EXTENSION_URI in message
    assert "without --via cursor" in message
    assert agent.statistics().tasks == 0  # refused before sending anything


async def test_follow_into_a_store_that_is_a_file(anyio_backend: str, tmp_path: Path) -> None:
    (tmp_path / "out").write_text("not a folder")
    agent = ReferenceAgent()
    with anyio.fail_after(60):
        async with serving(agent) as url:
            result = await run_cli_async(
                follow_args(anyio_backend, url, "--message", "hi", "--store", "out"), tmp_path
            )
    message = assert_one_line_error(result, EXIT_BAD_STORE)
    assert "'out'" in message
    assert (tmp_path / "out").read_text() == "not a folder"
    assert agent.statistics().tasks == 0  # refused before sending anything


async def test_follow_interrupted_ends_its_turn_and_cancels_the_task(
    anyio_backend: str, tmp_path: Path
) -> None:
    # A task of about 100 s: interrupted (Ctrl-C) once its first event is shown.
    agent = ReferenceAgent(script=TaskScript(events=10_000, interval_seconds=0.01))
    with anyio.fail_after(60):
        async with serving(agent) as url:
            run = await run_until_first_line_then_interrupt(
                follow_args(anyio_backend, url, "--message", "hi", "--store", "out"), tmp_path
            )
    # The turn is still closed properly: ended and marked last, and the agent was told.
    said = re.match(r"follower: task (\S+)\n", run.stderr)
    assert said, run.stderr  # the task is named first, so the run can be resumed
    [turn] = read_linked_turns(tmp_path / "out" / "follow" / said.group(1), "turn-1")
    assert turn.next_turn == {"turn": None}
    assert turn.end is not None
    assert turn.end["state"] == "canceled"
    assert turn.end["complete"] is False
    assert turn.events == [agent.script.event(i) for i in range(len(turn.events))]
    printed = printed_events(run.first_line + "\n" + run.stdout)
    assert printed == turn.events[: len(printed)]
    assert agent.statistics().canceled_tasks == 1
    # And the user is told, in one line.
    assert_no_traceback(run)
    assert run.stderr.splitlines()[-1:] == ["follower: interrupted"], run.stderr
    assert run.returncode == EXIT_INTERRUPTED


# --- demo against a faulty agent (last: its runs are the slowest) ---------------------------


@pytest.fixture(params=FAULT_RUNS)
def fault_run(
    request: pytest.FixtureRequest, background_runs: dict[str, BackgroundRun]
) -> BackgroundRun:
    return background_runs[f"demo-{request.param}"]


def test_demo_survives_a_faulty_agent(fault_run: BackgroundRun) -> None:
    result = fault_run.result()
    assert f"(fault: {fault_run.args[-1]})" in result.stdout
    turns = check_demo_summary(result, fault_run.cwd / "store")
    assert turns, "the first turn is always followed"


def test_demo_reports_a_faulty_agent_without_tracebacks(fault_run: BackgroundRun) -> None:
    result = fault_run.result()
    assert result.returncode == EXIT_OK, result.stderr
    assert_no_traceback(result)
