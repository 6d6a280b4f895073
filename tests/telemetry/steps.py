"""A step of turns against the reference agent, in-process; the SDK reads back what it emits."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import attrs
import httpx
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from follower import A2AAgent, A2ATask, LiveTurns, MemoryStore, connect_agent
from follower.testing import ReferenceAgent, TaskScript

PREFIX = "steps/s1/"
AGENT_URL = "http://agent.test/"
# Quick in real time: the in-process agent runs on the test's own clock.
SCRIPT = TaskScript(events=3, interval_seconds=0.01)
POLL = 0.02


@attrs.define
class Telemetry:
    """A tracer provider and a meter provider of the test's own (never the global ones)."""

    spans: InMemorySpanExporter = attrs.field(factory=InMemorySpanExporter)
    reader: InMemoryMetricReader = attrs.field(factory=InMemoryMetricReader)
    tracer_provider: TracerProvider = attrs.field(init=False)
    meter_provider: MeterProvider = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if name is None or s.name == name]

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    def sums(self) -> dict[str, dict[tuple[tuple[str, object], ...], float]]:
        """Each metric's sum points (counters, up-down counters), by their attributes."""
        found: dict[str, dict[tuple[tuple[str, object], ...], float]] = {}
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = point.count  # a histogram: how many were recorded
                        key = tuple(sorted((point.attributes or {}).items()))
                        found.setdefault(metric.name, {})[key] = value
        return found


@attrs.frozen
class Connected:
    """The agent, and the in-process client its trajectory is read with."""

    a2a: A2AAgent
    client: httpx.AsyncClient

    async def send_message(self, text: str) -> A2ATask:
        return await self.a2a.send_message(text)


@asynccontextmanager
async def reference_agent(
    agent: ReferenceAgent, *, via: str = "cursor"
) -> AsyncIterator[Connected]:
    async with agent.client() as client, connect_agent(AGENT_URL, client=client, via=via) as a2a:
        yield Connected(a2a, client)


async def run_turns(
    agent: Connected,
    turns: LiveTurns,
    turn_ids: Sequence[str],
) -> list[str]:
    """Each turn: send a message, follow its task, wait for it, report its state."""
    task_ids = []
    for turn_id in turn_ids:
        async with turns.following(turn_id) as turn:
            task = await agent.send_message(f"hello from {turn_id}")
            turn.follow(task.id)
            done = await agent.a2a.wait_for_task(task.id, poll_interval_seconds=POLL)
            turn.ended(done.state)
            task_ids.append(task.id)
    return task_ids


def live_turns(agent: Connected, telemetry: Telemetry | None, store: MemoryStore) -> LiveTurns:
    assert agent.a2a.task_source is not None
    return LiveTurns(
        agent.a2a.task_source,
        store,
        PREFIX,
        poll_interval_seconds=POLL,
        drain_seconds=5.0,
        client=agent.client,
        tracer_provider=telemetry.tracer_provider if telemetry is not None else None,
        meter_provider=telemetry.meter_provider if telemetry is not None else None,
    )


async def step_of_turns(
    agent: ReferenceAgent, telemetry: Telemetry, turn_ids: Sequence[str], *, via: str = "cursor"
) -> tuple[LiveTurns, list[str]]:
    """A whole step, bounded: its turns, in order, then its exit."""
    store = MemoryStore()
    with anyio.fail_after(30):
        async with (
            reference_agent(agent, via=via) as a2a,
            live_turns(a2a, telemetry, store) as turns,
        ):
            task_ids = await run_turns(a2a, turns, turn_ids)
    return turns, task_ids
