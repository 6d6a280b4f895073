"""The followers' metrics: the same counts as ``statistics()``, by way of following only.

In memory (the SDK's reader) on both backends, and through a real Prometheus
``/metrics`` endpoint on 127.0.0.1, scraped after a step.
"""

from __future__ import annotations

import re

import anyio
import httpx
import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import start_http_server

import follower._reading._follow as _follow
from follower import LiveTurnsStatistics, MemoryStore
from follower.testing import Fault, ReferenceAgent, TaskScript

from .steps import POLL, SCRIPT, Telemetry, live_turns, reference_agent, step_of_turns

pytestmark = pytest.mark.anyio

TURNS = ("turn-1", "turn-2", "turn-3")
COUNTERS = {
    "follower.reads": "reads",
    "follower.reads.failed": "failed_reads",
    "follower.pool_waits": "pool_waits",
    "follower.pages.stored": "pages_stored",
    "follower.events.stored": "events_stored",
    "follower.bytes.stored": "bytes_stored",
}


def by_via(telemetry: Telemetry, via: str) -> dict[str, float]:
    return {
        name: points.get((("follower.via", via),), 0) for name, points in telemetry.sums().items()
    }


def assert_agree(found: dict[str, float], stats: LiveTurnsStatistics) -> None:
    for metric, field in COUNTERS.items():
        assert found[metric] == getattr(stats, field), metric
    assert found["follower.followers.alive"] == stats.followers_alive


@pytest.mark.parametrize("via", ["cursor", "stream", "poll"])
async def test_the_metrics_equal_statistics_after_a_step(telemetry: Telemetry, via: str) -> None:
    turns, _ = await step_of_turns(ReferenceAgent(script=SCRIPT), telemetry, TURNS, via=via)
    stats = turns.statistics()
    found = by_via(telemetry, via)
    assert_agree(found, stats)
    assert stats.events_stored > 0
    assert found["follower.reconnects"] == 0
    # Every read timed: a cursor read or a poll each, a stream its head and its task after a gap.
    assert found["follower.read.duration"] == stats.reads
    # No task or turn id among the attributes: the way of following is the only one.
    for points in telemetry.sums().values():
        assert set(points) <= {(("follower.via", via),)}


async def test_a_streamed_turns_task_read_after_a_gap_is_timed_as_a_read(
    telemetry: Telemetry,
) -> None:
    # Followed only once the task has ended: no stream to open, then its GetTask.
    agent = ReferenceAgent(script=SCRIPT)
    with anyio.fail_after(30):
        async with (
            reference_agent(agent, via="stream") as a2a,
            live_turns(a2a, telemetry, MemoryStore()) as turns,
            turns.following("turn-1") as turn,
        ):
            task = await a2a.send_message("hello")
            done = await a2a.a2a.wait_for_task(task.id, poll_interval_seconds=POLL)
            turn.follow(task.id)
            turn.ended(done.state)
    stats = turns.statistics()
    assert stats.reads >= 2  # the refused subscription, and the task's GetTask
    assert stats.turns[0].complete
    assert by_via(telemetry, "stream")["follower.read.duration"] == stats.reads


async def test_the_metrics_equal_statistics_while_the_step_runs(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_follow, "backoff_fraction", lambda: 0.0)
    agent = ReferenceAgent(
        script=TaskScript(events=50, interval_seconds=0.2), fault=Fault.unavailable(reads=2)
    )
    with anyio.fail_after(30):
        async with (
            reference_agent(agent) as a2a,
            live_turns(a2a, telemetry, MemoryStore()) as turns,
            turns.following("turn-1") as turn,
        ):
            task = await a2a.send_message("hello")
            turn.follow(task.id)
            await agent.wait_reads(6)
            # Both read at one moment: no checkpoint between them.
            found, stats = by_via(telemetry, "cursor"), turns.statistics()
            await a2a.a2a.cancel_task(task.id)
    assert stats.failed_reads == 2
    assert stats.followers_alive == 1
    assert_agree(found, stats)
    after = by_via(telemetry, "cursor")
    assert_agree(after, turns.statistics())
    assert after["follower.followers.alive"] == 0


async def test_a_prometheus_scrape_shows_the_counters_after_a_step() -> None:
    # The reader registers with prometheus_client's registry, and its shutdown takes it off.
    reader = PrometheusMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    server, thread = start_http_server(0, addr="127.0.0.1")
    try:
        telemetry = Telemetry()
        telemetry.meter_provider.shutdown()
        telemetry.meter_provider = provider
        turns, _ = await step_of_turns(ReferenceAgent(script=SCRIPT), telemetry, TURNS)
        port = server.server_port
        async with httpx.AsyncClient() as client:
            scraped = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        provider.shutdown()
        telemetry.tracer_provider.shutdown()
    stats = turns.statistics()

    def value(name: str) -> float:
        # The exporter adds the scope's labels after ours.
        pattern = rf'^{name}\{{follower_via="cursor"[^}}]*\}} (\S+)$'
        found = re.search(pattern, scraped, re.MULTILINE)
        assert found is not None, f"{name} not in:\n{scraped}"
        return float(found.group(1))

    assert value("follower_reads_total") == stats.reads
    assert value("follower_events_stored_total") == stats.events_stored
    assert value("follower_pages_stored_total") == stats.pages_stored
    assert value("follower_bytes_stored_bytes_total") == stats.bytes_stored
    assert value("follower_followers_alive") == 0
    assert value("follower_read_duration_seconds_count") == stats.reads
