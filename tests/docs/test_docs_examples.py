"""Every code example in the docs and the README runs; a page whose example breaks fails here.

Each fenced block is taken from the Markdown as it is written. What a block is, is said by a
comment on the line before it, ``<!-- test: KIND [ARGUMENT] -->`` (docs/contributing.md lists
them); a ``python`` block without one is a complete program. Programs, S3 programs and shell
commands run in a subprocess each, in order, in one folder per page (a page's ``follower tail``
reads what its program stored); ``anyio`` and ``agent-step`` blocks run in this process on
both backends.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from follower import FilesystemStore, StoredEvent, read_live_trajectory
from follower.testing import ReferenceAgent, TaskScript, serve_agent

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
# A program gets this long; a shell block as long, for each of its commands.
PROGRAM_SECONDS = 120
MARKER = re.compile(r"^<!-- test: (?P<kind>[\w-]+)(?: (?P<argument>.*?))? -->$")
FENCE = re.compile(r"^(?P<ticks>`{3,})(?P<lang>[\w-]*)")
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"$', re.MULTILINE)
KINDS = {None, "anyio", "agent-step", "s3", "pytest", "sh", "excerpt", "sketch", "included"}
# Kinds run in a subprocess, in the page's order and folder.
PROGRAM_KINDS = {None, "s3", "pytest", "sh"}


@attrs.frozen
class Block:
    page: Path
    line: int
    lang: str
    kind: str | None
    argument: str | None
    code: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> Iterator[Block]:
    """The fenced blocks of ``page``, with the marker before each; snippets filled in."""
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        start = index
        ticks = fence["ticks"]
        index += 1
        while index < len(lines) and lines[index].rstrip() != ticks:
            index += 1
        before = next((line for line in reversed(lines[:start]) if line.strip()), "")
        marker = MARKER.match(before.strip())
        code = "\n".join(lines[start + 1 : index]) + "\n"
        code = SNIPPET.sub(lambda m: (ROOT / m["path"]).read_text(encoding="utf-8"), code)
        yield Block(
            page=page,
            line=start + 1,
            lang=fence["lang"],
            kind=marker["kind"] if marker else None,
            argument=marker["argument"] if marker else None,
            code=code,
        )
        index += 1


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]
PYTHON = [block for block in ALL_BLOCKS if block.lang == "python"]


def runs_as_program(block: Block) -> bool:
    if block.lang == "python":
        return block.kind in PROGRAM_KINDS - {"sh"}
    return block.lang == "sh" and block.kind == "sh"


PROGRAM_PAGES = sorted({block.page for block in ALL_BLOCKS if runs_as_program(block)})


def of_kind(kind: str) -> list[Block]:
    return [block for block in PYTHON if block.kind == kind]


def ids(block: Block) -> str:
    return block.name


# --- what is on the pages --------------------------------------------------------------


def test_the_pages_have_examples_of_every_kind() -> None:
    kinds = {block.kind for block in ALL_BLOCKS}
    assert {None, "anyio", "agent-step", "s3", "pytest", "sh", "excerpt"} <= kinds


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang == "python" or b.kind], ids=ids)
def test_each_marker_is_known_and_each_python_block_parses(block: Block) -> None:
    assert block.kind in KINDS, f"{block.name}: unknown marker {block.kind!r}"
    if block.lang == "python":
        ast.parse(block.code, filename=block.name)


# Not whole modules: a part of the library's source, or a sketch with gaps.
UNTYPED_KINDS = {"excerpt", "sketch", "included"}


def test_every_example_type_checks_under_mypy_strict(tmp_path: Path) -> None:
    # Users copy the examples into code checked as strictly as this library is: a
    # None passed where a str is wanted (agent.trajectory_endpoint) must show here.
    files = {}
    for block in PYTHON:
        if block.kind in UNTYPED_KINDS:
            continue
        path = tmp_path / ("example_" + re.sub(r"\W", "_", block.name) + ".py")
        path.write_text(block.code, encoding="utf-8")
        files[str(path)] = block.name
    assert len(files) >= 10, "the examples were found"
    cache = tmp_path / "cache"
    # A copy of lint's cache (tools/lint, before the suite in make test): the library and
    # its dependencies are not checked again here, and mypy's incremental mode rechecks
    # whatever changed since, or differs (another Python's packages, another mypy).
    if (ROOT / ".mypy_cache").is_dir():
        shutil.copytree(ROOT / ".mypy_cache", cache)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    report = checked.stdout
    for path, name in files.items():
        report = report.replace(path, name)
    assert checked.returncode == 0, report + checked.stderr


@pytest.mark.parametrize("block", of_kind("included"), ids=ids)
def test_an_included_file_is_run_by_the_test_its_marker_names(block: Block) -> None:
    included = SNIPPET.findall((block.page).read_text(encoding="utf-8"))
    assert block.argument, f"{block.name}: name the test that runs the included file"
    test_file = ROOT / block.argument
    assert any(Path(path).name in test_file.read_text(encoding="utf-8") for path in included)


API_PAGES = {
    "follower": "docs/api/follower.md",
    "follower.lowlevel": "docs/api/lowlevel.md",
    "follower.testing": "docs/api/testing.md",
    "follower.s3": "docs/api/s3.md",
    "follower.temporal": "docs/api/temporal.md",
}


@pytest.mark.parametrize("package", sorted(API_PAGES))
def test_every_exported_name_has_an_api_reference_entry(package: str) -> None:
    exported = importlib.import_module(package).__all__
    entries = set(re.findall(r"^::: (\S+)$", (ROOT / API_PAGES[package]).read_text(), re.M))
    # A name may be documented where it is defined, in a module of the package.
    missing = [
        name
        for name in exported
        if not any(e.startswith(f"{package}.") and e.endswith(f".{name}") for e in entries)
    ]
    assert not missing, f"{API_PAGES[package]} has no entry for {missing}"


def test_the_readme_names_no_command_the_cli_rejects() -> None:
    from follower._cli._parser import build_parser

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", readme, re.M | re.S)
    lines = [
        line.split("#")[0].strip()
        for language, block in blocks
        if language == "sh"
        for line in block.splitlines()
    ]
    commands = [
        shlex.split(line)[1:]
        for line in lines
        if line.startswith("follower ") and "[" not in line  # "[--opt X]" is a synopsis
    ]
    assert len(commands) >= 5, commands
    for argv in commands:
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            pytest.fail(f"the README's `follower {shlex.join(argv)}` is rejected by the CLI")


# --- programs, in a subprocess --------------------------------------------------------


def run_program(block: Block, folder: Path, environment: dict[str, str]) -> str:
    """Run one block in ``folder``; its output, or a failure naming the block."""
    if block.lang == "sh":
        command = ["sh", "-eu", "-c", block.code]
    elif block.kind == "pytest":
        (folder / "test_docs_example.py").write_text(block.code, encoding="utf-8")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["-p", "no:looptime_plugin", "test_docs_example.py"]
    else:
        command = [sys.executable, "-c", block.code]
    try:
        done = subprocess.run(
            command,
            cwd=folder,
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROGRAM_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name} did not finish within {PROGRAM_SECONDS} s")
    if done.returncode != 0:
        pytest.fail(
            f"{block.name} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def program_environment() -> dict[str, str]:
    environment = dict(os.environ)
    # The environment's own `follower` first, as a user who installed it has.
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    return environment


@pytest.fixture(scope="module")
def s3_environment() -> Iterator[dict[str, str]]:
    """moto's S3 server on loopback, a `my-bucket` in it, and what a program needs to reach it."""
    from ..support.s3 import FAKE_AWS_ENVIRONMENT, running_s3_server, s3_client

    with running_s3_server() as endpoint_url:
        s3_client(endpoint_url).create_bucket(Bucket="my-bucket")
        yield {**FAKE_AWS_ENVIRONMENT, "AWS_ENDPOINT_URL": endpoint_url}


@pytest.mark.parametrize("page", PROGRAM_PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_a_pages_programs_run(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    environment = program_environment()
    for block in blocks_of(page):
        if not runs_as_program(block):
            continue
        if block.kind == "s3":
            environment = {**environment, **request.getfixturevalue("s3_environment")}
        run_program(block, tmp_path, environment)


def test_a_broken_program_fails_its_page(tmp_path: Path) -> None:
    broken = Block(ROOT / "README.md", 1, "python", None, None, "raise SystemExit(3)\n")
    with pytest.raises(pytest.fail.Exception, match="exited 3"):
        run_program(broken, tmp_path, program_environment())


# --- anyio programs and steps, here, on both backends ----------------------------------


def load(block: Block) -> dict[str, Any]:
    """The names ``block`` defines, run as a module that is not ``__main__``."""
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(block.code, block.name, "exec"), namespace)
    return namespace


@pytest.mark.anyio
@pytest.mark.parametrize("block", of_kind("anyio"), ids=ids)
async def test_an_anyio_example_runs(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    main = load(block)["main"]
    with anyio.fail_after(PROGRAM_SECONDS):
        await main()


def written_prefix(block: Block) -> str:
    """The prefix a step example stores under: its ``LiveTurns(endpoint, store, PREFIX, ...)``."""
    for node in ast.walk(ast.parse(block.code)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LiveTurns":
            prefix = node.args[2] if len(node.args) > 2 else None
            if isinstance(prefix, ast.Constant) and isinstance(prefix.value, str):
                return prefix.value
    raise AssertionError(f"{block.name}: no LiveTurns(endpoint, store, 'PREFIX', ...)")


@pytest.mark.parametrize("page", sorted({block.page for block in of_kind("agent-step")}), ids=str)
def test_a_pages_step_examples_each_store_under_a_prefix_of_their_own(page: Path) -> None:
    # A reader runs a page's examples one after another in one folder: a second example that
    # wrote the first one's turns would be refused (TurnExistsError).
    prefixes = [written_prefix(block) for block in of_kind("agent-step") if block.page == page]
    assert len(set(prefixes)) == len(prefixes), prefixes


@pytest.mark.anyio
@pytest.mark.parametrize("block", of_kind("agent-step"), ids=ids)
async def test_a_step_runs_against_the_reference_agent_and_reads_back(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    step = load(block)["step"]
    agent = ReferenceAgent(script=TaskScript(events=5, interval_seconds=0.01))
    with anyio.fail_after(PROGRAM_SECONDS):
        async with anyio.create_task_group() as tg:
            agent_url = await tg.start(serve_agent, agent)
            await step(agent_url)
            tg.cancel_scope.cancel()
        # What the step stored reads back to its end: its last turn is marked.
        store = FilesystemStore("trajectories")
        prefix = written_prefix(block)
        events = [
            item
            async for item in read_live_trajectory(
                store,
                prefix,
                "turn-1",
                poll_interval_seconds=0.05,
                idle_timeout_seconds=10,
            )
            if isinstance(item, StoredEvent)
        ]
        assert len(events) == 5 * agent.statistics().tasks
        tail_command = ["tail", "trajectories", prefix, "turn-1", "--poll", "0.05"]
        tail = await anyio.run_process(
            [sys.executable, "-m", "follower", *tail_command, "--idle-timeout", "10"], check=False
        )
    assert tail.returncode == 0, tail.stderr.decode()
    assert len(tail.stdout.splitlines()) == len(events)
