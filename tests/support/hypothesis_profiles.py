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
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"
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


def property_settings(ci_examples: int, **overrides: object) -> settings:
    """The selected profile, running ``ci_examples`` examples times the profile's scale."""
    name = profile_name()
    return settings(
        settings.get_profile(name),
        max_examples=ci_examples * EXAMPLE_SCALE[name],
        **overrides,  # type: ignore[arg-type]
    )
