"""Where a command stores: a folder, or a bucket and prefix named by ``s3://bucket/prefix``.

The argument parsed, and the store opened from it (a folder checked, a bucket
reached once), with one line for what is wrong: ``follower.s3`` (and boto3) is
imported when an ``s3://`` store is opened, never for a folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ._cli_exits import EXIT_BAD_STORE, EXIT_USAGE, CommandError
from ._errors import StoreError
from ._extras import install_hint
from ._stores import FilesystemStore

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


def store_at(path: Path, *, must_exist: bool) -> FilesystemStore:
    """The folder store at ``path``, made unless ``must_exist``; one line if it cannot be."""
    if path.exists() and not path.is_dir():
        raise CommandError(f"bad store path {str(path)!r}: not a folder", EXIT_BAD_STORE)
    if must_exist and not path.is_dir():
        raise CommandError(f"bad store path {str(path)!r}: no such folder", EXIT_BAD_STORE)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"bad store path {str(path)!r}: {exc.strerror}", EXIT_BAD_STORE) from exc
    return FilesystemStore(path)


async def open_store(
    where: Path | S3Location, *, must_exist: bool, endpoint_url: str | None
) -> ObjectStore:
    """The store a command was given: a folder (see :func:`store_at`) or an S3 bucket.

    A bucket is listed once before use, so that a missing one (or a refusal) ends
    the command before it starts anything, as a :class:`StoreError` (exit 6).
    """
    if not isinstance(where, S3Location):
        return store_at(where, must_exist=must_exist)
    try:
        store = s3_store(where, endpoint_url=endpoint_url)
    except ImportError:
        raise CommandError(
            f"the store {where} needs boto3: {install_hint('s3')}", EXIT_USAGE
        ) from None
    # Reach the bucket before a task is started or an agent served: one line if it
    # fails. A prefix that holds nothing keeps the listing to one cheap request.
    try:
        await store.list("follower-probe/")
    except StoreError as exc:
        raise CommandError(f"store: cannot use {where}: {exc}", EXIT_BAD_STORE) from exc
    return store
