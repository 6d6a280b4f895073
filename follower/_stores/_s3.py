"""A write-once store in an S3 bucket: boto3 in worker threads, behind the async protocol.

The only module that imports boto3; ``follower`` imports it on first use of
``S3Store``, so the library itself never needs boto3 (the ``s3`` extra).

Write-once is S3's own: every put is conditional (``If-None-Match: *``), so S3
decides atomically which of racing writers wins. A put that finds the key taken
(412) reads it back and compares: the same bytes are done, other bytes conflict.
S3 answers 409 when a concurrent write to the key is still in progress and asks
for a retry; the put retries a few times, with jittered exponential backoff, then
gives up with a :class:`StoreUnavailableError`. Throttling, 5xx and dropped
connections are botocore's to retry (its standard mode, below).

What S3 answers becomes a store error named by its cause: no such bucket
(:class:`StoreNotFoundError`), a refusal (:class:`StoreAccessDeniedError`), an
endpoint that cannot serve now (:class:`StoreUnavailableError`).

Calls run in worker threads, at most ``max_threads`` waited on at once per store and
event loop, and are abandoned on cancel: the thread finishes its call on its own
(bounded by the client's timeouts) and its slot is free at once, so a stalled
endpoint can hold more threads than that for a while; the same-bytes rule makes a
retry of an abandoned put safe. They are the library's daemon threads
(``_threads``): an abandoned call never holds the process at exit.
"""

from __future__ import annotations

import random
import re
import threading
import time
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple, final

import anyio
import anyio.lowlevel
import attrs

from .._errors import (
    InvalidArgumentError,
    InvalidKeyError,
    ObjectNotFoundError,
    StoreAccessDeniedError,
    StoreError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from .._extras import install_hint
from .._threads import run_sync_abandoning
from ._keys import MAX_KEY_BYTES, check_key, check_list_prefix, check_prefix
from ._protocol import check_same_bytes, check_start_after

try:
    import boto3.session
    import botocore.config
    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(f"follower.s3 needs boto3: {install_hint('s3')}", name=exc.name) from exc

if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable

    from mypy_boto3_s3 import S3Client

_T = TypeVar("_T")
_Args = TypeVarTuple("_Args")

# What no key holds and S3 cannot be sent as StartAfter: control characters (XML 1.0
# refuses most) and lone surrogates (no UTF-8).
_UNSENDABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")

# Attempts of a put that S3 keeps answering 409 (a concurrent write in progress).
# botocore does not retry a 409, so the put does, with botocore's own backoff:
# truncated binary exponential with full jitter, rand(0, 1) * min(base * 2**i, cap),
# so that racing writers do not retry in step.
_CONFLICT_ATTEMPTS = 4
_CONFLICT_BASE_SECONDS = 0.05
_CONFLICT_MAX_PAUSE_SECONDS = 1.0

# The client the store makes when given none: bounded waits, few retries. A
# caller who wants others makes the client. botocore's "standard" retry mode
# (botocore/retries/standard.py) retries throttling (SlowDown, 429...), 500, 502,
# 503, 504 and dropped or timed-out connections, waiting
# rand(0, 1) * min(base * 2**i, 20 s) between attempts (base 1 s when throttled,
# 50 ms otherwise): jittered exponential backoff, bounded by the attempts.
_CONNECT_TIMEOUT_SECONDS = 10.0
_READ_TIMEOUT_SECONDS = 30.0
_MAX_ATTEMPTS = 3


# The settings' checks, in the order they are made (attrs runs validators in field order).


def _check_bucket(store: S3Store, attribute: object, bucket: str) -> None:
    if not isinstance(bucket, str) or not bucket or "/" in bucket:
        raise InvalidArgumentError(f"invalid bucket {bucket!r}: a bucket name, no '/'")


def _check_settings(store: S3Store, attribute: object, client: S3Client | None) -> None:
    if client is not None and (store._endpoint_url is not None or store._region_name is not None):
        raise InvalidArgumentError(
            "give S3Store a client, or the settings to make one (endpoint_url, "
            "region_name), not both"
        )


def _check_max_threads(store: S3Store, attribute: object, max_threads: int) -> None:
    if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
        raise InvalidArgumentError(f"max_threads must be a positive int, not {max_threads!r}")


def _check_prefix(store: S3Store, attribute: object, prefix: str) -> None:
    check_prefix(prefix)


# Checked at construction only, as the settings are given: the client made later is no setting.
@final
@attrs.define(eq=False, on_setattr=attrs.setters.NO_OP)
class S3Store:
    """A write-once store in an S3 bucket, or any S3-compatible service, under a key prefix.

    Give a ready boto3 S3 client (``client=``), or the settings the store makes
    one with (``endpoint_url``, ``region_name``; credentials come from boto3's
    usual chain: environment, shared files, instance roles). The store makes its
    client once, on first use, in a worker thread; clients are thread-safe.

    Keys follow the library's key rules and are stored as ``prefix + key``;
    listings are relative to ``prefix``. The service must honour
    ``If-None-Match: *`` on PutObject, as Amazon S3 does: write-once rests on it.

    At most ``max_threads`` calls are waited on at once, each in a worker thread
    (a client the store makes has as many connections; an abandoned call may
    briefly hold one more); share one store between steps rather than making
    one per step.
    """

    _bucket: str = attrs.field(validator=_check_bucket)
    _client: S3Client | None = attrs.field(default=None, kw_only=True, validator=_check_settings)
    _endpoint_url: str | None = attrs.field(default=None, kw_only=True)
    _region_name: str | None = attrs.field(default=None, kw_only=True)
    _max_threads: int = attrs.field(default=10, kw_only=True, validator=_check_max_threads)
    _prefix: str = attrs.field(default="", kw_only=True, validator=_check_prefix)
    _client_lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    # A limiter belongs to one event loop: each run gets its own.
    _limiter: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._limiter = anyio.lowlevel.RunVar(f"follower.S3Store.limiter.{id(self)}")

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        return self._prefix

    def __repr__(self) -> str:
        where = f", endpoint_url={self._endpoint_url!r}" if self._endpoint_url else ""
        return f"S3Store({self._bucket!r}, prefix={self._prefix!r}{where})"

    def _where(self) -> str:
        at = f" at {self._endpoint_url}" if self._endpoint_url else ""
        return f"s3://{self._bucket}/{self._prefix}{at}"

    def _check_key(self, key: str) -> None:
        """The key rules, and S3's own limit on the whole object key, prefix included."""
        check_key(key)
        size = len(self._prefix.encode()) + len(key.encode())
        if size > MAX_KEY_BYTES:
            raise InvalidKeyError(
                f"invalid key {key[:60]!r}...: under the store's prefix {self._prefix[:60]!r} "
                f"it is {size} bytes of UTF-8, over the {MAX_KEY_BYTES} an S3 key may have",
                key=key,
            )

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        self._check_key(key)
        # bytes() copies a bytearray (the thread must not see it change), never a bytes.
        await self._run(self._put_sync, key, bytes(body), content_type)

    async def get(self, key: str) -> bytes:
        self._check_key(key)
        return await self._run(self._get_sync, key)

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        check_list_prefix(prefix)
        check_start_after(start_after)
        return await self._run(self._list_sync, prefix, start_after)

    # --- in worker threads ----------------------------------------------------------

    async def _run(self, call: Callable[[*_Args], _T], *args: *_Args) -> _T:
        limiter = self._limiter.get(None)
        if limiter is None:
            limiter = anyio.CapacityLimiter(self._max_threads)
            self._limiter.set(limiter)
        return await run_sync_abandoning(call, *args, limiter=limiter)

    def _client_sync(self) -> S3Client:
        with self._client_lock:
            if self._client is None:
                config = botocore.config.Config(
                    connect_timeout=_CONNECT_TIMEOUT_SECONDS,
                    read_timeout=_READ_TIMEOUT_SECONDS,
                    retries={"mode": "standard", "total_max_attempts": _MAX_ATTEMPTS},
                    max_pool_connections=self._max_threads,
                )
                # A session of its own: boto3's default session is not thread-safe.
                try:
                    self._client = boto3.session.Session().client(
                        "s3",
                        endpoint_url=self._endpoint_url,
                        region_name=self._region_name,
                        config=config,
                    )
                except (BotoCoreError, ValueError) as exc:
                    where = self._where()
                    raise StoreError(f"cannot make an S3 client for {where}: {exc}") from exc
            return self._client

    def _put_sync(self, key: str, body: bytes, content_type: str) -> None:
        client = self._client_sync()
        for attempt in range(_CONFLICT_ATTEMPTS):
            if attempt:
                time.sleep(_conflict_pause_seconds(attempt))
            try:
                client.put_object(
                    Bucket=self._bucket,
                    Key=self._prefix + key,
                    Body=body,
                    ContentType=content_type,
                    IfNoneMatch="*",
                )
                return
            except ClientError as exc:
                status, code = _status_and_code(exc)
                if status == 409 or code == "ConditionalRequestConflict":
                    continue  # another write of the key is in progress: S3 asks for a retry
                if status != 412 and code != "PreconditionFailed":
                    raise self._error("put", key, exc) from exc
            except BotoCoreError as exc:
                raise self._error("put", key, exc) from exc
            try:
                stored = self._get_sync(key)
            except ObjectNotFoundError:
                continue  # taken, then deleted by someone else: write again
            check_same_bytes(key, stored, body)
            return
        raise StoreUnavailableError(
            f"cannot put {key!r} in {self._where()}: S3 reported a concurrent write "
            f"{_CONFLICT_ATTEMPTS} times in a row",
            key=key,
        )

    def _get_sync(self, key: str) -> bytes:
        client = self._client_sync()
        try:
            answer = client.get_object(Bucket=self._bucket, Key=self._prefix + key)
            with answer["Body"] as stream:
                return stream.read()
        except ClientError as exc:
            status, code = _status_and_code(exc)
            if code == "NoSuchKey" or (status == 404 and code != "NoSuchBucket"):
                raise ObjectNotFoundError(f"no object {key!r}", key=key) from None
            raise self._error("get", key, exc) from exc
        except BotoCoreError as exc:
            raise self._error("get", key, exc) from exc

    def _list_sync(self, prefix: str, start_after: str | None) -> builtins.list[str]:
        client = self._client_sync()
        skip = len(self._prefix)
        keys = []
        # S3 starts the listing itself after StartAfter (a full key: under the store's
        # prefix, so the order of keys relative to it is the order of full keys). A
        # start_after that S3 cannot be sent is cut before the first character no key
        # holds; the cut sorts before it, and what is listed between is dropped below.
        sent = None if start_after is None else _UNSENDABLE.split(start_after, maxsplit=1)[0]
        try:
            paginator = client.get_paginator("list_objects_v2")
            if not sent:
                pages = paginator.paginate(Bucket=self._bucket, Prefix=self._prefix + prefix)
            else:
                pages = paginator.paginate(
                    Bucket=self._bucket,
                    Prefix=self._prefix + prefix,
                    StartAfter=self._prefix + sent,
                )
            for page in pages:
                for item in page.get("Contents", []):
                    keys.append(item["Key"][skip:])
        except (ClientError, BotoCoreError) as exc:
            raise self._error("list", prefix, exc) from exc
        if start_after is not None and sent != start_after:
            keys = [key for key in keys if key > start_after]
        # Objects no key can name (a console's folder marker "a/", say) are not
        # the store's: a listing shows only what get can read.
        return sorted(key for key in keys if _is_key(key))

    def _error(self, operation: str, key: str, exc: Exception) -> StoreError:
        kind = StoreError
        if isinstance(exc, ClientError):
            status, code = _status_and_code(exc)
            message = exc.response.get("Error", {}).get("Message") or ""
            detail = f"{code or 'error'} ({status}){': ' + message if message else ''}"
            if code == "NoSuchBucket":
                kind = StoreNotFoundError
            elif status in (401, 403) or code in _DENIED_CODES:
                kind = StoreAccessDeniedError
            elif (status is not None and status >= 500) or status in (409, 429):
                kind = StoreUnavailableError  # what botocore's retries did not get past
        else:
            detail = str(exc)
            if isinstance(exc, (BotoConnectionError, HTTPClientError)):
                kind = StoreUnavailableError  # refused, reset, or timed out
        detail = " ".join(detail.split())  # one line, whatever the service sent
        return kind(f"cannot {operation} {key!r} in {self._where()}: {detail}", key=key)


# A refusal of who we are, whatever status a service sends it with.
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidToken",
        "SignatureDoesNotMatch",
    }
)


def _conflict_pause_seconds(attempt: int) -> float:
    """The pause before retry ``attempt`` (from 1) of a put that S3 answered 409."""
    ceiling = min(_CONFLICT_BASE_SECONDS * 2.0 ** (attempt - 1), _CONFLICT_MAX_PAUSE_SECONDS)
    return random.random() * ceiling


def _status_and_code(exc: ClientError) -> tuple[int | None, str]:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = exc.response.get("Error", {}).get("Code") or ""
    return status, code


def _is_key(key: str) -> bool:
    try:
        check_key(key)
    except InvalidKeyError:
        return False
    return True
