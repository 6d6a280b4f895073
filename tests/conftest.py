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


def pytest_report_header() -> str:
    # Said in every log, so that a run's property tests can be replayed with its share.
    from .support.hypothesis_profiles import SHARE_VARIABLE, example_share, profile_name

    k, n = example_share()
    share = f"a {k}/{n} share ({SHARE_VARIABLE})" if n > 1 else "whole"
    return f"property tests: the {profile_name()} profile, shared budgets {share}"
