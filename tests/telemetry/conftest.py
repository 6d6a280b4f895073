from __future__ import annotations

from collections.abc import Iterator

import pytest

from .steps import Telemetry


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    made = Telemetry()
    yield made
    made.shutdown()
