"""The command line as a new user tries it: every run a subprocess, stdin closed, stdout a pipe.

Each point is something a first run got wrong: a traceback where one line was
due, a wrong exit code, a silence. Runs of async commands are made on both
backends (``--backend``).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import follower
from follower._cli._exits import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)
from follower._cli._main import follower_command
from follower._cli._parser import FAULT_NAMES, build_parser
from follower.testing import FAULT_NAMES as TESTING_FAULT_NAMES
from follower.testing import Fault, ReferenceAgent, TaskScript

from ..support.cli import (
    CLI,
    CONSOLE_SCRIPT,
    assert_no_traceback,
    assert_one_line_error,
    json_lines,
    only_step,
    printed_events,
    run_cli,
    run_cli_async,
    run_until_first_line_then_interrupt,
    send_message,
    serving,
)
from ..support.terminal import run_on_terminal

BACKENDS = ["asyncio", "trio"]
# Runs `python -m follower` as if hypercorn were not installed: its import fails.
CLI_WITHOUT_HYPERCORN = (
    sys.executable,
    "-c",
    "import runpy, sys; sys.modules['hypercorn'] = None; "
    "runpy.run_module('follower', run_name='__main__', alter_sys=True)",
)


def assert_usage_error(result: subprocess.CompletedProcess[str], says: str) -> None:
    """argparse's refusal: exit 2, its usage, then one error line; no traceback."""
    assert_no_traceback(result)
    assert result.returncode == EXIT_USAGE, result.stderr
    last = result.stderr.splitlines()[-1]
    assert re.fullmatch(r"follower( \w+)?: error: .+", last), result.stderr
    assert says in last, last


# --- version, help, options ----------------------------------------------------------------


def test_version_comes_from_the_package_metadata(tmp_path: Path) -> None:
    version = importlib.metadata.version("follower")
    assert follower.__version__ == version
    result = run_cli(["--version"], tmp_path)
    assert (result.returncode, result.stdout) == (EXIT_OK, f"follower {version}\n")


def test_help_shows_defaults_fault_modes_and_exit_codes(tmp_path: Path) -> None:
    top = run_cli(["--help"], tmp_path).stdout
    assert f"{EXIT_INCOMPLETE} follow:" in " ".join(top.split())
    demo = " ".join(run_cli(["demo", "--help"], tmp_path).stdout.split())
    assert "events per turn (default: 40)" in demo
    assert "cursor-mismatch" in demo
    tail = " ".join(run_cli(["tail", "--help"], tmp_path).stdout.split())
    assert "--idle-timeout SECONDS" in tail


def test_the_parser_lists_the_faults_the_testing_package_reads() -> None:
    assert FAULT_NAMES == TESTING_FAULT_NAMES


@pytest.mark.parametrize(
    "argv",
    [
        ["--backend", "trio", "-v", "demo"],
        ["demo", "--backend", "trio", "-v"],
        ["-v", "demo", "--backend", "trio"],
    ],
)
def test_global_options_go_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.command, args.backend, args.verbose) == ("demo", "trio", True)


def test_global_options_have_their_defaults_without_either() -> None:
    args = build_parser().parse_args(["validate"])
    assert (args.backend, args.verbose) == (None, False)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["agent", "--port", "abc"], "'abc' is not a port"),
        (["follow", "notaurl", "--message", "m"], "is not an agent's URL"),
        (["follow", "ftp://host/", "--message", "m"], "is not an agent's URL"),
        (["follow", "http://[::1", "--message", "m"], "is not a URL"),
        (["follow", "http://127.0.0.1:99999/", "--message", "m"], "is not a URL"),
        (["demo", "--interval", "nan"], "'nan' is not a number of seconds"),
        (["agent", "--events", "-1"], "'-1' is not a count"),
        (["agent", "--interval", "nan"], "'nan' is not a number of seconds"),
        (["agent", "--event-bytes", "-1"], "'-1' is not a count"),
        (["tail", ".", "p/", "turn-1", "--idle-timeout", "nan"], "'nan' is not a positive"),
        (["demo", "--turns", "0"], "0 is not a count of 1 or more"),
    ],
    ids=lambda value: "-".join(value) if isinstance(value, list) else None,
)
def test_bad_values_are_usage_errors_not_tracebacks(
    argv: list[str], says: str, tmp_path: Path
) -> None:
    assert_usage_error(run_cli(argv, tmp_path), says)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["demo", "agent"])
def test_demo_and_agent_without_the_testing_extra_name_it(command: str, tmp_path: Path) -> None:
    result = run_cli([command], tmp_path, command=CLI_WITHOUT_HYPERCORN)
    message = assert_one_line_error(result, EXIT_USAGE)
    assert message == (
        f"follower {command} needs the testing extra (hypercorn is missing): "
        "pip install '.[testing]' in a checkout of follower"
    )
    assert list(tmp_path.iterdir()) == []


# --- demo, and tail on what it stored --------------------------------------------------------


# A shell where the venv is not activated, as after `make demo`: `follower` is not on PATH.
PATH_WITHOUT_THE_VENV = {
    "PATH": os.pathsep.join(
        entry
        for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)
        if entry and Path(entry).resolve() != CONSOLE_SCRIPT.parent.resolve()
    )
}


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A demo run's folder (its store under ``store/``) and the last line it printed."""
    cwd = tmp_path_factory.mktemp("demo")
    args = ["demo", "--store", "store", "--turns", "2", "--events", "300", "--interval", "0"]
    result = run_cli(args, cwd, env=PATH_WITHOUT_THE_VENV)
    assert result.returncode == EXIT_OK, result.stderr
    return cwd, result.stdout.splitlines()[-1]


def test_the_demo_ends_with_the_command_that_reads_it_back(demo_folder: tuple[Path, str]) -> None:
    cwd, last = demo_folder
    step = only_step(cwd / "store")
    assert last.startswith("read it back: ")
    argv = shlex.split(last.removeprefix("read it back: "))
    # `follower` is not on this shell's PATH: the line names the command by its path.
    assert argv == [str(CONSOLE_SCRIPT), "tail", "store", f"steps/{step.name}/", "turn-1"]
    # Run as printed, in the shell the demo ran in.
    result = subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, **PATH_WITHOUT_THE_VENV},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == EXIT_OK, result.stderr
    assert len(json_lines(result.stdout)) == 600


def test_the_command_to_read_back_is_follower_when_path_finds_this_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(CONSOLE_SCRIPT.parent))
    assert follower_command() == ["follower"]


def test_the_command_to_read_back_is_relative_under_the_current_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As `make demo` runs it: from the checkout, with the venv under .venvs/.
    monkeypatch.chdir(CONSOLE_SCRIPT.parent.parent)
    monkeypatch.setenv("PATH", PATH_WITHOUT_THE_VENV["PATH"])
    assert follower_command() == [f"{CONSOLE_SCRIPT.parent.name}/{CONSOLE_SCRIPT.name}"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tail_into_head_ends_quietly(backend: str, demo_folder: tuple[Path, str]) -> None:
    cwd, last = demo_folder
    argv = [*shlex.split(last.removeprefix("read it back: "))[1:], "--backend", backend]
    with subprocess.Popen(
        [*CLI, *argv],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.readline()
        process.stdout.close()  # `| head -1` has what it wanted
        stderr = process.stderr.read().decode()
        returncode = process.wait(timeout=60)
    assert (returncode, stderr) == (EXIT_BROKEN_PIPE, "")


def test_tail_says_what_it_waits_for(tmp_path: Path) -> None:
    result = run_cli(["tail", ".", "steps/none/", "turn-1", "--idle-timeout", "0.3"], tmp_path)
    assert_no_traceback(result)
    assert result.returncode == EXIT_ERROR
    waiting, error = result.stderr.splitlines()
    assert waiting.startswith("follower: waiting for turn 'turn-1' under 'steps/none/' in .")
    assert "giving up after 0.3 s" in waiting
    assert error.startswith("follower: error: no new object")


def test_the_demo_fits_a_narrow_terminal(tmp_path: Path) -> None:
    columns = 40
    args = ["demo", "--store", "store", "--turns", "2", "--events", "30", "--interval", "0.01"]
    returncode, shown, _ = run_on_terminal(
        [*CLI, *args], tmp_path, columns=columns, lines=20, stderr_on_terminal=False
    )
    assert returncode == EXIT_OK
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode())
    # The bars ("  turn-1 ━━━╸━━    16 events reading"), not the summary ("  turn-1: ...").
    bars = [line for line in re.split(r"[\r\n]+", text) if re.match(r"\s+turn-\d+ ", line)]
    assert bars, text
    assert max(len(line) for line in bars) <= columns, bars


# --- follow --------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "fault",
    [Fault.not_json(), Fault.cursor_mismatch(), Fault.other_task(), Fault.unavailable()],
    ids=lambda fault: fault.kind.value,
)
async def test_follow_says_when_the_trajectory_was_not_read_whole(
    anyio_backend: str, fault: Fault, tmp_path: Path
) -> None:
    agent = ReferenceAgent(script=TaskScript(events=5, interval_seconds=0.01))
    agent.fault = fault
    with anyio.fail_after(60):
        async with serving(agent) as url:
            result = await run_cli_async(
                ["follow", url, "--message", "m", "--poll", "0.05", "--backend", anyio_backend],
                tmp_path,
            )
    assert_no_traceback(result)
    assert result.returncode == EXIT_INCOMPLETE, result.stderr
    error = result.stderr.splitlines()[-1]
    stored = len(result.stdout.splitlines())
    assert error.startswith("follower: error: task "), result.stderr
    assert f"not read to its end: {stored} of its events stored, not all" in error


@pytest.mark.anyio
async def test_follow_events_only_prints_the_bare_events(
    anyio_backend: str, tmp_path: Path
) -> None:
    script = TaskScript(events=4, interval_seconds=0.0)
    agent = ReferenceAgent(script=script)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with anyio.fail_after(60):
        async with serving(agent) as url:
            args = ["follow", url, "--message", "m", "--poll", "0.05", "--backend", anyio_backend]
            shaped = await run_cli_async(args, tmp_path / "a")
            bare = await run_cli_async([*args, "--events-only"], tmp_path / "b")
    events = [script.event(index) for index in range(4)]
    assert printed_events(shaped.stdout) == events
    assert json_lines(bare.stdout) == events


@pytest.mark.anyio
async def test_ctrl_c_twice_exits_130_quietly(anyio_backend: str, tmp_path: Path) -> None:
    agent = ReferenceAgent(script=TaskScript(events=10_000, interval_seconds=0.01))
    with anyio.fail_after(60):
        async with serving(agent) as url:
            task_id = await send_message(url, "started elsewhere")
            args = ["follow", url, "--task", task_id, "--poll", "0.05"]
            run = await run_until_first_line_then_interrupt(
                [*args, "--backend", anyio_backend], tmp_path, times=2
            )
    assert_no_traceback(run)
    assert run.returncode == EXIT_INTERRUPTED, run.stderr
    assert "CancelledError" not in run.stderr
    assert run.stderr.splitlines()[-1].startswith("follower: interrupted"), run.stderr
