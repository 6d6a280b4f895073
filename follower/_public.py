"""The public face of a package: its re-exported names under its own path."""

from __future__ import annotations

from typing import Any


def name_as_public(package: str, namespace: dict[str, Any], names: list[str]) -> None:
    """Give each of ``names`` defined in a private module of ``package`` the package's path.

    Reprs, tracebacks, pickles and docs then say ``follower.LiveTurns``, not
    ``follower._step.LiveTurns`` (trio does the same for its own names).
    """
    for name in names:
        value = namespace[name]
        if getattr(value, "__module__", "").startswith(package + "._"):
            value.__module__ = package
