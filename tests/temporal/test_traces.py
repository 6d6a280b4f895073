"""A retried attempt's step span links to the previous attempt's, through the heartbeats.

In temporalio's activity test environment (no server): the first attempt's last
heartbeat is given to the second as ``activity.info().heartbeat_details``, after a
round trip through the default data converter, as Temporal would deliver it. Spans go
to the SDK's in-memory exporter, behind a tracer provider of the test's own.

asyncio only (temporalio is asyncio-only; the conftest sets the backend).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import format_span_id, format_trace_id
from temporalio.activity import ActivityCancellationDetails
from temporalio.converter import DataConverter
from temporalio.testing import ActivityEnvironment

from follower import MemoryStore
from follower.temporal import StepAttempt, run_activity_step

from ..support.agents import ENDPOINT, ScriptedAgent
from ..telemetry.steps import Telemetry
from .test_heartbeats import HEARTBEAT_BYTES, payload_bytes

pytestmark = pytest.mark.anyio

PREFIX = "steps/s1/"


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    made = Telemetry()
    yield made
    made.shutdown()


def delivered(details: Any) -> Any:
    """``details`` as the next attempt reads them: to a payload and back."""
    converter = DataConverter.default.payload_converter
    [back] = converter.from_payloads(converter.to_payloads([details]))
    return back


def step_spans(telemetry: Telemetry) -> list[ReadableSpan]:
    return sorted(telemetry.finished("follower.step"), key=lambda s: s.start_time or 0)


async def first_attempt(
    agent: ScriptedAgent, store: MemoryStore, telemetry: Telemetry, ends: str
) -> list[Any]:
    """An attempt that follows turn-1's task and ends for a retry; its heartbeats."""
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)

    async def step(attempt: StepAttempt) -> None:
        async with (
            attempt.live_turns(
                ENDPOINT,
                store,
                PREFIX,
                client=agent.client(),
                poll_interval_seconds=0.01,
                tracer_provider=telemetry.tracer_provider,
            ),
            attempt.following("turn-1") as turn,
        ):
            turn.follow("t1")
            if ends == "raises":
                raise RuntimeError("the attempt fails, and is retried")
            # A heartbeat timeout: the activity is cancelled, and retried.
            env.cancel(ActivityCancellationDetails(timed_out=True))
            await anyio.sleep_forever()

    expected = RuntimeError if ends == "raises" else asyncio.CancelledError
    with anyio.fail_after(10), pytest.raises(expected):
        await env.run(run_activity_step, step, heartbeat_interval_seconds=60)
    return beats


async def second_attempt(
    agent: ScriptedAgent, store: MemoryStore, telemetry: Telemetry, heartbeat_details: list[Any]
) -> None:
    """An attempt that resumes turn-1 and ends it."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=heartbeat_details)

    async def step(attempt: StepAttempt) -> None:
        async with (
            attempt.live_turns(
                ENDPOINT,
                store,
                PREFIX,
                client=agent.client(),
                poll_interval_seconds=0.01,
                tracer_provider=telemetry.tracer_provider,
            ),
            attempt.following("turn-1") as turn,
        ):
            turn.follow("t1")
            agent.finish("t1")
            turn.ended("completed")

    with anyio.fail_after(10):
        await env.run(run_activity_step, step, heartbeat_interval_seconds=60)


@pytest.mark.parametrize("ends", ["raises", "is-cancelled-for-retry"])
async def test_a_retried_attempts_step_span_links_to_the_previous_attempts(
    telemetry: Telemetry, ends: str
) -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "a", "b")

    beats = await first_attempt(agent, store, telemetry, ends)
    [first] = step_spans(telemetry)
    assert first.context is not None
    # The beat sent as the span began, and the beats after it, carry its ids; the
    # interval (60 s) leaves no other beat but the one at the activity's start.
    (last,) = beats[-1]
    assert last["span"] == {
        "trace_id": format_trace_id(first.context.trace_id),
        "span_id": format_span_id(first.context.span_id),
        "trace_flags": format(first.context.trace_flags, "02x"),
    }
    assert payload_bytes(last) <= HEARTBEAT_BYTES

    await second_attempt(agent, store, telemetry, [delivered(last)])
    first_again, second = step_spans(telemetry)
    assert first_again.context == first.context
    assert second.context is not None
    assert dict(first.attributes or {})["follower.attempt"] == 1
    assert dict(second.attributes or {})["follower.attempt"] == 2
    assert not first.links, "a first attempt links to nothing"
    [link] = second.links
    assert (link.context.trace_id, link.context.span_id) == (
        first.context.trace_id,
        first.context.span_id,
    )
    assert link.context.trace_flags == first.context.trace_flags
    assert dict(link.attributes or {}) == {"follower.link": "previous_attempt"}
    # A new trace: the retry runs in another activity task, under no parent.
    assert second.parent is None


@pytest.mark.parametrize(
    "details",
    [
        [{"turns": [], "others": {"turns": 0, "events_stored": 0, "complete": 0}}],
        [{"turns": [], "span": {"trace_id": "not hex", "span_id": "00f067aa0ba902b7"}}],
        [{"span": {"trace_id": "0" * 32, "span_id": "00f067aa0ba902b7"}}],
        ["not a dict"],
        [],
    ],
    ids=["before-spans", "malformed", "invalid-ids", "not-a-dict", "none"],
)
async def test_details_without_a_usable_span_start_a_step_span_without_a_link(
    telemetry: Telemetry, details: list[Any]
) -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "a")
    await second_attempt(agent, store, telemetry, details)
    [step] = step_spans(telemetry)
    assert not step.links
    assert dict(step.attributes or {})["follower.attempt"] == 2


async def test_details_without_trace_flags_link_with_the_default_flags(
    telemetry: Telemetry,
) -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    agent.publish("t1", "a")
    span = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}
    await second_attempt(agent, store, telemetry, [{"turns": [], "span": span}])
    [step] = step_spans(telemetry)
    [link] = step.links
    assert format_trace_id(link.context.trace_id) == span["trace_id"]
    assert format_span_id(link.context.span_id) == span["span_id"]
    assert not link.context.trace_flags.sampled


async def test_without_a_provider_the_heartbeats_carry_no_span() -> None:
    agent, store = ScriptedAgent(), MemoryStore()
    agent.add_task("t1")
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)

    async def step(attempt: StepAttempt) -> dict[str, Any]:
        async with (
            attempt.live_turns(
                ENDPOINT, store, PREFIX, client=agent.client(), poll_interval_seconds=0.01
            ),
            attempt.following("turn-1") as turn,
        ):
            turn.follow("t1")
            details = attempt.heartbeat_details()
            agent.finish("t1")
            turn.ended("completed")
        return details

    with anyio.fail_after(10):
        details = await env.run(run_activity_step, step, heartbeat_interval_seconds=60)
    assert "span" not in details
    assert all("span" not in beat for (beat,) in beats)
