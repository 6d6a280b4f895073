"""The agent the interop tests follow: built with the existing framework, in a process of its own.

``tools/interop-venv`` installs the framework (agentenv-framework-protocol, from PyPI) into
``.venvs/interop``, apart from the test venvs, since it pins its own a2a-sdk. The agent
program (``afp_agent.py``) runs there on 127.0.0.1, once per session. No venv, no agent:
the tests fail with the reason, they never skip.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import httpx
import pytest

from ..support.agent_process import LOG_TAIL_CHARS, STOP_SECONDS, drain, log_tail, stop

# The helpers assert on what the agent answered: show the values when they fail.
pytest.register_assert_rewrite("tests.interop.helpers")

ROOT = Path(__file__).resolve().parents[2]
AGENT_PROGRAM = Path(__file__).with_name("afp_agent.py")
CARD_PATH = "/.well-known/agent-card.json"
INSTALL_SECONDS = 900.0
START_SECONDS = 30.0


@attrs.frozen
class RunningAgent:
    """The framework agent serving at ``url``; its output goes to ``log``."""

    url: str
    log: Path

    @property
    def card_url(self) -> str:
        return self.url + CARD_PATH

    def log_tail(self) -> str:
        return log_tail(self.log)


@pytest.fixture(scope="session")
def interop_python() -> str:
    """The interop venv's python, built by ``tools/interop-venv`` the first time."""
    try:
        done = subprocess.run(
            [str(ROOT / "tools" / "interop-venv")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=INSTALL_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"tools/interop-venv did not finish within {INSTALL_SECONDS:.0f} s; "
            f"its output so far:\n{_text(exc.stderr)[-LOG_TAIL_CHARS:]}",
            pytrace=False,
        )
    if done.returncode != 0:
        pytest.fail(
            f"tools/interop-venv failed (exit {done.returncode}): the interop tests need "
            "agentenv-framework-protocol[agent] from PyPI in .venvs/interop, and it could not "
            f"be installed. Its output:\n{done.stderr[-LOG_TAIL_CHARS:]}",
            pytrace=False,
        )
    lines = done.stdout.split()
    if not lines or not Path(lines[-1]).is_file():
        pytest.fail(f"tools/interop-venv printed no python: {done.stdout!r}", pytrace=False)
    return lines[-1]


@pytest.fixture(scope="session")
def afp_agent(
    interop_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningAgent]:
    """Start the agent on 127.0.0.1, wait (bounded) for its card, stop it after the session."""
    log_path = tmp_path_factory.mktemp("afp-agent") / "agent.log"
    command = [interop_python, str(AGENT_PROGRAM), "--port", "0"]
    with (
        log_path.open("wb") as log,
        subprocess.Popen(
            command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
        ) as process,
    ):
        draining: threading.Thread | None = None
        try:
            url = _read_url(process, log_path)
            # Keep its stdout flowing, so no stray print can block the agent on a full pipe.
            draining = threading.Thread(target=drain, args=(process,), daemon=True)
            draining.start()
            _wait_for_card(process, url, log_path)
            yield RunningAgent(url, log_path)
        finally:
            stop(process)
            if draining is not None:
                draining.join(STOP_SECONDS)


def _read_url(process: subprocess.Popen[bytes], log_path: Path) -> str:
    """The URL from the agent's first line, ``listening on <url>``."""
    assert process.stdout is not None
    deadline = time.monotonic() + START_SECONDS
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                _fail_start(f"printed no URL within {START_SECONDS:.0f} s", log_path)
            if not selector.select(left):
                continue
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                process.wait(STOP_SECONDS)
                _fail_start(f"exited with {process.returncode} before serving", log_path)
            line += chunk
    first = line.split(b"\n", 1)[0].decode()
    prefix = "listening on "
    if not first.startswith(prefix):
        _fail_start(f"printed {first!r} instead of its URL", log_path)
    return first.removeprefix(prefix).rstrip("/")


def _wait_for_card(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    last_error = "no answer yet"
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                _fail_start(f"exited with {process.returncode} before serving", log_path)
            try:
                answer = client.get(url + CARD_PATH)
            except httpx.TransportError as exc:
                last_error = repr(exc)
            else:
                if answer.status_code == 200:
                    return
                last_error = f"HTTP {answer.status_code}"
            time.sleep(0.05)
    _fail_start(f"served no agent card within {START_SECONDS:.0f} s ({last_error})", log_path)


def _fail_start(reason: str, log_path: Path) -> None:
    pytest.fail(
        f"the interop agent ({AGENT_PROGRAM.name}) {reason}. Its log:\n{log_tail(log_path)}",
        pytrace=False,
    )


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""
