"""Agents behind a token: the caller's client, ``headers=``, the command line, TLS, origins.

docs/security.md ("Credentials"): a bearer token or custom headers reach an agent
that requires them, from the caller's httpx client or from ``headers=`` on the
entry points (no client to build) or ``--header`` / ``FOLLOWER_BEARER_TOKEN`` on
the command line; they go to the agent's own origin only (never through a
redirect, never to a card's other origin); no value is ever echoed; a private
CA is trusted with ``--ca-bundle`` / ``FOLLOWER_CA_BUNDLE``. Real loopback
sockets throughout.
"""

from __future__ import annotations

import argparse
import json
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.streams.tls
import attrs
import httpx
import pytest
import trustme

from follower import (
    AgentCardError,
    AgentRefusedError,
    AgentUnavailableError,
    InvalidArgumentError,
    LiveTurns,
    MemoryStore,
    connect_agent,
    following_live_trajectory,
    run_a2a_turn,
)
from follower._a2a._client import A2ATask
from follower._cli._auth import agent_client, headers_of
from follower._http._exchange import read_page
from follower.testing import ReferenceAgent, TaskScript
from tests.support.cli import run_cli_async, serving
from tests.support.stored import read_linked_turns

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token-7f3a"
BEARER = f"Bearer {TOKEN}"
TEST_SECONDS = 30


@attrs.define
class GuardedAgent(ReferenceAgent):
    """The reference agent behind a bearer token: 401 without it; notes every request."""

    seen: list[tuple[str, dict[str, str]]] = attrs.field(factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.seen.append((scope["path"], headers))
            if headers.get("authorization") != BEARER:
                body = b"no token"
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-length", str(len(body)).encode())],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await super().__call__(scope, receive, send)


def quick_agent(**options: Any) -> GuardedAgent:
    return GuardedAgent(script=TaskScript(events=5, interval_seconds=0), **options)


async def one_turn(agent_url: str, **options: Any) -> tuple[MemoryStore, A2ATask]:
    """A whole turn through connect_agent and run_a2a_turn; the store and the task."""
    store = MemoryStore()
    async with connect_agent(agent_url, **options) as agent:
        assert agent.trajectory_endpoint is not None
        async with LiveTurns(
            agent.trajectory_endpoint, store, "step/", poll_interval_seconds=0.05, **options
        ) as turns:
            task = await run_a2a_turn(agent, turns, "turn-1", "hi", task_poll_seconds=0.05)
    return store, task


async def stored_events(store: MemoryStore) -> int:
    keys = await store.list("step/turn-1/live/")
    return sum([len((await store.get(k)).splitlines()) for k in keys if k.endswith(".jsonl")])


def every_request_carries_the_token(
    agent: GuardedAgent, seen: list[tuple[str, dict[str, str]]] | None = None
) -> None:
    seen = agent.seen if seen is None else seen
    assert seen, "no request reached the agent"
    paths = {path for path, _ in seen}
    assert {"/.well-known/agent-card.json", "/ext/trajectory"} <= paths, paths
    assert all(headers.get("authorization") == BEARER for _, headers in seen)


# --- from the caller, and without a client -------------------------------------------------


async def test_a_callers_client_with_a_token_reaches_the_agent() -> None:
    agent = quick_agent()
    with anyio.fail_after(TEST_SECONDS):
        async with (
            serving(agent) as url,
            httpx.AsyncClient(headers={"authorization": BEARER}) as client,
        ):
            store, task = await one_turn(url, client=client)
            # And a lone turn, straight to the endpoint, on the same client.
            lone = MemoryStore()
            async with following_live_trajectory(
                url + "ext/trajectory", lone, "p/", "t", poll_interval_seconds=0.05, client=client
            ) as turn:
                turn.follow(task.id)
                turn.ended("completed")
    assert task.state == "completed"
    assert await stored_events(store) == 5
    assert "p/t/live/end.json" in await lone.list("p/t/live/")
    every_request_carries_the_token(agent)


async def test_headers_reach_the_agent_without_building_a_client() -> None:
    agent = quick_agent()
    with anyio.fail_after(TEST_SECONDS):
        async with serving(agent) as url:
            store, task = await one_turn(url, headers={"Authorization": BEARER, "X-Team": "a"})
    assert task.state == "completed"
    assert await stored_events(store) == 5
    every_request_carries_the_token(agent)
    assert all(headers.get("x-team") == "a" for _, headers in agent.seen)


async def test_headers_add_to_a_callers_client_and_only_to_its_requests() -> None:
    agent = quick_agent()
    with anyio.fail_after(TEST_SECONDS):
        async with (
            serving(agent) as url,
            httpx.AsyncClient(headers={"x-client": "c"}) as client,
        ):
            _, task = await one_turn(url, client=client, headers={"authorization": BEARER})
            # The client itself is left as it was: its next request has no token.
            assert (await client.get(url + ".well-known/agent-card.json")).status_code == 401
    assert task.state == "completed"
    assert all(headers.get("x-client") == "c" for _, headers in agent.seen)
    assert agent.seen[-1][1].get("authorization") is None


async def test_without_the_token_the_agent_refuses_and_no_error_quotes_a_header() -> None:
    agent = quick_agent()
    with anyio.fail_after(TEST_SECONDS):
        async with serving(agent) as url:
            with pytest.raises(AgentCardError, match="HTTP 401"):
                await one_turn(url, headers={"authorization": "Bearer wrong-one"})
            with pytest.raises(AgentRefusedError) as caught:
                async with httpx.AsyncClient() as client:
                    await read_page(client, url + "ext/trajectory", "t", 0)
    assert "wrong-one" not in str(caught.value)


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": f"Bearer {TOKEN}\r\nX-Injected: 1"},
        {"authorization": f"Bearer {TOKEN}\x00"},
        {"bad name": TOKEN},
        {"content-length": TOKEN},
        {"host": TOKEN},
        {"x-token": 7},
        [("x-token",)],
        "x-token",
    ],
    ids=["crlf", "nul", "name", "content-length", "host", "not-str", "not-a-pair", "a-string"],
)
def test_headers_that_cannot_be_sent_are_refused_at_once_without_echoing_them(
    headers: Any,
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        LiveTurns(
            "http://agent.test/x", MemoryStore(), "p/", poll_interval_seconds=1, headers=headers
        )
    assert TOKEN not in str(caught.value)
    with pytest.raises(InvalidArgumentError):
        following_live_trajectory(
            "http://agent.test/x",
            MemoryStore(),
            "p/",
            "t",
            poll_interval_seconds=1,
            headers=headers,
        )


def test_the_options_never_show_a_header() -> None:
    turns = LiveTurns(
        "http://agent.test/x", MemoryStore(), "p/", poll_interval_seconds=1,
        headers={"authorization": BEARER},
    )  # fmt: skip
    assert TOKEN not in repr(turns._options)


# --- only the agent's own origin ---------------------------------------------------------


class Recorder:
    """A loopback server standing in for another origin: notes each request's head."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []

    async def serve(self, stream: anyio.abc.ByteStream) -> None:
        async with stream:
            buffer = b""
            try:
                while b"\r\n\r\n" not in buffer:
                    buffer += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            self.heads.append(buffer.split(b"\r\n\r\n", 1)[0])
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")


@asynccontextmanager
async def listening(serve: Any, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    listener: anyio.abc.Listener[Any] = await anyio.create_tcp_listener(
        local_host="127.0.0.1", local_port=0
    )
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    if tls is not None:
        listener = anyio.streams.tls.TLSListener(listener, tls, standard_compatible=False)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}/"
        tg.cancel_scope.cancel()


async def test_a_card_naming_another_origin_never_gets_the_token() -> None:
    other = Recorder()
    with anyio.fail_after(TEST_SECONDS):
        async with listening(other.serve) as other_url:
            agent = quick_agent(card_url=other_url + "a2a")
            async with serving(agent) as url:
                _, task = await one_turn(url, headers={"authorization": BEARER})
    assert task.state == "completed"  # JSON-RPC went to the agent, where its card was read
    assert other.heads == []
    every_request_carries_the_token(agent)


def redirecting_to(target: str) -> Any:
    async def serve(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            buffer = b""
            try:
                while b"\r\n\r\n" not in buffer:
                    buffer += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            await stream.send(
                b"HTTP/1.1 307 Temporary Redirect\r\nlocation: %b\r\ncontent-length: 0\r\n\r\n"
                % target.encode()
            )

    return serve


@pytest.mark.parametrize("client_kind", ["shared", "follows-redirects"])
async def test_redirects_are_never_followed_so_the_token_stays_home(client_kind: str) -> None:
    other = Recorder()
    with anyio.fail_after(TEST_SECONDS):
        async with (
            listening(other.serve) as other_url,
            listening(redirecting_to(other_url + "x")) as url,
            httpx.AsyncClient(headers={"authorization": BEARER}, follow_redirects=True) as follows,
        ):
            options: dict[str, Any] = (
                {"headers": {"authorization": BEARER}}
                if client_kind == "shared"
                else {"client": follows}
            )
            with pytest.raises(AgentCardError, match="HTTP 307"):
                async with connect_agent(url, **options):
                    pass
            if client_kind == "follows-redirects":
                with pytest.raises(AgentRefusedError, match="307"):
                    await read_page(follows, url + "ext/trajectory", "t", 0)
            store = MemoryStore()
            async with following_live_trajectory(
                url + "ext/trajectory", store, "p/", "t", poll_interval_seconds=0.05, **options
            ) as turn:
                turn.follow("t1")
                turn.ended("completed")
    assert other.heads == []
    assert "p/t/live/end.json" in await store.list("p/t/live/")


# --- TLS: verified by default, a private CA on request ----------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def tls_server(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


def cli_args(ca_bundle: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(ca_bundle=ca_bundle, headers=[])


@pytest.mark.parametrize("where", ["option", "environment"])
async def test_a_ca_bundle_makes_a_private_ca_trusted(
    ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    recorder = Recorder()
    with anyio.fail_after(TEST_SECONDS):
        async with listening(recorder.serve, tls=tls_server(ca)) as url:
            # Verified by default: the system's CAs have never heard of this one.
            async with agent_client(cli_args()) as none:
                assert none is None
            with pytest.raises(AgentUnavailableError):
                async with connect_agent(url):
                    pass
            if where == "option":
                args = cli_args(str(bundle))
            else:
                monkeypatch.setenv("FOLLOWER_CA_BUNDLE", str(bundle))
                args = cli_args()
            async with agent_client(args) as client, connect_agent(url, client=client) as agent:
                assert agent.card == {}
    assert len(recorder.heads) == 1  # the refused handshake sent no request


async def test_a_ca_bundle_that_is_no_bundle_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate")
    for path in (tmp_path / "junk.pem", tmp_path / "missing.pem"):
        with pytest.raises(InvalidArgumentError, match="--ca-bundle"):
            async with agent_client(cli_args(str(path))):
                pass


# --- the command line ------------------------------------------------------------------


def test_header_arguments_and_the_token_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from follower._cli._parser import build_parser

    parser = build_parser()
    args = parser.parse_args(
        ["follow", "http://a/", "--message", "m", "--header", "X-Team:  a ", "--header", "X-B: b"]
    )
    monkeypatch.setenv("FOLLOWER_BEARER_TOKEN", TOKEN)
    assert headers_of(args) == (("X-Team", "a"), ("X-B", "b"), ("Authorization", BEARER))
    monkeypatch.setenv("FOLLOWER_BEARER_TOKEN", TOKEN + "\n")  # a file's trailing newline
    assert headers_of(args)[-1] == ("Authorization", BEARER)
    monkeypatch.setenv("FOLLOWER_BEARER_TOKEN", "a\x01b")
    with pytest.raises(InvalidArgumentError) as caught:
        headers_of(args)
    assert "a\x01b" not in str(caught.value)
    assert TOKEN not in parser.format_help()


async def test_follow_with_a_token_from_the_environment_never_echoes_it(
    anyio_backend: str, tmp_path: Path
) -> None:
    agent = quick_agent()
    with anyio.fail_after(60):
        async with serving(agent) as url:
            result = await run_cli_async(
                ["--backend", anyio_backend, "-v", "follow", url, "--message", "hi",
                 "--header", "X-Team: a", "--store", "out", "--prefix", "run/"],
                tmp_path,
                env={"FOLLOWER_BEARER_TOKEN": TOKEN},
            )  # fmt: skip
            seen = list(agent.seen)
            refused = await run_cli_async(
                ["--backend", anyio_backend, "follow", url, "--message", "hi",
                 "--header", f"Authorization: Bearer {TOKEN}x"],
                tmp_path,
            )  # fmt: skip
            bad = await run_cli_async(
                ["--backend", anyio_backend, "follow", url, "--message", "hi",
                 "--header", f"X-Token {TOKEN}"],
                tmp_path,
            )  # fmt: skip
    assert result.returncode == 0, result.stderr
    every_request_carries_the_token(agent, seen)
    assert all(headers.get("x-team") == "a" for _, headers in seen)
    [turn] = read_linked_turns(tmp_path / "out" / "run", "turn-1")
    assert len(turn.events) == 5
    stored = "".join(p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file())
    for text in (result.stdout, result.stderr, refused.stdout, refused.stderr, bad.stderr, stored):
        assert TOKEN not in text
    assert refused.returncode != 0
    assert "401" in refused.stderr
    assert bad.returncode == 2


async def test_no_log_record_carries_the_token(caplog: pytest.LogCaptureFixture) -> None:
    agent = quick_agent()
    caplog.set_level(logging.DEBUG)
    with anyio.fail_after(TEST_SECONDS):
        async with serving(agent) as url:
            await one_turn(url, headers={"authorization": BEARER})
            with pytest.raises(AgentCardError):
                await one_turn(url, headers={"authorization": BEARER + "x"})
    for record in caplog.records:
        assert TOKEN not in record.getMessage()
        assert TOKEN not in json.dumps(record.__dict__, default=repr)
