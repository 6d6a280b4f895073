"""The store a StoreSpec describes: what the ready activity opens (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from follower import FilesystemStore
from follower.s3 import S3Store
from follower.temporal import open_store
from follower.temporal.workflow_types import StoreSpec

ENDPOINT = "http://127.0.0.1:9"


def test_an_s3_url_opens_an_s3_store_of_its_bucket_prefix_and_options() -> None:
    spec = StoreSpec.from_url("s3://trajectories/runs/a", endpoint_url=ENDPOINT, region_name="eu")
    assert spec == StoreSpec(
        "s3", "trajectories/runs/a", {"endpoint_url": ENDPOINT, "region_name": "eu"}
    )
    store = open_store(spec)
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix) == ("trajectories", "runs/a/")
    assert repr(store) == f"S3Store('trajectories', prefix='runs/a/', endpoint_url='{ENDPOINT}')"


@pytest.mark.parametrize(
    ("spec", "bucket", "prefix"),
    [
        (StoreSpec.from_url("s3://b"), "b", ""),
        (StoreSpec.from_url("s3://b/"), "b", ""),
        (StoreSpec.s3("b", "p/q/"), "b", "p/q/"),
        (StoreSpec.s3("b", "p"), "b", "p/"),
    ],
)
def test_a_bucket_alone_or_with_a_prefix(spec: StoreSpec, bucket: str, prefix: str) -> None:
    store = open_store(spec)
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix) == (bucket, prefix)


def test_a_filesystem_spec_opens_a_folder(tmp_path: Path) -> None:
    assert isinstance(open_store(StoreSpec.from_url(f"file://{tmp_path}")), FilesystemStore)


@pytest.mark.parametrize(
    ("spec", "error_type"),
    [
        (StoreSpec("s3", "b", {"aws_secret_access_key": "x"}), "InvalidStoreSpec"),
        (StoreSpec("s3", ""), "InvalidStoreSpec"),
        (StoreSpec("s3", "b/a//c"), "InvalidStoreSpec"),
        (StoreSpec("gcs", "b"), "UnknownStoreKind"),
    ],
)
def test_a_spec_no_store_can_be_made_of_fails_for_good(spec: StoreSpec, error_type: str) -> None:
    with pytest.raises(ApplicationError) as caught:
        open_store(spec)
    assert caught.value.type == error_type
    assert caught.value.non_retryable


def test_a_spec_round_trips_through_temporals_payloads() -> None:
    spec = StoreSpec.s3("b", "p/", endpoint_url=ENDPOINT, region_name="us-east-1")
    converter = DataConverter.default.payload_converter
    (payload,) = converter.to_payloads([spec])
    (back,) = converter.from_payloads([payload], [StoreSpec])
    assert back == spec
