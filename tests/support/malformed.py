"""``pytest.raises`` for a malformed page of one reason."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from follower import MalformedPageError, MalformedPageReason


@contextmanager
def raises_malformed(
    *reasons: MalformedPageReason, match: str | None = None
) -> Iterator[pytest.ExceptionInfo[MalformedPageError]]:
    """Expect a :class:`MalformedPageError` whose ``reason`` is one of ``reasons``."""
    with pytest.raises(MalformedPageError, match=match) as info:
        yield info
    assert info.value.reason in reasons, f"{info.value.reason!r} is not one of {reasons}"
