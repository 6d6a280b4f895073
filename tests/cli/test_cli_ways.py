"""``follower follow`` takes whatever way the agent's card offers, or the one ``--via`` asks for.

The reference agent is served in the test process on a loopback socket, its card
offering everything (a live trajectory, streaming), streaming only, or neither;
the command runs in a subprocess on the same backend. A streamed or polled turn is
stored as A2A's own events: every event of the script must be in them, and what
the command printed is what it stored. The official SDK's agent (tests/streams),
which offers only streaming, is followed by its stream.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from follower._cli._main import EXIT_OK
from follower.testing import ReferenceAgent, TaskScript

from ..streams.conftest import SdkAgent, sdk_agent  # noqa: F401 - the fixture, used below
from ..support.cli import (
    AgentWithoutLiveTrajectory,
    printed_events,
    run_cli_async,
    serving,
)
from ..support.stored import StoredTurn, read_linked_turns

pytestmark = pytest.mark.anyio

STREAM_FORMAT = "a2a-stream/v1"
KINDS = {"task", "message", "statusUpdate", "artifactUpdate", "gap"}
EVENT_ID = re.compile(r"-event-(\d+)$")


class AgentThatOnlyAnswers(ReferenceAgent):
    """The reference agent, its card offering no live trajectory and no streaming."""

    def card(self, base_url: str) -> dict[str, Any]:
        card = super().card(base_url)
        del card["capabilities"]["extensions"]
        card["capabilities"]["streaming"] = False
        return card


AGENTS = {
    "everything": ReferenceAgent,
    "streaming only": AgentWithoutLiveTrajectory,
    "neither": AgentThatOnlyAnswers,
}

# (the agent's card offers, --via, the way taken, what follow says of it on stderr)
WAYS = [
    (
        "everything",
        None,
        "cursor",
        "by cursor reads of its live trajectory (the card offers a live trajectory)",
    ),
    (
        "streaming only",
        None,
        "stream",
        "by its stream (the card offers streaming, no live trajectory)",
    ),
    (
        "neither",
        None,
        "poll",
        "by polls of GetTask (the card offers no live trajectory and no streaming)",
    ),
    ("everything", "cursor", "cursor", "by cursor reads of its live trajectory (--via cursor)"),
    ("everything", "stream", "stream", "by its stream (--via stream)"),
    ("everything", "poll", "poll", "by polls of GetTask (--via poll)"),
    # The reference agent streams whatever its card says: asked for, the stream is taken.
    ("neither", "stream", "stream", "by its stream (--via stream; the card does not offer it)"),
]


def follow_args(backend: str, url: str, *args: str) -> list[str]:
    return ["--backend", backend, "follow", url, "--poll", "0.05", *args]


def stored_turn(cwd: Path) -> StoredTurn:
    [turn] = read_linked_turns(cwd / "out" / "run", "t1")
    return turn


def messages_in(value: Any) -> Iterator[dict[str, Any]]:
    """Every A2A message inside ``value`` (one with a ``messageId``), at any depth."""
    if isinstance(value, dict):
        if "messageId" in value:
            yield value
        for inner in value.values():
            yield from messages_in(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from messages_in(inner)


def texts_in(value: Any) -> set[str]:
    """Every text part's text inside ``value``, at any depth."""
    if isinstance(value, dict):
        found = {value["text"]} if isinstance(value.get("text"), str) else set()
        for inner in value.values():
            found |= texts_in(inner)
        return found
    if isinstance(value, list):
        return set().union(*(texts_in(inner) for inner in value))
    return set()


def carried_events(events: list[Any]) -> dict[int, list[Any]]:
    """The reference agent's trajectory events the stored A2A events carry, by index.

    Each is the data part of an agent message ``<task id>-event-<index>``; a
    message met more than once (a polled task's history, again in its final
    form) is listed as often as it was stored.
    """
    carried: dict[int, list[Any]] = {}
    for message in messages_in(events):
        matched = EVENT_ID.search(message["messageId"])
        if matched is not None:
            [part] = message["parts"]
            carried.setdefault(int(matched.group(1)), []).append(part["data"])
    return carried


def assert_a2a_events(turn: StoredTurn) -> None:
    """A streamed or polled turn: A2A events, each one object naming its kind, ended completed."""
    assert turn.meta == {"format": STREAM_FORMAT}
    assert turn.events
    for event in turn.events:
        assert isinstance(event, dict), event
        [kind] = event
        assert kind in KINDS, event
    [(kind, last)] = turn.events[-1].items()
    assert kind in ("task", "statusUpdate"), turn.events[-1]
    assert last["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize(
    ("offers", "via", "way", "says"),
    WAYS,
    ids=[f"{offers}-{via or 'default'}" for offers, via, _, _ in WAYS],
)
async def test_follow_takes_the_way_offered_or_asked_and_says_which(
    anyio_backend: str, tmp_path: Path, offers: str, via: str | None, way: str, says: str
) -> None:
    # A task of a few tenths of a second: followed while it runs, each way.
    agent = AGENTS[offers](script=TaskScript(events=8, interval_seconds=0.02, event_bytes=16))
    args = ["--message", "hi", "--store", "out", "--prefix", "run/", "--turn", "t1"]
    if via is not None:
        args += ["--via", via]
    with anyio.fail_after(60):
        async with serving(agent) as url:
            result = await run_cli_async(follow_args(anyio_backend, url, *args), tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    said = re.fullmatch(
        r"follower: task (\S+)\nfollower: following task \1 (.+)\n"
        r"follower: task \1 ended completed\n",
        result.stderr,
    )
    assert said, result.stderr
    assert said.group(2) == says
    turn = stored_turn(tmp_path)
    # What was printed is what was stored, streamed and polled turns too.
    assert printed_events(result.stdout, "t1") == turn.events
    assert turn.end == {"state": "completed", "next": len(turn.events), "complete": True}
    script = [agent.script.event(index) for index in range(agent.script.events)]
    if way == "cursor":
        assert turn.meta == {"format": agent.script.format}
        assert turn.events == script
        return
    assert_a2a_events(turn)
    carried = carried_events(turn.events)
    assert sorted(carried) == list(range(len(script)))
    for index, copies in carried.items():
        assert all(data == script[index] for data in copies)
    if way == "stream":
        # A stream brings every event once: in the snapshot it starts with, or as an update.
        assert all(len(copies) == 1 for copies in carried.values()), carried
    kinds = {kind for event in turn.events for kind in event}
    assert kinds <= {"task", "statusUpdate", "artifactUpdate"}, kinds
    stats = agent.statistics()
    assert (stats.streams > 0) == (way == "stream")
    assert stats.reads == 0  # no cursor read: the way taken is the only one used


async def test_follow_the_sdk_agent_by_its_stream(
    anyio_backend: str,
    tmp_path: Path,
    sdk_agent: SdkAgent,  # noqa: F811 - the fixture imported above
) -> None:
    # The official SDK's agent offers streaming and no live trajectory: its stream is taken.
    script = {"updates": 4, "chunks": 2, "interval": 0.02}
    args = ["--message", json.dumps(script), "--store", "out", "--prefix", "run/", "--turn", "t1"]
    with anyio.fail_after(60):
        result = await run_cli_async(follow_args(anyio_backend, sdk_agent.url, *args), tmp_path)
    assert result.returncode == EXIT_OK, (result.stderr, sdk_agent.log_tail())
    lines = result.stderr.splitlines()
    assert lines[1:] == [
        f"{lines[0]} ".replace("follower: task ", "follower: following task ")
        + "by its stream (the card offers streaming, no live trajectory)",
        f"{lines[0]} ended completed",
    ], result.stderr
    turn = stored_turn(tmp_path)
    assert printed_events(result.stdout, "t1") == turn.events
    assert turn.end == {"state": "completed", "next": len(turn.events), "complete": True}
    assert_a2a_events(turn)
    # Every update, every chunk of the artifact and the last message are stored.
    expected = {f"update {i}" for i in range(4)} | {"chunk 0", "chunk 1", "end completed"}
    assert expected <= texts_in(turn.events), turn.events
