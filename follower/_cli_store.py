"""Where a command stores: a folder, or a bucket and prefix named by ``s3://bucket/prefix``.

Parsing only, and the S3 store made from it: ``follower.s3`` (and boto3) is
imported when an ``s3://`` store is opened, never for a folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from ._stores import ObjectStore

S3_SCHEME = "s3://"


@attrs.frozen
class S3Location:
    """A bucket and a key prefix in it (``""`` or ending with ``/``)."""

    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}"


def store_argument(text: str) -> Path | S3Location:
    """A store argument: ``s3://bucket[/prefix]`` as an :class:`S3Location`, else a folder."""
    if not text.startswith(S3_SCHEME):
        return Path(text)
    bucket, _, prefix = text.removeprefix(S3_SCHEME).partition("/")
    if not bucket:
        raise argparse.ArgumentTypeError(f"{text!r} names no bucket: s3://BUCKET[/PREFIX/]")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return S3Location(bucket, prefix)


def s3_store(location: S3Location, *, endpoint_url: str | None) -> ObjectStore:
    """The store at ``location``; raises :class:`ImportError` without boto3.

    Credentials, the region and (when ``endpoint_url`` is None) the endpoint come
    from boto3's usual settings: ``AWS_*`` environment variables, ``~/.aws`` files.
    """
    from .s3 import S3Store

    return S3Store(location.bucket, prefix=location.prefix, endpoint_url=endpoint_url)
