"""moto's S3 server on a loopback port, for tests that store in S3 through another process.

Plain moto: enough for the command line's runs, which never race their own puts
(tests/stores/test_s3_store.py serves a stricter one, with S3's atomic conditional puts).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import boto3.session
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

REGION = "us-east-1"
# Credentials moto accepts; set for a run, they keep real ones out of it.
FAKE_AWS_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


@contextlib.contextmanager
def running_s3_server() -> Iterator[str]:
    """An S3 server on 127.0.0.1, stopped on exit, its request log kept quiet; its URL."""
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        werkzeug.setLevel(level)


def s3_client(endpoint_url: str) -> Any:
    """A boto3 S3 client of the server at ``endpoint_url``, with the fake credentials."""
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=FAKE_AWS_ENVIRONMENT["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_AWS_ENVIRONMENT["AWS_SECRET_ACCESS_KEY"],
    )


def new_bucket(client: Any) -> str:
    """A bucket of its own for one test."""
    bucket = f"test-{uuid.uuid4().hex}"
    client.create_bucket(Bucket=bucket)
    return bucket


def keys_in(client: Any, bucket: str, prefix: str = "") -> list[str]:
    """Every key in the bucket under ``prefix``, as S3 has it, sorted."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))
