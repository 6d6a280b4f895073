"""An endpoint that cannot be sent is refused where it is named (docs/security.md).

An endpoint holding CR, LF, a space, a tab or another control character, or one
httpx cannot parse, raised a bare ``httpx.InvalidURL`` at the first read (or was
sent percent-encoded, a space in the host); it is an ``InvalidArgumentError`` at
the call or construction, before any read, with a one-line message.
"""

from __future__ import annotations

import anyio
import pytest

from follower import InvalidArgumentError, LiveTurns, MemoryStore, following_live_trajectory
from follower.lowlevel import follow_trajectory

pytestmark = pytest.mark.anyio

BAD_ENDPOINTS = [
    "http://agent.example/ext\r\nx-injected: 1",
    "http://agent.example/ext\nx",
    "http://agent.example/ext trajectory",
    "http://agent example/ext",
    " http://agent.example/ext",
    "http://agent.example/ext\t",
    "http://agent.example/ext\x00",
    "http://agent.example/ext\u2028",
    "http://[::1/ext",
]


async def no_sink(batch: object) -> None:
    raise AssertionError("nothing is read")


@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS)
async def test_an_endpoint_that_cannot_be_sent_is_refused_where_it_is_named(
    endpoint: str,
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await follow_trajectory(
            endpoint, "t1", no_sink, poll_interval_seconds=1.0, stop=anyio.Event()
        )
    assert len(str(caught.value).splitlines()) == 1
    with pytest.raises(InvalidArgumentError):
        following_live_trajectory(endpoint, MemoryStore(), "p/", "turn-1", poll_interval_seconds=1)
    with pytest.raises(InvalidArgumentError):
        LiveTurns(endpoint, MemoryStore(), "p/", poll_interval_seconds=1)


# None is an agent with no live trajectory, an AgentCardError: test_careless_caller.py.
@pytest.mark.parametrize("endpoint", [7, b"http://agent.example/ext", ""])
async def test_an_endpoint_that_is_no_url_string_is_refused(endpoint: object) -> None:
    with pytest.raises(InvalidArgumentError):
        LiveTurns(endpoint, MemoryStore(), "p/", poll_interval_seconds=1)  # type: ignore[arg-type]


def test_an_endpoint_that_can_be_sent_is_taken_as_given() -> None:
    for endpoint in ["http://agent.example/ext/trajectory", "https://[::1]:8443/a%20b?x=1"]:
        assert (
            LiveTurns(endpoint, MemoryStore(), "p/", poll_interval_seconds=1).endpoint == endpoint
        )
