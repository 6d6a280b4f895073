"""The official SDK's streaming agent, once a session, and a cutting proxy in front of it per test.

``sdk_agent.py`` runs as a program of its own under this venv's python (the SDK's server is
asyncio-only; the tests also run under trio). It is in the ``test`` dependency group, so an
agent that cannot start is a failure with its log, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from ..support.agent_process import STOP_SECONDS, drain, log_tail, stop
from .proxy import CuttingProxy

ROOT = Path(__file__).resolve().parents[2]
AGENT_PROGRAM = Path(__file__).with_name("sdk_agent.py")
START_SECONDS = 30.0
_PREFIX = "listening on "


@attrs.frozen
class SdkAgent:
    """The SDK agent serving at ``url`` (``http://127.0.0.1:<port>``); its stderr is in ``log``."""

    url: str
    host: str
    port: int
    log: Path

    def log_tail(self) -> str:
        return log_tail(self.log)


@pytest.fixture(scope="session")
def sdk_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SdkAgent]:
    """Start ``sdk_agent.py`` (bounded), hand its address, stop it after the session."""
    log_path = tmp_path_factory.mktemp("sdk-agent") / "agent.log"
    command = [sys.executable, str(AGENT_PROGRAM), "--port", "0"]
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
            host, port = url.removeprefix("http://").rsplit(":", 1)
            yield SdkAgent(url, host, int(port), log_path)
        finally:
            stop(process)
            if draining is not None:
                draining.join(STOP_SECONDS)


@pytest.fixture
def sdk_proxy(sdk_agent: SdkAgent) -> Iterator[CuttingProxy]:
    """A fresh :class:`CuttingProxy` in front of the session's SDK agent."""
    with CuttingProxy(sdk_agent.host, sdk_agent.port) as proxy:
        yield proxy


def _read_url(process: subprocess.Popen[bytes], log_path: Path) -> str:
    """The URL from the agent's first line, ``listening on <url>``, read within the bound."""
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
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(STOP_SECONDS)
                _fail_start(f"exited with {process.returncode} before serving", log_path)
            line += chunk
    first = line.split(b"\n", 1)[0].decode(errors="replace")
    if not first.startswith(_PREFIX):
        _fail_start(f"printed {first!r} instead of its URL", log_path)
    return first.removeprefix(_PREFIX).rstrip("/")


def _fail_start(reason: str, log_path: Path) -> None:
    pytest.fail(
        f"the SDK agent ({AGENT_PROGRAM.name}) {reason}. Its log:\n{log_tail(log_path)}",
        pytrace=False,
    )
