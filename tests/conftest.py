"""Shared test set-up: every async test runs on asyncio and on trio (anyio's plugin)."""

from __future__ import annotations

import pytest

# The shared fakes and the stored-layout oracle assert in plain functions; rewriting
# them shows the values a failed check compared, as in a test module.
pytest.register_assert_rewrite("tests.support")


@pytest.fixture(params=["asyncio", "trio"], scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> str:
    # Module-scoped so that Hypothesis tests can use it (a function-scoped fixture
    # would fail its health check).
    return str(request.param)
