"""Hypothesis profiles of the property tests, chosen by ``HYPOTHESIS_PROFILE`` (default ``ci``).

- ``ci``: a fixed budget per test, sized so that every property test together
  takes about 90 s per Python per backend. Derandomized: the examples depend only
  on the code, so a CI run is reproducible by running it again, and a red build
  always means the change under test, never an unlucky draw. ``print_blob`` also
  prints a ``@reproduce_failure`` line for each failure.
- ``stress``: ten times the examples, random (new ones every run), examples
  saved in the local database so a failure is replayed first on the next run;
  a failure prints its ``@reproduce_failure`` blob, which replays it anywhere.

Neither profile is loaded globally (other test modules keep Hypothesis's
defaults): the property tests take :func:`property_settings` explicitly.

A budget may be *shared* across the Pythons that ``make test`` runs side by side:
tools/test gives each run ``FOLLOWER_EXAMPLE_SHARE=k/n``, and a shared test then
runs 1/n of its CI examples from a seed of its own (:func:`share_seed`), so the n
runs together try as many examples as one full run, each run drawing its own.
Unset (a run of pytest by hand, one Python), a shared test runs its whole
budget from its usual derandomized seed; ``stress`` never shares.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, seed, settings

PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"
SHARE_VARIABLE = "FOLLOWER_EXAMPLE_SHARE"
# How many examples each profile runs, as a multiple of a test's CI budget.
EXAMPLE_SCALE = {"ci": 1, "stress": 10}

_COMMON = {
    "deadline": None,  # examples run whole event loops; their time varies with load
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}

# On top of Hypothesis's built-in "ci" profile (derandomized, no database), which
# this only extends, so that other modules under CI=1 run as before.
settings.register_profile(
    "ci", settings.get_profile("ci"), derandomize=True, database=None, **_COMMON
)
settings.register_profile("stress", derandomize=False, **_COMMON)


def profile_name() -> str:
    name = os.environ.get(PROFILE_VARIABLE, "ci")
    if name not in EXAMPLE_SCALE:
        raise ValueError(f"{PROFILE_VARIABLE}={name!r}: the profiles are {sorted(EXAMPLE_SCALE)}")
    return name


def example_share() -> tuple[int, int]:
    """This run's share of a shared budget, ``(k, n)``: the k-th of n; ``(1, 1)`` unshared."""
    raw = os.environ.get(SHARE_VARIABLE, "1/1")
    k, _, n = raw.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"{SHARE_VARIABLE}={raw!r}: say k/n, the k-th of n runs (1 <= k <= n)")
    if profile_name() != "ci":
        return (1, 1)
    return (int(k), int(n))


def property_settings(ci_examples: int, *, shared: bool = False, **overrides: object) -> settings:
    """The selected profile, running ``ci_examples`` examples times the profile's scale.

    ``shared``: this run's share of them only (see the module's docstring); the test
    takes :func:`share_seed` too, or every run would try the same examples.
    """
    name = profile_name()
    _, runs = example_share() if shared else (1, 1)
    return settings(
        settings.get_profile(name),
        max_examples=math.ceil(ci_examples * EXAMPLE_SCALE[name] / runs),
        **overrides,  # type: ignore[arg-type]
    )


_Test = TypeVar("_Test", bound=Callable[..., Any])


def share_seed(test: _Test) -> _Test:
    """A seed of this run's own for a shared test (a ``@given`` test or a state machine).

    Fixed per share, so a run is replayed by running it again with the same
    ``FOLLOWER_EXAMPLE_SHARE``; unshared, the test keeps its derandomized seed.
    """
    k, n = example_share()
    if n == 1:
        return test
    return seed(k)(test)
