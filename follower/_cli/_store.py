"""Where a command stores: a folder, or a bucket and prefix named by ``s3://bucket/prefix``.

The argument parsed, and the store opened from it (a folder checked, a bucket
reached once), with one line for what is wrong: ``follower.s3`` (and boto3) is
imported when an ``s3://`` store is opened, never for a folder.

A command's every store call is bounded (:class:`CommandStore`): a store that
never answers ends the command with one line and exit 6, instead of holding it
for the client's retries. The bucket's pre-flight has a shorter bound of its
own, and says what it waits for while it waits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio
import attrs

from .._errors import StoreError
from .._extras import install_hint
from .._stores import FilesystemStore, folder_version, list_keys
from ._exits import EXIT_BAD_STORE, EXIT_USAGE, CommandError

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from .._stores import ObjectStore

_T = TypeVar("_T")

S3_SCHEME = "s3://"
# Whatever a store's client would wait for (botocore's default: 3 attempts x 30 s),
# a command's store call that gets no answer for this long fails, as unavailable.
STORE_CALL_SECONDS = 30.0
# The bucket's pre-flight: a short bound of its own, and after a moment a line on
# stderr that says what the command waits for.
PROBE_SECONDS = 10.0
PROBE_NOTICE_SECONDS = 1.0


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
    from ..s3 import S3Store

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
) -> CommandStore:
    """The store a command was given: a folder (see :func:`store_at`) or an S3 bucket.

    A bucket is listed once before use, so that a missing one (or a refusal, or
    no answer within :data:`PROBE_SECONDS`) ends the command before it starts
    anything, with one line and exit 6.
    """
    if not isinstance(where, S3Location):
        return CommandStore(store_at(where, must_exist=must_exist), str(where))
    try:
        store = s3_store(where, endpoint_url=endpoint_url)
    except ImportError:
        raise CommandError(
            f"the store {where} needs boto3: {install_hint('s3')}", EXIT_USAGE
        ) from None
    named = f"{where} at {endpoint_url}" if endpoint_url is not None else str(where)
    await _probe(store, named)
    return CommandStore(store, named)


async def _probe(store: ObjectStore, named: str) -> None:
    """Reach the bucket before a task is started or an agent served: one line if it fails.

    A prefix that holds nothing keeps the listing to one cheap request.
    """
    async with anyio.create_task_group() as tg:

        async def say_what_it_waits_for() -> None:
            await anyio.sleep(PROBE_NOTICE_SECONDS)
            print(
                f"follower: waiting for {named} to answer (giving up after {PROBE_SECONDS:g} s)",
                file=sys.stderr,
                flush=True,
            )

        tg.start_soon(say_what_it_waits_for)
        try:
            with anyio.fail_after(PROBE_SECONDS):
                await store.list("follower-probe/")
        except TimeoutError:
            raise CommandError(
                f"store: cannot use {named}: no answer within {PROBE_SECONDS:g} s",
                EXIT_BAD_STORE,
            ) from None
        except StoreError as exc:
            raise CommandError(f"store: cannot use {named}: {exc}", EXIT_BAD_STORE) from exc
        finally:
            tg.cancel_scope.cancel()


@attrs.define(eq=False)
class CommandStore:
    """A command's store: each call bounded, and the writes that failed remembered.

    A call with no answer within :data:`STORE_CALL_SECONDS` raises
    :class:`StoreError` (the store's thread is abandoned, and never holds the
    process): the command has waited its bound, so it is not the
    :class:`StoreUnavailableError` a turn would try again for minutes. A put
    that failed, and was not done since by a retry, is kept in
    :attr:`failed_puts`: a turn stored incomplete because the store refused it
    (a full disk) is the store's fault, not the agent's.
    """

    store: ObjectStore
    named: str
    failed_puts: dict[str, StoreError] = attrs.field(factory=dict)

    def __str__(self) -> str:
        return self.named

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        try:
            await self._bounded("put", key, self.store.put(key, body, content_type=content_type))
        except StoreError as exc:
            self.failed_puts[key] = exc
            raise
        self.failed_puts.pop(key, None)

    async def get(self, key: str) -> bytes:
        return await self._bounded("get", key, self.store.get(key))

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        listed = list_keys(self.store, prefix, start_after=start_after)
        return await self._bounded("list", prefix, listed)

    async def folder_version(self, folder: str) -> object | None:
        """The wrapped store's, if it has one: ``tail`` skips a still folder's listing too."""
        with anyio.move_on_after(STORE_CALL_SECONDS):
            return await folder_version(self.store, folder)
        return None  # no answer: list it, and let that call's own bound speak

    async def _bounded(self, operation: str, key: str, call: Awaitable[_T]) -> _T:
        with anyio.move_on_after(STORE_CALL_SECONDS):
            return await call
        raise StoreError(
            f"cannot {operation} {key!r} in {self.named}: no answer within "
            f"{STORE_CALL_SECONDS:g} s",
            key=key,
        )


def failed_write(store: ObjectStore) -> StoreError | None:
    """The first write a command's store failed and did not do since, if any."""
    if isinstance(store, CommandStore):
        return next(iter(store.failed_puts.values()), None)
    return None
