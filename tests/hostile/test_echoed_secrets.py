"""An agent that echoes the request's credentials back never gets them into a message.

docs/security.md ("Credentials"): whatever the agent answers, the values of the
credentials a request carried (``headers=``, a caller's client's headers or
``auth=``, a URL's user info, the command line's ``--header`` and the URL given to
``follower follow``) are hidden in every error (its message, ``repr``, pickle and
attributes) and every log record, even when the library cuts a quoted value short
in the middle of one. Real loopback sockets, both backends.
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx
import pytest

from follower import (
    A2AProtocolError,
    AgentError,
    LiveTurns,
    MalformedPageError,
    MemoryStore,
    connect_agent,
)
from follower.lowlevel import TrajectoryBatch, follow_trajectory
from follower.testing import ReferenceAgent, TaskScript
from follower.testing._asgi import JSON, read_body, respond
from tests.support.cli import run_cli_async, serving

pytestmark = pytest.mark.anyio

TOKEN = "tok-7f3a9c1e5b2d"
USER = "robot"
PASSWORD = "pw-SECRET-91ab4e"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
TEST_SECONDS = 30
# No run of this many characters of a secret may show: a value cut short in the middle
# of a token must not leave most of it behind.
PIECE = 6


def pieces(secret: str) -> Iterator[str]:
    return (secret[i : i + PIECE] for i in range(len(secret) - PIECE + 1))


SECRET_PIECES = frozenset(p for secret in (TOKEN, PASSWORD, BASIC) for p in pieces(secret))


def leaked(text: str) -> list[str]:
    return sorted(p for p in SECRET_PIECES if p in text)


def echo_of(authorization: str) -> str:
    """What the agent sends back: the header, decoded, again and again at offsets a cut meets.

    A copy starts at 30, 90 and 190 characters, so a value cut at 40, 100 or 200
    (as messages cut long values) ends inside one.
    """
    scheme, _, credentials = authorization.partition(" ")
    decoded = base64.b64decode(credentials).decode() if scheme == "Basic" else ""
    unit = f"{authorization} {decoded}".strip()
    text = unit
    for start in (30, 90, 190):
        text = text.ljust(start, ".") + unit
    return text + " (end)"


# --- the agent --------------------------------------------------------------------


@attrs.define
class EchoingAgent(ReferenceAgent):
    """The reference agent, but it answers with the request's Authorization header.

    ``where``: ``state`` or ``task_id`` of every page; ``error-body`` of every read
    (a 401); the JSON-RPC error's ``message`` or ``code``, or a malformed task
    ``result``, of every call. The card is served as the reference agent serves it,
    and with ``where`` empty everything is.
    """

    where: str = ""  # nothing: the reference agent
    basic_auth: bool = False  # 401 unless the request carries USER:PASSWORD

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if self.basic_auth and headers.get("authorization") != f"Basic {BASIC}":
            await respond(send, 401, b"no credentials", JSON)
            return
        if not self.where or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        echo = echo_of(headers.get("authorization", "none"))
        body = json.loads(await read_body(receive) or b"{}")
        if scope["path"] == "/ext/trajectory":
            if self.where not in ("state", "task_id", "error-body"):
                await respond(send, 404, b"unknown task", JSON)
                return
            if self.where == "error-body":
                await respond(send, 401, echo.encode(), JSON)
                return
            page = {
                "context_id": "c",
                "task_id": echo if self.where == "task_id" else body["task_id"],
                "state": echo if self.where == "state" else "running",
                "format": None,
                "events": [],
                "next": body["after"],
                "has_more": False,
            }
            await respond(send, 200, json.dumps(page).encode(), JSON)
            return
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": body.get("id")}
        if self.where == "rpc-code":
            answer["error"] = {"code": echo, "message": "refused"}
        elif self.where == "rpc-result":
            answer["result"] = {"kind": "task", "id": "t1", "status": echo}
        elif self.where == "rpc-message":
            answer["error"] = {"code": -32000, "message": echo}
        else:  # the trajectory is what echoes: the task itself is a good one
            answer["result"] = {
                "kind": "task", "id": "t1", "contextId": "c", "status": {"state": "working"}
            }  # fmt: skip
        await respond(send, 200, json.dumps(answer).encode(), JSON)


# --- how the caller gives the credentials ----------------------------------------------

GIVEN = ["headers", "client-headers", "client-basic-auth", "url-user-info"]


@attrs.frozen
class Credentials:
    """The options that carry the credentials, and the URL to reach the agent at."""

    url: str
    options: dict[str, Any]


def credentials(given: str, base_url: str, client: httpx.AsyncClient | None) -> Credentials:
    if given == "headers":
        return Credentials(base_url, {"headers": {"Authorization": f"Bearer {TOKEN}"}})
    if given == "url-user-info":
        return Credentials(base_url.replace("://", f"://{USER}:{PASSWORD}@"), {})
    assert client is not None
    return Credentials(base_url, {"client": client})


def client_for(given: str) -> httpx.AsyncClient:
    if given == "client-headers":
        return httpx.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
    if given == "client-basic-auth":
        return httpx.AsyncClient(auth=httpx.BasicAuth(USER, PASSWORD))
    return httpx.AsyncClient()


def error_texts(exc: BaseException) -> list[str]:
    """Everything an error shows: message, repr, attributes, pickle, the whole chain."""
    return [
        str(exc),
        repr(exc),
        repr(vars(exc)),
        repr(exc.args),
        pickle.dumps(exc).decode("latin-1"),
        "".join(traceback.format_exception(exc)),
    ]


def record_texts(records: list[logging.LogRecord]) -> list[str]:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return [formatter.format(r) + json.dumps(vars(r), default=repr) for r in records]


async def ignore(batch: TrajectoryBatch) -> None:
    pass


# --- the library ----------------------------------------------------------------------


@pytest.mark.parametrize("given", GIVEN)
@pytest.mark.parametrize(
    ("where", "error"),
    [("state", MalformedPageError), ("task_id", MalformedPageError), ("error-body", AgentError)],
)
async def test_a_page_that_echoes_the_credentials_never_shows_them(
    given: str, where: str, error: type[Exception], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    agent = EchoingAgent(script=TaskScript(events=1, interval_seconds=0), where=where)
    errors: list[BaseException] = []
    with anyio.fail_after(TEST_SECONDS):
        async with serving(agent) as base_url, client_for(given) as client:
            given_as = credentials(given, base_url, client)
            endpoint = given_as.url + "ext/trajectory"
            if "headers" not in given_as.options:  # follow_trajectory takes a client only
                with pytest.raises(error) as caught:
                    await follow_trajectory(
                        endpoint, "t1", ignore, poll_interval_seconds=0.05, stop=anyio.Event(),
                        **given_as.options,
                    )  # fmt: skip
                errors.append(caught.value)
            # In a turn the same error is logged, never raised.
            store = MemoryStore()
            async with (
                LiveTurns(
                    endpoint, store, "p/", poll_interval_seconds=0.05, **given_as.options
                ) as turns,
                turns.following("turn-1") as turn,
            ):
                turn.follow("t1")
    stored = [(await store.get(key)).decode() for key in await store.list("p/")]
    assert any('"endpoint"' in text for text in stored)
    assert caplog.records, "the turn logged nothing: the agent's answer was not refused"
    assert any(r.levelno >= logging.ERROR for r in caplog.records)
    texts = [t for exc in errors for t in error_texts(exc)] + record_texts(caplog.records)
    for text in texts + stored:
        assert not leaked(text), text


@pytest.mark.parametrize("given", GIVEN)
@pytest.mark.parametrize("where", ["rpc-message", "rpc-code", "rpc-result"])
async def test_a_json_rpc_answer_that_echoes_the_credentials_never_shows_them(
    given: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    agent = EchoingAgent(where=where)
    with anyio.fail_after(TEST_SECONDS):
        async with serving(agent) as base_url, client_for(given) as client:
            given_as = credentials(given, base_url, client)
            async with connect_agent(given_as.url, **given_as.options) as a2a:
                with pytest.raises(A2AProtocolError) as sent:
                    await a2a.send_message("hi")
                with pytest.raises(A2AProtocolError) as waited:
                    await a2a.wait_for_task("t1", deadline_seconds=5)
    texts = error_texts(sent.value) + error_texts(waited.value) + record_texts(caplog.records)
    for text in texts:
        assert not leaked(text), text
    # Hidden, not dropped: the error still says what the agent answered.
    assert "***" in str(sent.value)


def test_the_echo_is_what_the_checks_look_for() -> None:
    # The checks above can fail: the echo holds every secret, cut where messages cut.
    for authorization in (f"Bearer {TOKEN}", f"Basic {BASIC}"):
        echo = echo_of(authorization)
        for cut in (len(echo), 40, 100, 200):
            assert leaked(echo[:cut])


# --- the command line -------------------------------------------------------------------


def with_user_info(base_url: str) -> str:
    return base_url.replace("://", f"://{USER}:{PASSWORD}@")


@pytest.mark.parametrize("verbose", [[], ["-v"]], ids=["quiet", "verbose"])
async def test_follow_with_credentials_in_the_url_sends_them_and_never_prints_them(
    anyio_backend: str, tmp_path: Path, verbose: list[str]
) -> None:
    agent = EchoingAgent(script=TaskScript(events=3, interval_seconds=0), basic_auth=True)
    with anyio.fail_after(60):
        async with serving(agent) as base_url:
            done = await run_cli_async(
                ["--backend", anyio_backend, *verbose, "follow", with_user_info(base_url),
                 "--message", "hi", "--poll", "0.05"],
                tmp_path,
            )  # fmt: skip
    output = done.stdout + done.stderr
    assert not leaked(output), output
    assert done.returncode == 0, output
    assert len(done.stdout.splitlines()) == 3
    assert "HTTP Request" in done.stderr or not verbose  # -v shows httpx's request lines


@pytest.mark.parametrize("where", ["state", "rpc-message"])
async def test_follow_against_an_agent_that_echoes_the_url_credentials_never_prints_them(
    anyio_backend: str, tmp_path: Path, where: str
) -> None:
    agent = EchoingAgent(
        script=TaskScript(events=1, interval_seconds=0), where=where, basic_auth=True
    )
    with anyio.fail_after(60):
        async with serving(agent) as base_url:
            done = await run_cli_async(
                ["--backend", anyio_backend, "-v", "follow", with_user_info(base_url),
                 "--message", "hi", "--poll", "0.05", "--deadline", "2"],
                tmp_path,
            )  # fmt: skip
    output = done.stdout + done.stderr
    assert not leaked(output), output
    assert done.returncode != 0
    assert "follower: error:" in output


async def test_credentials_in_the_url_and_an_authorization_header_are_one_too_many(
    tmp_path: Path,
) -> None:
    done = await run_cli_async(
        ["follow", f"http://{USER}:{PASSWORD}@127.0.0.1:9/", "--message", "hi",
         "--header", f"Authorization: Bearer {TOKEN}"],
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert not leaked(done.stdout + done.stderr), done.stderr
    assert "Authorization" in done.stderr


async def test_a_bad_url_with_credentials_is_refused_without_printing_them(
    tmp_path: Path,
) -> None:
    done = await run_cli_async(
        ["follow", f"http://{USER}:{PASSWORD}@127.0.0.1:99999/", "--message", "hi"], tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert not leaked(done.stdout + done.stderr), done.stderr
