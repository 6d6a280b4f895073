"""The httpx fence: ``AgentClient``'s shorter paths and the private httpx members they use.

docs/design.md ("HTTP: one bounded exchange"): each private member of
``httpx.AsyncClient`` the client leans on is checked when a client is made; a
client made where one is missing, or has another shape, takes httpx's public
path, and still reads, on the wire, what it reads on the short one.

httpx's own code needs its members, so a member is taken away only while the
client is made (where the fence decides) and put back for the requests: an httpx
that renamed one would call it by its new name itself.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

import follower._http._agent_client as _agent_client
from follower._http._agent_client import PRIVATE_MEMBERS, AgentClient
from follower._http._clients import _shared_ssl_context
from follower._http._transport import AgentTransport

from .test_transport import (
    HTTPX_HAS_EVERY_MEMBER,
    Request,
    agent_client,
    answer,
    page,
    read,
    serving,
)

pytestmark = pytest.mark.anyio

PUBLIC_SENDS_OF_TWO_READS = 0 if HTTPX_HAS_EVERY_MEMBER else 2


class Made:
    """The private attributes taken from the clients made in a ``made_without`` block."""

    def __init__(self) -> None:
        self.taken: dict[int, tuple[str, Any]] = {}

    def put_back(self, client: httpx.AsyncClient) -> None:
        name, value = self.taken.pop(id(client))
        setattr(client, name, value)


@contextmanager
def made_without(name: str) -> Iterator[Made]:
    """While the block runs, clients are made by an httpx that lacks the member ``name``."""
    made = Made()
    with pytest.MonkeyPatch.context() as patch:
        owners = [cls for cls in httpx.AsyncClient.__mro__ if name in vars(cls)]
        if owners:  # a method, of the client's class or of a base
            for owner in owners:
                patch.delattr(owner, name)
        elif hasattr(httpx.AsyncClient(verify=False), name):  # an attribute each client sets
            init = httpx.AsyncClient.__init__

            def init_without(self: httpx.AsyncClient, *args: Any, **kwargs: Any) -> None:
                init(self, *args, **kwargs)
                made.taken[id(self)] = (name, self.__dict__.pop(name))

            patch.setattr(httpx.AsyncClient, "__init__", init_without)
        # else this httpx has no such member: nothing to take away
        yield made


@contextmanager
def counting_public_sends() -> Iterator[list[httpx.Request]]:
    """The requests that went through httpx's own ``AsyncClient.send``."""
    sent: list[httpx.Request] = []
    send = httpx.AsyncClient.send

    async def counted(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> Any:
        sent.append(request)
        return await send(self, request, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx.AsyncClient, "send", counted)
        yield sent


async def cookie_setting(stream: anyio.abc.ByteStream, request: Request) -> bool:
    await stream.send(answer(page(), "set-cookie: seen=1; Path=/"))
    return True


async def reads_twice(client: AgentClient) -> tuple[list[bytes], list[httpx.Request]]:
    """Two reads on ``client`` from a server that sets a cookie: the second request's heads."""
    with anyio.fail_after(20), counting_public_sends() as public:
        async with serving(cookie_setting) as (url, server), client:
            for _ in range(2):
                assert (await read(client, url)).events == ("a",)
    return [request.head for request in server.requests], public


async def test_every_member_there_takes_the_short_paths() -> None:
    heads, public = await reads_twice(agent_client())
    assert len(public) == PUBLIC_SENDS_OF_TWO_READS
    assert b"cookie: seen=1" in heads[1].lower()


@pytest.mark.parametrize("name", PRIVATE_MEMBERS)
async def test_a_client_made_without_a_private_member_takes_httpx_s_public_path(
    name: str,
) -> None:
    with made_without(name) as made:
        client = agent_client()
    if made.taken:
        assert name not in vars(client)  # nothing of its own in the missing member's place
        made.put_back(client)
    with counting_transport_entries() as through_httpx_models:
        heads, public = await reads_twice(client)
    # The cookie the first answer set goes with the second request either way.
    assert b"cookie: seen=1" in heads[1].lower()
    if name == "_cookies":
        # Only the cookie jar leans on it: httpx's own jar, which reads every answer.
        assert type(client.cookies) is httpx.Cookies
        assert len(public) == PUBLIC_SENDS_OF_TWO_READS
    elif name == "_mounts":
        # Only the reads without httpx's models lean on it: both go by the client's send.
        assert len(public) == PUBLIC_SENDS_OF_TWO_READS
        assert len(through_httpx_models) == 2
    else:
        assert len(public) == 2


async def test_a_read_skips_httpx_s_models_only_where_no_mount_applies() -> None:
    # The first read skips them; the second carries the cookie the first set, by httpx's path.
    with counting_transport_entries() as through_httpx_models:
        await reads_twice(agent_client())
    assert len(through_httpx_models) == (1 if HTTPX_HAS_EVERY_MEMBER else 2)
    # A mount (or a proxy, which httpx mounts) takes the requests it matches.
    mounted: list[httpx.Request] = []

    def mount(request: httpx.Request) -> httpx.Response:
        mounted.append(request)
        return httpx.Response(200, content=page())

    client = AgentClient(
        AgentTransport(ssl_context=_shared_ssl_context()),
        mounts={"http://": httpx.MockTransport(mount)},
    )
    with anyio.fail_after(10):
        async with serving() as (url, server), client:
            assert (await read(client, url)).events == ("a",)
    assert len(mounted) == 1
    assert not server.requests  # (on any httpx: the mount is httpx's to apply)


@contextmanager
def counting_transport_entries() -> Iterator[list[httpx.Request]]:
    """The requests that reached the library's transport through httpx's models."""
    entered: list[httpx.Request] = []
    handle = AgentTransport.handle_async_request

    async def counted(self: AgentTransport, request: httpx.Request) -> httpx.Response:
        entered.append(request)
        return await handle(self, request)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AgentTransport, "handle_async_request", counted)
        yield entered


async def test_a_private_method_of_another_shape_is_not_called() -> None:
    original = httpx.AsyncClient._send_single_request
    called_by_us: list[object] = []

    async def reshaped(self: httpx.AsyncClient, request: httpx.Request, *extra: object) -> Any:
        called_by_us.append(extra)
        return await original(self, request)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx.AsyncClient, "_send_single_request", reshaped)
        heads, public = await reads_twice(agent_client())
    assert len(public) == 2
    assert len(heads) == 2
    assert called_by_us == [(), ()]  # by httpx's own send, as it calls it


def test_the_fence_names_every_private_httpx_member_the_client_uses() -> None:
    # A new shorter path that leans on another private member must be fenced too.
    source = inspect.getsource(_agent_client.AgentClient)
    used = set(re.findall(r"self\.(_[a-z][a-z_]*)\b", source))
    client = httpx.AsyncClient(verify=False)
    httpx_own = {name for name in used if hasattr(client, name)}
    assert httpx_own <= set(PRIVATE_MEMBERS), httpx_own - set(PRIVATE_MEMBERS)
    assert httpx_own, "the scan found none: it no longer reads the client's source"


def test_every_supported_httpx_has_its_json_bytes_made_by_one_encoder_of_ours() -> None:
    # tools/httpx-lowest runs this on the lowest httpx, every venv on the newest.
    assert _agent_client.encoder_like_httpx() is not None


def test_a_json_request_is_built_by_httpx_where_no_encoder_of_ours_sends_its_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_agent_client, "_JSON_ENCODERS", (json.JSONEncoder(indent=1),))
    assert _agent_client.encoder_like_httpx() is None
    monkeypatch.setattr(_agent_client, "_JSON", None)
    client = agent_client()
    url, body, timeout = httpx.URL("http://agent.invalid/x"), {"\u00e9": [1]}, httpx.Timeout(1)
    ours = client.build_json_request("POST", url, body, headers={}, timeout=timeout)
    httpx_own = client.build_request("POST", url, json=body, headers={}, timeout=timeout)
    assert ours.content == httpx_own.content
    assert ours.headers.raw == httpx_own.headers.raw
