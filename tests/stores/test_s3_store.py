"""`S3Store` against a real S3-compatible server: moto's, on a loopback port.

The store contract (tests/stores/test_stores.py) runs on it too; here are the S3 parts:
the key prefix inside the bucket, listings longer than a page, what S3 answers
(412, 409, refusals, no server at all) and what the store makes of it, calls
bounded in threads, a cancelled put, and a whole step stored in S3.

Real time: boto3 works in worker threads, which virtual clocks would time out.
The server is started once per module and stopped at its end; each test gets a
bucket of its own.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import anyio
import boto3.session
import botocore.config
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import BotoCoreError
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from follower import (
    InvalidArgumentError,
    InvalidKeyError,
    LiveTurns,
    ObjectConflictError,
    ObjectExistsError,
    ObjectNotFoundError,
    StoreAccessDeniedError,
    StoreError,
    StoreNotFoundError,
    StoreUnavailableError,
    TrajectoryState,
    read_live_trajectory,
)
from follower.s3 import S3Store

from ..support.agents import ENDPOINT, ScriptedAgent
from ..support.stored import stored_turn

pytestmark = pytest.mark.anyio

JSON = "application/json"
REGION = "us-east-1"


# --- the server -----------------------------------------------------------------------


class S3Server(ThreadedMotoServer):
    """moto's S3 on 127.0.0.1, with S3's atomic conditional puts and injectable answers.

    moto checks ``If-None-Match`` and then writes, with no lock between: two racing
    puts can both pass the check (seen with a short thread switch interval). S3
    decides atomically, so conditional puts are taken here one at a time, and the
    contract's "exactly one winner" tests the store, not moto's race.

    ``faults``: (status, S3 error code) answers for the next conditional puts, in
    place of moto's (S3's 409 for a write in progress, a refusal...).
    """

    def __init__(self) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self.faults: list[tuple[int, str]] = []
        self._one_at_a_time = threading.Lock()

    @property
    def endpoint_url(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"

    def _server_entry(self) -> None:
        # moto's own, with its app wrapped.
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            self._ip_address,
            self._port,
            self._conditional_puts_in_turn(app),
            True,
            request_handler=MotoRequestHandler,
        )
        self._server_ready_event.set()
        self._server.serve_forever()

    def _conditional_puts_in_turn(self, app: Any) -> Any:
        def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
            if environ["REQUEST_METHOD"] != "PUT" or "HTTP_IF_NONE_MATCH" not in environ:
                return app(environ, start_response)
            with self._one_at_a_time:
                if self.faults:
                    return self._fault(environ, start_response, *self.faults.pop(0))
                return list(app(environ, start_response))

        return wrapped

    @staticmethod
    def _fault(environ: dict[str, Any], start_response: Any, status: int, code: str) -> Any:
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>injected by the test</Message></Error>"
        ).encode()
        start_response(
            f"{status} Injected",
            [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
        )
        return [body]

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client of this server, with ``config`` for botocore's ``Config``."""
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=botocore.config.Config(**config),
        )


@contextlib.contextmanager
def running_s3_server() -> Iterator[S3Server]:
    """An S3 server on a loopback port, stopped on exit, its request log kept quiet."""
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.ERROR)
    server = S3Server()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        werkzeug.setLevel(level)


def new_bucket(client: Any) -> str:
    bucket = f"test-{uuid.uuid4().hex}"
    client.create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    with running_s3_server() as server:
        yield server


@pytest.fixture(scope="module")
def s3_client(s3_server: S3Server) -> Iterator[Any]:
    client = s3_server.client(max_pool_connections=20)
    yield client
    client.close()


@pytest.fixture
def bucket(s3_server: S3Server, s3_client: Any) -> str:
    s3_server.faults.clear()  # a failed test's leftovers answer no one else's puts
    return new_bucket(s3_client)


@pytest.fixture
def store(bucket: str, s3_client: Any) -> S3Store:
    return S3Store(bucket, client=s3_client)


def raw_keys(client: Any, bucket: str) -> list[str]:
    """Every key in the bucket, as S3 has it."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


async def put_many(store: S3Store, keys: list[str]) -> None:
    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(partial(store.put, key, key.encode(), content_type=JSON))


# --- the public name ------------------------------------------------------------------


def test_importing_follower_loads_no_boto3_and_follower_s3_says_what_it_needs() -> None:
    script = (
        "import sys\n"
        "import follower\n"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules\n"
        "sys.modules['boto3'] = None\n"  # as if not installed
        "try:\n"
        "    import follower.s3\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == (
        "follower.s3 needs boto3: pip install '.[s3]' in a checkout of follower"
    )


def test_s3store_is_the_public_name_of_its_class() -> None:
    import follower.s3
    from follower._stores._s3 import S3Store as defined

    assert follower.s3.__all__ == ("S3Store",)
    assert follower.s3.S3Store is defined
    assert defined.__module__ == "follower.s3"
    assert isinstance(S3Store("bucket"), follower.ObjectStore)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        pytest.param({"bucket": ""}, InvalidArgumentError, id="empty-bucket"),
        pytest.param({"bucket": "a/b"}, InvalidArgumentError, id="slash-in-bucket"),
        pytest.param({"prefix": "steps"}, InvalidKeyError, id="prefix-without-slash"),
        pytest.param({"prefix": "/steps/"}, InvalidKeyError, id="prefix-leading-slash"),
        pytest.param({"prefix": "a/../"}, InvalidKeyError, id="prefix-dotdot"),
        pytest.param({"max_threads": 0}, InvalidArgumentError, id="no-threads"),
        pytest.param({"max_threads": 2.5}, InvalidArgumentError, id="float-threads"),
        pytest.param(
            {"client": object(), "endpoint_url": "http://127.0.0.1:1"},
            InvalidArgumentError,
            id="client-and-settings",
        ),
    ],
)
def test_bad_settings_are_refused_at_construction(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    kwargs.setdefault("bucket", "bucket")
    with pytest.raises(error):
        S3Store(**kwargs)


def test_the_repr_names_the_bucket_and_prefix() -> None:
    store = S3Store("bucket", prefix="steps/", endpoint_url="http://127.0.0.1:9000")
    assert repr(store) == "S3Store('bucket', prefix='steps/', endpoint_url='http://127.0.0.1:9000')"
    assert (store.bucket, store.prefix) == ("bucket", "steps/")


# --- keys in the bucket -----------------------------------------------------------------


async def test_keys_are_stored_under_the_prefix_and_listed_without_it(
    bucket: str, s3_client: Any
) -> None:
    with anyio.fail_after(10):
        store = S3Store(bucket, prefix="runs/r1/", client=s3_client)
        other = S3Store(bucket, prefix="runs/r2/", client=s3_client)
        await store.put("steps/s1/end.json", b"{}", content_type=JSON)
        await store.put("steps/s1/00000000-00000001.jsonl", b"1\n", content_type="x/jsonl")
        s3_client.put_object(Bucket=bucket, Key="outside", Body=b"not the store's")
        assert raw_keys(s3_client, bucket) == [
            "outside",
            "runs/r1/steps/s1/00000000-00000001.jsonl",
            "runs/r1/steps/s1/end.json",
        ]
        assert await store.list("") == ["steps/s1/00000000-00000001.jsonl", "steps/s1/end.json"]
        assert await store.list("steps/s1/e") == ["steps/s1/end.json"]
        assert await store.get("steps/s1/end.json") == b"{}"
        head = s3_client.head_object(Bucket=bucket, Key="runs/r1/steps/s1/end.json")
        assert head["ContentType"] == JSON
        # Another prefix is another store: nothing of the first is seen or taken.
        assert await other.list("") == []
        with pytest.raises(ObjectNotFoundError):
            await other.get("steps/s1/end.json")
        await other.put("steps/s1/end.json", b'{"other":1}', content_type=JSON)
        assert await store.get("steps/s1/end.json") == b"{}"


async def test_objects_no_key_can_name_are_not_listed(bucket: str, s3_client: Any) -> None:
    with anyio.fail_after(10):
        store = S3Store(bucket, prefix="p/", client=s3_client)
        await store.put("a/b", b"x", content_type=JSON)
        for odd in ["p/a/", "p/a//c", "p/a/./d"]:  # a console's folder marker, and worse
            s3_client.put_object(Bucket=bucket, Key=odd, Body=b"")
        assert await store.list("") == ["a/b"]
        assert await store.list("a/") == ["a/b"]


async def test_a_key_that_would_pass_s3s_limit_under_the_prefix_is_refused_before_a_call(
    bucket: str, s3_client: Any
) -> None:
    # S3 limits the whole object key to 1024 bytes: the store's prefix counts.
    with anyio.fail_after(10):
        store = S3Store(bucket, prefix="runs/r1/", client=s3_client)
        fits = "/".join(["k" * 200] * 5) + "/" + "k" * (1024 - len("runs/r1/") - 1005)
        await store.put(fits, b"x", content_type=JSON)
        assert await store.get(fits) == b"x"
        with pytest.raises(InvalidKeyError, match="over the 1024"):
            await store.put(fits + "k", b"x", content_type=JSON)
        with pytest.raises(InvalidKeyError, match="over the 1024"):
            await store.get(fits + "k")
        assert raw_keys(s3_client, bucket) == ["runs/r1/" + fits]


async def test_keys_that_need_escaping_round_trip(store: S3Store) -> None:
    with anyio.fail_after(10):
        keys = sorted(["a b/c+d", "e%20f/g?h", "i#j&k=l", "m~n/ö/日本", "o'p\"q", "r;s:t@u"])
        for key in keys:
            await store.put(key, key.encode(), content_type=JSON)
        assert await store.list("") == keys
        for key in keys:
            assert await store.get(key) == key.encode()


async def test_a_listing_longer_than_a_page_is_whole(s3_server: S3Server, bucket: str) -> None:
    # S3 answers at most 1000 keys a request; this client asks for 3 at a time, so the
    # store must follow the continuation from page to page.
    client = s3_server.client()
    requests = 0

    def three_keys_a_page(params: dict[str, Any], **_: Any) -> None:
        nonlocal requests
        requests += 1
        params["MaxKeys"] = 3

    client.meta.events.register("before-parameter-build.s3.ListObjectsV2", three_keys_a_page)
    store = S3Store(bucket, prefix="p/", client=client)
    with anyio.fail_after(10):
        keys = [f"turn/live/{n:08d}-{n + 1:08d}.jsonl" for n in range(10)]
        await put_many(store, keys)
        await store.put("turn/next.json", b"{}", content_type=JSON)
        assert await store.list("turn/live/") == keys
        assert requests == 4
        assert await store.list("") == [*keys, "turn/next.json"]
        assert await store.list("turn/live/00000") == keys
    client.close()


async def test_a_listing_after_a_key_is_s3s_own_start_after(
    s3_server: S3Server, bucket: str
) -> None:
    # S3 skips what sorts before StartAfter itself: an idle poll of a long turn lists
    # only what is new, page after page (3 keys a request here).
    client = s3_server.client()
    sent: list[dict[str, Any]] = []

    def three_keys_a_page(params: dict[str, Any], **_: Any) -> None:
        sent.append(dict(params))
        params["MaxKeys"] = 3

    client.meta.events.register("before-parameter-build.s3.ListObjectsV2", three_keys_a_page)
    store = S3Store(bucket, prefix="p/", client=client)
    with anyio.fail_after(10):
        chunks = [f"turn/live/{n:08d}-{n + 1:08d}.jsonl" for n in range(10)]
        await put_many(store, [*chunks, "turn/live/end.json"])
        sent.clear()
        listed = await store.list("turn/live/", start_after=chunks[5])
        assert listed == [*chunks[6:], "turn/live/end.json"]
        assert [params.get("StartAfter") for params in sent] == ["p/" + chunks[5]] * 2
        sent.clear()
        # What S3 cannot be sent is cut, and the listing is the same.
        assert await store.list("turn/", start_after="turn/live/00000009\x00") == [
            chunks[9],
            "turn/live/end.json",
        ]
        assert sent[0]["StartAfter"] == "p/turn/live/00000009"
    client.close()


# --- what S3 answers --------------------------------------------------------------------


async def test_a_put_that_finds_its_key_taken_reads_it_back_to_compare(
    store: S3Store, s3_client: Any
) -> None:
    with anyio.fail_after(10):
        # Written by someone else, before: S3 answers the store's put with 412.
        s3_client.put_object(Bucket=store.bucket, Key="k", Body=b"same")
        s3_client.put_object(Bucket=store.bucket, Key="j", Body=b"theirs")
        await store.put("k", b"same", content_type=JSON)
        with pytest.raises(ObjectConflictError, match="other bytes"):
            await store.put("j", b"ours", content_type=JSON)
        assert await store.get("j") == b"theirs"


async def test_a_write_in_progress_409_is_retried(store: S3Store, s3_server: S3Server) -> None:
    with anyio.fail_after(10):
        s3_server.faults = [(409, "ConditionalRequestConflict")] * 2
        await store.put("k", b"body", content_type=JSON)
        assert s3_server.faults == []
        assert await store.get("k") == b"body"


def test_the_pauses_between_409_retries_are_jittered_and_grow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import follower._stores._s3

    # Full jitter: rand(0, 1) times a ceiling that doubles from attempt to attempt.
    monkeypatch.setattr(follower._stores._s3.random, "random", lambda: 1.0)
    ceilings = [follower._stores._s3._conflict_pause_seconds(n) for n in range(1, 5)]
    assert ceilings == [0.05, 0.1, 0.2, 0.4]
    monkeypatch.setattr(follower._stores._s3.random, "random", lambda: 0.25)
    assert follower._stores._s3._conflict_pause_seconds(2) == 0.025
    monkeypatch.undo()
    draws = {follower._stores._s3._conflict_pause_seconds(3) for _ in range(50)}
    assert len(draws) > 1, "racing writers must not retry in step"
    assert all(0 <= d <= 0.2 for d in draws)


async def test_5xx_and_throttling_are_retried_by_the_client_the_store_makes(
    s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # botocore's standard retry mode, which the store's own client uses.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    store = S3Store(bucket, endpoint_url=s3_server.endpoint_url, region_name=REGION)
    with anyio.fail_after(10):
        s3_server.faults = [(500, "InternalError"), (503, "SlowDown")]
        await store.put("k", b"body", content_type=JSON)
        assert s3_server.faults == []
        assert await store.get("k") == b"body"
        s3_server.faults = [(503, "ServiceUnavailable")] * 3
        with pytest.raises(StoreUnavailableError, match=r"ServiceUnavailable \(503\)"):
            await store.put("j", b"body", content_type=JSON)
        assert s3_server.faults == []


async def test_a_write_in_progress_that_never_ends_is_a_store_error(
    store: S3Store, s3_server: S3Server
) -> None:
    with anyio.fail_after(10):
        s3_server.faults = [(409, "ConditionalRequestConflict")] * 4
        with pytest.raises(StoreUnavailableError, match="concurrent write") as caught:
            await store.put("k", b"body", content_type=JSON)
        assert not isinstance(caught.value, ObjectExistsError)
        assert s3_server.faults == []
        assert await store.list("") == []


async def test_a_refused_put_is_a_store_error_in_one_line(
    store: S3Store, s3_server: S3Server
) -> None:
    with anyio.fail_after(10):
        s3_server.faults = [(403, "AccessDenied")]
        with pytest.raises(StoreAccessDeniedError) as caught:
            await store.put("a/b", b"body", content_type=JSON)
        message = str(caught.value)
        assert message == (
            f"cannot put 'a/b' in s3://{store.bucket}/: AccessDenied (403): injected by the test"
        )


def answering(status: int, code: str) -> Callable[..., AWSResponse]:
    """A botocore ``before-send`` hook that answers every request with an S3 error."""

    def answer(request: Any, **_: Any) -> AWSResponse:
        body = (
            f"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>{code}</Code>"
            f"<Message>injected\nby the test</Message></Error>"
        ).encode()
        raw = AWSResponseRaw(body)
        return AWSResponse(request.url, status, {"Content-Type": "application/xml"}, raw)

    return answer


class AWSResponseRaw:
    """What botocore reads an ``AWSResponse``'s body from."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        pytest.param(403, "AccessDenied", StoreAccessDeniedError, id="access-denied"),
        pytest.param(403, "InvalidAccessKeyId", StoreAccessDeniedError, id="unknown-key"),
        pytest.param(403, "SignatureDoesNotMatch", StoreAccessDeniedError, id="bad-secret"),
        pytest.param(404, "NoSuchBucket", StoreNotFoundError, id="no-bucket"),
        pytest.param(503, "SlowDown", StoreUnavailableError, id="throttled"),
        pytest.param(500, "InternalError", StoreUnavailableError, id="5xx"),
    ],
)
async def test_every_call_names_the_cause_of_a_refusal_in_one_line(
    s3_server: S3Server, bucket: str, status: int, code: str, error: type[StoreError]
) -> None:
    client = s3_server.client(retries={"mode": "standard", "total_max_attempts": 2})
    attempts = 0

    def count(**_: Any) -> None:
        nonlocal attempts
        attempts += 1

    client.meta.events.register("before-send.s3.*", count)
    client.meta.events.register("before-send.s3.*", answering(status, code))
    store = S3Store(bucket, client=client)
    with anyio.fail_after(10):
        for call in (
            partial(store.put, "a/b", b"x", content_type=JSON),
            partial(store.get, "a/b"),
            partial(store.list, "a/"),
        ):
            attempts = 0
            with pytest.raises(error) as caught:
                await call()
            assert type(caught.value) is error
            message = str(caught.value)
            assert message.endswith(f": {code} ({status}): injected by the test"), message
            assert f"s3://{bucket}/" in message
            # botocore retries throttling and 5xx; a refusal or a missing bucket, never.
            assert attempts == (2 if status >= 500 else 1)
    client.close()


async def test_a_missing_bucket_is_a_store_error_not_a_missing_object(s3_client: Any) -> None:
    with anyio.fail_after(10):
        store = S3Store(f"missing-{uuid.uuid4().hex}", client=s3_client)
        for call in (
            partial(store.get, "k"),
            partial(store.list, ""),
            partial(store.put, "k", b"x", content_type=JSON),
        ):
            with pytest.raises(StoreNotFoundError, match="NoSuchBucket") as caught:
                await call()
            assert not isinstance(caught.value, (ObjectNotFoundError, ObjectExistsError))
            assert "\n" not in str(caught.value)


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield port


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.mark.parametrize("where", [closed_port, silent_port], ids=["refused", "silent"])
async def test_an_endpoint_that_does_not_answer_is_a_store_error_in_bounded_time(
    where: Callable[[], contextlib.AbstractContextManager[int]],
) -> None:
    with where() as port:
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=botocore.config.Config(
                connect_timeout=1, read_timeout=0.2, retries={"total_max_attempts": 1}
            ),
        )
        store = S3Store("bucket", client=client)
        with anyio.fail_after(10):
            for call in (
                partial(store.put, "k", b"x", content_type=JSON),
                partial(store.get, "k"),
                partial(store.list, "k/"),
            ):
                with pytest.raises(StoreUnavailableError) as caught:
                    await call()
                assert isinstance(caught.value.__cause__, BotoCoreError)
                assert "\n" not in str(caught.value)
                assert f"127.0.0.1:{port}" in str(caught.value)
        client.close()


async def test_a_store_made_from_settings_takes_credentials_from_the_environment(
    s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with anyio.fail_after(10):
        store = S3Store(
            bucket, prefix="p/", endpoint_url=s3_server.endpoint_url, region_name=REGION
        )
        await store.put("k", b"x", content_type=JSON)
        assert await store.get("k") == b"x"
        assert await store.list("") == ["k"]


async def test_settings_no_client_can_be_made_with_are_a_store_error() -> None:
    with anyio.fail_after(10):
        store = S3Store("bucket", endpoint_url="not a url")
        with pytest.raises(StoreError, match=r"cannot make an S3 client .*Invalid endpoint"):
            await store.put("k", b"x", content_type=JSON)


def test_one_store_serves_one_event_loop_after_another(store: S3Store) -> None:
    async def round_trip(key: str) -> None:
        await store.put(key, b"x", content_type=JSON)
        assert await store.get(key) == b"x"

    anyio.run(round_trip, "on-asyncio", backend="asyncio")
    anyio.run(round_trip, "on-trio", backend="trio")
    anyio.run(round_trip, "on-asyncio-again", backend="asyncio")


# --- threads and cancels --------------------------------------------------------------


async def test_calls_run_in_at_most_max_threads_at_once(s3_server: S3Server, bucket: str) -> None:
    client = s3_server.client()
    busy = threading.Condition()
    in_flight = 0
    most = 0
    release = threading.Event()

    def hold(**_: Any) -> None:
        nonlocal in_flight, most
        with busy:
            in_flight += 1
            most = max(most, in_flight)
            busy.notify_all()
        release.wait(10)
        with busy:
            in_flight -= 1

    def until_two_in_flight() -> None:
        with busy:
            assert busy.wait_for(lambda: in_flight == 2, timeout=10)

    client.meta.events.register("before-send.s3.PutObject", hold)
    store = S3Store(bucket, client=client, max_threads=2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(put_many, store, [f"k{n}" for n in range(8)])
            await anyio.to_thread.run_sync(until_two_in_flight)
            release.set()
        assert most == 2
        assert await store.list("") == sorted(f"k{n}" for n in range(8))
    client.close()


async def test_a_cancelled_put_lands_on_its_own_and_its_retry_is_done(
    s3_server: S3Server, bucket: str
) -> None:
    client = s3_server.client()
    sending = threading.Event()
    release = threading.Event()
    landed = threading.Event()

    def hold(**_: Any) -> None:  # returns None: a before-send answer would replace S3's
        sending.set()
        release.wait(10)

    client.meta.events.register("before-send.s3.PutObject", hold)
    client.meta.events.register("after-call.s3.PutObject", lambda **_: landed.set())
    store = S3Store(bucket, client=client)
    body = b'{"state":"completed","next":3}'
    returned = False

    async def put() -> None:
        nonlocal returned
        await store.put("turn/end.json", body, content_type=JSON)
        returned = True

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(put)
            await anyio.to_thread.run_sync(sending.wait, 10)
            tg.cancel_scope.cancel()  # the upload is on its way: the put is abandoned
        assert not returned
        release.set()
        assert await anyio.to_thread.run_sync(landed.wait, 10)
        assert raw_keys(client, bucket) == ["turn/end.json"]
        # The step's retry finds its own bytes: done. Other bytes still conflict.
        await store.put("turn/end.json", body, content_type=JSON)
        with pytest.raises(ObjectConflictError):
            await store.put("turn/end.json", b'{"state":"failed","next":3}', content_type=JSON)
        assert await store.get("turn/end.json") == body
    client.close()


# --- a whole step -------------------------------------------------------------------------


async def test_a_step_stored_in_s3_reads_back_turn_after_turn(bucket: str, s3_client: Any) -> None:
    agent = ScriptedAgent(page_limit=2)
    store = S3Store(bucket, prefix="runs/", client=s3_client)
    prefix = "steps/s1/"
    agent.add_task("a", format="agentenv/v1")
    agent.add_task("b", format="agentenv/v1")
    with anyio.fail_after(20):
        async with LiveTurns(
            ENDPOINT, store, prefix, poll_interval_seconds=0.05, client=agent.client()
        ) as turns:
            async with turns.following("turn-1") as turn:
                turn.follow("a")
                await agent.wait_reads(1)
                agent.publish("a", *range(5))
                await agent.wait_reads(4)
                agent.publish("a", 5)
                agent.finish("a", TrajectoryState.COMPLETED)
                turn.ended("completed")
            async with turns.following("turn-2") as turn:
                agent.publish("b", {"text": "ünïcode"}, [1, 2])
                agent.finish("b", TrajectoryState.FAILED)
                turn.follow("b")
        read = [
            (e.turn_id, e.index, e.event)
            async for e in read_live_trajectory(store, prefix, "turn-1", poll_interval_seconds=0.05)
        ]
    assert read == [("turn-1", n, n) for n in range(6)] + [
        ("turn-2", 0, {"text": "ünïcode"}),
        ("turn-2", 1, [1, 2]),
    ]
    first = await stored_turn(store, prefix, "turn-1")
    second = await stored_turn(store, prefix, "turn-2")
    assert first.end == {"state": "completed", "next": 6, "complete": True}
    assert first.next_turn == {"turn": "turn-2"}
    assert second.end == {"state": "failed", "next": 2, "complete": True}
    assert second.next_turn == {"turn": None}
    assert all(key.startswith(f"runs/{prefix}") for key in raw_keys(s3_client, bucket))
