"""The command line on an S3 store: ``s3://bucket/prefix`` wherever it takes a store.

Each run is a real subprocess, with ``--endpoint-url`` naming moto's S3 server
(started once for the module, on a loopback port) and fake AWS credentials in
its environment; each test gets a bucket of its own. ``follow`` tests serve the
reference agent in the test process, on the backend the command runs on.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from follower._cli._main import EXIT_BAD_STORE, EXIT_OK, EXIT_USAGE
from follower.testing import ReferenceAgent, TaskScript

from ..support.cli import (
    VERDICT,
    assert_no_traceback,
    assert_one_line_error,
    json_lines,
    printed_events,
    run_cli,
    run_cli_async,
    serving,
)
from ..support.s3 import FAKE_AWS_ENVIRONMENT, keys_in, new_bucket, running_s3_server, s3_client

pytestmark = pytest.mark.anyio

BACKENDS = ["asyncio", "trio"]
SCRIPT = TaskScript(events=5, interval_seconds=0.01)
TASK_LINE = re.compile(r"^follower: task (\S+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def endpoint_url() -> Iterator[str]:
    with running_s3_server() as url:
        yield url


@pytest.fixture(scope="module")
def client(endpoint_url: str) -> Iterator[Any]:
    made = s3_client(endpoint_url)
    yield made
    made.close()


@pytest.fixture
def bucket(client: Any) -> str:
    return new_bucket(client)


def s3_args(backend: str, command: str, endpoint_url: str, *args: str) -> list[str]:
    return ["--backend", backend, command, *args, "--endpoint-url", endpoint_url]


# --- follow, then tail what it stored ------------------------------------------------------


async def test_follow_stores_the_task_in_the_bucket_and_tail_prints_it(
    anyio_backend: str, tmp_path: Path, endpoint_url: str, client: Any, bucket: str
) -> None:
    agent = ReferenceAgent(script=SCRIPT)
    follow = s3_args(anyio_backend, "follow", endpoint_url, "--message", "hi", "--poll", "0.05")
    with anyio.fail_after(60):
        async with serving(agent) as url:
            followed = await run_cli_async(
                [*follow, url, "--store", f"s3://{bucket}/runs/"],
                tmp_path,
                env=FAKE_AWS_ENVIRONMENT,
            )
    assert followed.returncode == EXIT_OK, followed.stderr
    assert_no_traceback(followed)
    found = TASK_LINE.search(followed.stderr)
    assert found is not None, followed.stderr
    task_id = found.group(1)
    events = [SCRIPT.event(index) for index in range(SCRIPT.events)]
    assert printed_events(followed.stdout) == events

    live = f"runs/follow/{task_id}/turn-1/live/"
    stored = keys_in(client, bucket, live)
    assert f"{live}end.json" in stored, stored
    assert keys_in(client, bucket) == keys_in(client, bucket, f"runs/follow/{task_id}/turn-1/")

    tail = s3_args(anyio_backend, "tail", endpoint_url, "--poll", "0.05", "--idle-timeout", "20")
    with anyio.fail_after(60):
        tailed = await run_cli_async(
            [*tail, f"s3://{bucket}/runs/follow/{task_id}", "", "turn-1"],
            tmp_path,
            env=FAKE_AWS_ENVIRONMENT,
        )
    assert tailed.returncode == EXIT_OK, tailed.stderr
    assert tailed.stderr == ""
    assert json_lines(tailed.stdout) == [
        {"turn": "turn-1", "index": index, "event": event} for index, event in enumerate(events)
    ]


# --- the demo --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_demo_stores_its_step_in_the_bucket_and_says_where(
    backend: str, tmp_path: Path, endpoint_url: str, client: Any, bucket: str
) -> None:
    demo = s3_args(backend, "demo", endpoint_url, "--store", f"s3://{bucket}/demo/")
    result = run_cli(
        [*demo, "--turns", "2", "--events", "5", "--interval", "0.01"],
        tmp_path,
        env=FAKE_AWS_ENVIRONMENT,
    )
    assert result.returncode == EXIT_OK, (result.stdout, result.stderr)
    assert_no_traceback(result)
    lines = result.stdout.splitlines()
    assert VERDICT in lines
    assert "  read back: 10 events across 2 turns" in lines
    # The step of cursor-read turns, and its streamed step beside it.
    steps = {key.split("/")[2] for key in keys_in(client, bucket)}
    [name] = [step for step in steps if not step.endswith("-streamed")]
    assert steps == {name, f"{name}-streamed"}
    step_key, streamed_key = f"steps/{name}/", f"steps/{name}-streamed/"
    where = f"s3://{bucket}/demo/{step_key}"
    assert f"storing the step under {where}" in lines
    assert lines[-3] == f"stored under {where}"
    # The commands that read them back, with the endpoint they were stored through.
    for line, key in ((lines[-1], step_key), (lines[-2], streamed_key)):
        said, command = line.split(": ", 1)
        assert said == ("read it back" if key == step_key else "read the streamed step back")
        tail = shlex.split(command)[1:]
        assert tail == [
            "tail",
            f"s3://{bucket}/demo/",
            key,
            "turn-1",
            "--endpoint-url",
            endpoint_url,
        ]
    for key, turns in ((step_key, ("turn-1", "turn-2")), (streamed_key, ("turn-1",))):
        for turn in turns:
            assert f"demo/{key}{turn}/live/end.json" in keys_in(client, bucket, f"demo/{key}")
    assert list(tmp_path.iterdir()) == []  # nothing in a folder


# --- what is refused, in one line --------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("command", ["tail", "demo", "follow"])
def test_a_missing_bucket_is_one_line_and_exit_6(
    backend: str, command: str, tmp_path: Path, endpoint_url: str
) -> None:
    store = "s3://no-such-bucket/steps/"
    args = {
        "tail": [store, "", "turn-1", "--idle-timeout", "20"],
        "demo": ["--store", store],
        # No agent listens there: the bucket is checked before the agent is asked.
        "follow": ["http://127.0.0.1:9/", "--message", "hi", "--store", store],
    }[command]
    result = run_cli(
        s3_args(backend, command, endpoint_url, *args), tmp_path, env=FAKE_AWS_ENVIRONMENT
    )
    message = assert_one_line_error(result, EXIT_BAD_STORE)
    assert "NoSuchBucket" in message
    assert "s3://no-such-bucket/steps/" in message
    assert result.stdout == ""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "args",
    [
        ["tail", "s3://", "", "turn-1"],
        ["tail", "s3:///steps/", "", "turn-1"],
        ["demo", "--store", "s3://"],
        ["follow", "http://127.0.0.1:9/", "--message", "hi", "--store", "s3:///x/"],
    ],
    ids=["tail-empty", "tail-no-bucket", "demo-empty", "follow-no-bucket"],
)
def test_an_s3_url_without_a_bucket_is_a_usage_error(
    backend: str, args: list[str], tmp_path: Path
) -> None:
    result = run_cli(["--backend", backend, *args], tmp_path, env=FAKE_AWS_ENVIRONMENT)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert_no_traceback(result)
    assert "names no bucket" in result.stderr.splitlines()[-1], result.stderr
    assert list(tmp_path.iterdir()) == []  # no folder named "s3:"


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_boto3_an_s3_store_names_the_extra(backend: str, tmp_path: Path) -> None:
    without_boto3 = (
        sys.executable,
        "-c",
        "import runpy, sys; sys.modules['boto3'] = None; "
        "runpy.run_module('follower', run_name='__main__', alter_sys=True)",
    )
    result = run_cli(
        ["--backend", backend, "tail", "s3://bucket/", "", "turn-1"],
        tmp_path,
        command=without_boto3,
    )
    message = assert_one_line_error(result, EXIT_USAGE)
    assert message == (
        "the store s3://bucket/ needs boto3: pip install '.[s3]' in a checkout of follower"
    )


def test_the_command_line_imports_no_boto3_until_it_opens_an_s3_store() -> None:
    code = (
        "import sys, follower._cli._main; "
        "print(*sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')"
        " or m == 'follower.s3'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == []
