"""A step's spans: the step, each turn, each follower, in one trace, ended however the step ends.

Against the reference agent in-process, on both backends, with the SDK's in-memory
exporter behind a tracer provider of the test's own (the global one is never set).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

import follower._reading._follow as _follow
from follower import MemoryStore
from follower._telemetry import OFF, telemetry_for
from follower.testing import Fault, ReferenceAgent, TaskScript

from .steps import (
    AGENT_URL,
    SCRIPT,
    Telemetry,
    live_turns,
    reference_agent,
    run_turns,
    step_of_turns,
)

pytestmark = pytest.mark.anyio

TURNS = ("turn-1", "turn-2", "turn-3")


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.mark.parametrize("via", ["cursor", "stream", "poll"])
async def test_a_step_of_three_turns_is_one_trace_of_its_step_turns_and_followers(
    telemetry: Telemetry, via: str
) -> None:
    agent = ReferenceAgent(script=SCRIPT)
    turns, task_ids = await step_of_turns(agent, telemetry, TURNS, via=via)
    assert turns.endpoint.startswith(AGENT_URL)
    stats = turns.statistics()

    [step] = telemetry.finished("follower.step")
    turn_spans = telemetry.finished("invoke_agent")
    follower_spans = telemetry.finished("follower.follow")
    assert len(turn_spans) == len(follower_spans) == 3
    assert step.context is not None
    trace_id = step.context.trace_id
    assert {s.context.trace_id for s in telemetry.finished() if s.context} == {trace_id}

    assert step.parent is None
    assert attributes(step) == {
        "follower.agent.url": turns.endpoint,
        "follower.turns": 3,
        "follower.events_stored": stats.events_stored,
        "follower.bytes_stored": stats.bytes_stored,
        "follower.complete": True,
        "follower.outcome": "returned",
    }
    assert step.status.status_code is StatusCode.UNSET

    for turn_span, follower_span, turn_stats, task_id in zip(
        sorted(turn_spans, key=lambda s: s.start_time or 0),
        sorted(follower_spans, key=lambda s: s.start_time or 0),
        stats.turns,
        task_ids,
        strict=True,
    ):
        assert parent_id(turn_span) == span_id(step)
        assert parent_id(follower_span) == span_id(turn_span)
        turn_attributes = attributes(turn_span)
        assert turn_attributes["gen_ai.operation.name"] == "invoke_agent"
        assert turn_attributes["follower.turn.id"] == turn_stats.turn_id
        assert turn_attributes["follower.task.id"] == task_id
        assert turn_attributes["follower.agent.url"] == turns.endpoint
        assert turn_attributes["follower.events_stored"] == turn_stats.events_stored
        assert turn_attributes["follower.complete"] is True
        assert turn_attributes["follower.outcome"] == "returned"
        assert attributes(follower_span) == {
            "follower.via": via,
            "follower.task.id": task_id,
            "follower.turn.id": turn_stats.turn_id,
            "follower.agent.url": turn_attributes["follower.agent.url"],
            "follower.reads": turn_stats.reads,
            "follower.failed_reads": 0,
            "follower.events_stored": turn_stats.events_stored,
            "follower.bytes_stored": turn_stats.bytes_stored,
            "follower.complete": True,
            "follower.state": "completed",
            "follower.stop_reason": "ended",
            "follower.outcome": "returned",
        }
        assert turn_stats.events_stored > 0

    # Each long span showed it began with a short child, ended at once.
    starts = telemetry.finished("follower.start")
    long_spans = [step, *turn_spans, *follower_spans]
    assert sorted(parent_id(s) or 0 for s in starts) == sorted(span_id(s) for s in long_spans)
    for start in starts:
        [parent] = [s for s in long_spans if span_id(s) == parent_id(start)]
        assert start.end_time is not None
        assert parent.end_time is not None
        assert start.end_time <= parent.end_time


async def test_the_agent_receives_the_steps_trace_context(telemetry: Telemetry) -> None:
    agent = ReferenceAgent(script=SCRIPT, log_requests=True)
    await step_of_turns(agent, telemetry, TURNS)
    [step] = telemetry.finished("follower.step")
    assert step.context is not None
    by_id = {span_id(s): s for s in telemetry.finished()}
    requests = [r for r in agent.request_log() if r.path is not None]
    reads = [r for r in requests if r.path == "/ext/trajectory"]
    calls = [r for r in requests if r.path == "/"]  # the agent's JSON-RPC
    assert reads
    assert calls
    for request in reads + calls:
        assert request.traceparent is not None, request
        version, trace_id, parent, flags = request.traceparent.split("-")
        assert (version, int(trace_id, 16)) == ("00", step.context.trace_id)
        assert int(flags, 16) & 1  # sampled
        # A read's parent is its follower's span; the body's calls, its turn's.
        expected = "follower.follow" if request.path == "/ext/trajectory" else "invoke_agent"
        assert request.path in ("/ext/trajectory", "/")
        assert by_id[int(parent, 16)].name == expected
    # The card was fetched before the step began: no trace to join.
    card = [r for r in requests if r.path not in ("/ext/trajectory", "/")]
    assert card
    assert all(r.traceparent is None for r in card)


async def test_with_no_provider_nothing_is_traced_and_no_trace_context_is_sent() -> None:
    assert telemetry_for(None, None) is OFF  # the global providers were never set
    agent = ReferenceAgent(script=SCRIPT, log_requests=True)
    store = MemoryStore()
    with anyio.fail_after(30):
        async with reference_agent(agent) as a2a, live_turns(a2a, None, store) as turns:
            await run_turns(a2a, turns, TURNS[:1])
    assert turns.statistics().complete
    assert agent.request_log()
    assert all(r.traceparent is None for r in agent.request_log())


async def test_a_cancelled_step_ends_every_span_with_its_status(telemetry: Telemetry) -> None:
    agent = ReferenceAgent(script=TaskScript(events=100, interval_seconds=10.0))
    store = MemoryStore()
    with anyio.fail_after(30):
        async with reference_agent(agent) as a2a:
            with anyio.CancelScope() as step_scope:
                async with (
                    live_turns(a2a, telemetry, store) as turns,
                    turns.following("turn-1") as turn,
                ):
                    task = await a2a.send_message("hello")
                    turn.follow(task.id)
                    await agent.wait_reads(1)
                    step_scope.cancel()
                    await anyio.sleep_forever()
    assert step_scope.cancelled_caught
    [step] = telemetry.finished("follower.step")
    [turn_span] = telemetry.finished("invoke_agent")
    [follower_span] = telemetry.finished("follower.follow")
    for span in (step, turn_span):
        assert span.status.status_code is StatusCode.ERROR
        assert attributes(span)["follower.outcome"] == "stopped"
    assert attributes(follower_span)["follower.stop_reason"] == "cancelled"
    assert attributes(follower_span)["follower.complete"] is False
    assert attributes(turn_span)["follower.complete"] is False
    assert parent_id(follower_span) == span_id(turn_span)
    assert turns.statistics().followers_alive == 0


async def test_a_step_that_raises_keeps_its_exception_and_ends_its_spans(
    telemetry: Telemetry,
) -> None:
    agent = ReferenceAgent(script=TaskScript(events=100, interval_seconds=10.0))
    store = MemoryStore()
    with anyio.fail_after(30), pytest.raises(KeyError, match="the step's own"):
        async with (
            reference_agent(agent) as a2a,
            live_turns(a2a, telemetry, store) as turns,
            turns.following("turn-1") as turn,
        ):
            task = await a2a.send_message("hello")
            turn.follow(task.id)
            await agent.wait_reads(1)
            raise KeyError("the step's own")
    spans = telemetry.finished()
    assert {s.name for s in spans} == {
        "follower.step",
        "invoke_agent",
        "follower.follow",
        "follower.start",
    }
    [step] = telemetry.finished("follower.step")
    assert attributes(step)["follower.outcome"] == "raised"
    assert step.status.status_code is StatusCode.ERROR


async def test_a_run_of_failed_reads_is_two_span_events_not_one_a_read(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_follow, "backoff_fraction", lambda: 0.0)  # retried at the poll interval
    # A task that outlasts the run of failures by far, so they end before it does.
    script = TaskScript(events=3, interval_seconds=0.5)
    agent = ReferenceAgent(script=script, fault=Fault.unavailable(reads=5))
    await step_of_turns(agent, telemetry, TURNS[:1])
    [follower_span] = telemetry.finished("follower.follow")
    assert attributes(follower_span)["follower.failed_reads"] == 5
    events = [e for e in follower_span.events if e.name == "follower.failures"]
    assert [dict(e.attributes or {})["follower.failures.phase"] for e in events] == [
        "failing",
        "recovered",
    ]
    assert dict(events[0].attributes or {})["follower.failures.reason"] == "HTTP 503"
    assert dict(events[1].attributes or {})["follower.failures.failed"] == 5
