"""The key rules every store enforces."""

from __future__ import annotations

import re

from ._errors import InvalidKeyError

# C0 and C1 control characters, and the backslash.
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid object key, else raise :class:`InvalidKeyError`.

    Segments separated by ``/``; no empty, ``.`` or ``..`` segment; no leading
    ``/``; no backslash and no control character.
    """
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"invalid key {key!r}: keys are non-empty strings")
    _check_text(key, "key")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidKeyError(f"invalid key {key!r}: empty, '.' or '..' segment")
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is empty or a valid key followed by ``/``."""
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"invalid prefix {prefix!r}: prefixes are strings")
    if prefix == "":
        return prefix
    if not prefix.endswith("/"):
        raise InvalidKeyError(f"invalid prefix {prefix!r}: a prefix ends with '/' or is empty")
    check_key(prefix[:-1])
    return prefix


def check_list_prefix(prefix: str) -> str:
    """A prefix to list by: any start of a valid key (it need not end with ``/``)."""
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"invalid prefix {prefix!r}: prefixes are strings")
    _check_text(prefix, "prefix")
    if prefix.startswith("/") or "//" in prefix:
        raise InvalidKeyError(f"invalid prefix {prefix!r}: empty segment")
    for segment in prefix.split("/")[:-1]:
        if segment in (".", ".."):
            raise InvalidKeyError(f"invalid prefix {prefix!r}: '.' or '..' segment")
    return prefix


def check_turn_id(turn_id: str) -> str:
    """A turn id is one key segment: it names a folder and is named by ``next.json``."""
    if not isinstance(turn_id, str) or "/" in turn_id:
        raise InvalidKeyError(f"invalid turn id {turn_id!r}: one key segment, no '/'")
    return check_key(turn_id)


def _check_text(text: str, what: str) -> None:
    if _BAD_CHARS.search(text):
        raise InvalidKeyError(f"invalid {what} {text!r}: backslash or control character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidKeyError(f"invalid {what} {text!r}: not valid UTF-8") from None
