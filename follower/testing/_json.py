"""JSON as the reference agent writes it, and the integer check its readers share."""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON, the bytes the agent sends."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def is_int(value: Any) -> bool:
    """Whether a decoded JSON value is an integer (``true`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)
