"""The key rules every store enforces, and the ids that become key segments.

Keys are at most :data:`MAX_KEY_BYTES` bytes of UTF-8 (S3's own limit), and each
segment at most :data:`MAX_SEGMENT_BYTES` (the longest file name on the common
filesystems), on every store: a step stored in memory or on S3 can be copied to
a folder, and back.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .._errors import InvalidKeyError

if TYPE_CHECKING:
    from .._errors import ErrorContext

# C0 and C1 control characters, and the backslash.
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")
MAX_KEY_BYTES = 1024
MAX_SEGMENT_BYTES = 255


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid object key, else raise :class:`InvalidKeyError`.

    Segments separated by ``/``; no empty, ``.`` or ``..`` segment; no leading
    ``/``; no backslash and no control character; at most :data:`MAX_KEY_BYTES`
    bytes of UTF-8, and :data:`MAX_SEGMENT_BYTES` a segment.
    """
    problem = _key_problem(key)
    if problem is not None:
        raise InvalidKeyError(f"invalid key {_short(key)}: {problem}", key=_named(key))
    return key


def check_segment(value: str, what: str, context: ErrorContext | None = None) -> str:
    """``value`` if it can be one key segment: a turn id, a task id in a default prefix.

    ``context`` names ``value`` in the error's attributes (``{"turn_id": value}``...).
    """
    problem = "one key segment, no '/'" if isinstance(value, str) and "/" in value else None
    problem = problem or _key_problem(value)
    if problem is not None:
        raise InvalidKeyError(f"invalid {what} {_short(value)}: {problem}", **(context or {}))
    return value


def check_turn_id(turn_id: str) -> str:
    """A turn id is one key segment: it names a folder and is named by ``next.json``.

    So it is at most :data:`MAX_SEGMENT_BYTES` bytes of UTF-8, like any segment.
    """
    return check_segment(turn_id, "turn id", {"turn_id": _named(turn_id)})


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is empty or a valid key followed by ``/``."""
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"invalid prefix {_short(prefix)}: prefixes are strings")
    if prefix == "":
        return prefix
    if not prefix.endswith("/"):
        raise InvalidKeyError(
            f"invalid prefix {_short(prefix)}: a prefix ends with '/' or is empty", key=prefix
        )
    problem = _key_problem(prefix[:-1])
    if problem is not None:
        raise InvalidKeyError(f"invalid prefix {_short(prefix)}: {problem}", key=prefix)
    return prefix


def check_list_prefix(prefix: str) -> str:
    """A prefix to list by: any start of a valid key (it need not end with ``/``)."""
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"invalid prefix {_short(prefix)}: prefixes are strings")
    problem = _text_problem(prefix)
    if problem is None and (prefix.startswith("/") or "//" in prefix):
        problem = "empty segment"
    if problem is None and any(s in (".", "..") for s in prefix.split("/")[:-1]):
        problem = "'.' or '..' segment"
    if problem is not None:
        raise InvalidKeyError(f"invalid prefix {_short(prefix)}: {problem}", key=prefix)
    return prefix


def _key_problem(key: object) -> str | None:
    """What makes ``key`` no valid key, or ``None``."""
    if not isinstance(key, str) or not key:
        return "keys are non-empty strings"
    problem = _text_problem(key)
    if problem is not None:
        return problem
    size = len(key.encode())
    if size > MAX_KEY_BYTES:
        return f"{size} bytes of UTF-8, over the {MAX_KEY_BYTES} a key may have"
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            return "empty, '.' or '..' segment"
        # A character is at most 4 bytes: most segments need no encoding to be measured.
        if len(segment) * 4 > MAX_SEGMENT_BYTES and len(segment.encode()) > MAX_SEGMENT_BYTES:
            return (
                f"a segment of {len(segment.encode())} bytes of UTF-8, over the "
                f"{MAX_SEGMENT_BYTES} a segment may have"
            )
    return None


def _text_problem(text: str) -> str | None:
    if _BAD_CHARS.search(text):
        return "backslash or control character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8"
    return None


def _named(value: object) -> str | None:
    """``value`` as an error's attribute: the string it is, or None for what is no string."""
    return value if isinstance(value, str) else None


def _short(value: object) -> str:
    """``repr(value)``, cut so that an error message stays one readable line."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"
