"""Finding an agent's live trajectory read in its agent card (sync, no I/O)."""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ._wire import TRAJECTORY_EXTENSION_URI

logger = logging.getLogger("follower")

# The body of a cursor read: what a schema must accept for live reads.
_CURSOR_READ_FIELDS = frozenset({"task_id", "after"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# A relative endpoint must start like a path segment: '@', '.', ':' and friends
# could turn "origin + endpoint" into another host in a naive join.
_RELATIVE_ENDPOINT = re.compile(r"[A-Za-z0-9_~-]")
_ABSOLUTE_ENDPOINT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def live_trajectory_endpoint(card: Mapping[str, Any], a2a_url: str) -> str | None:
    """Return the URL of the agent's live cursor read, or ``None``.

    ``None`` when the card has no trajectory extension, when its ``get`` method
    does not accept a ``{task_id, after}`` body by POST, when the endpoint
    would leave the agent's origin, or when ``a2a_url`` carries user info (the
    last two logged as a warning naming which). An endpoint starting
    with ``/`` is taken from the origin's root; any other relative endpoint
    from ``a2a_url``'s path.
    """
    params = _extension_params(card)
    if params is None:
        return None
    methods = params.get("methods")
    get = methods.get("get") if isinstance(methods, Mapping) else None
    if not isinstance(get, Mapping):
        return None
    method = get.get("method")
    # Only a string is compared: str() of any JSON value could recurse deep into it.
    if not isinstance(method, str) or method.upper() != "POST":
        return None
    if not accepts_body(get.get("request"), _CURSOR_READ_FIELDS):
        return None
    endpoint = get.get("endpoint", params.get("endpoint"))
    if not isinstance(endpoint, str) or not endpoint:
        return None
    if has_user_info(a2a_url):
        # Not "off the origin": the endpoint would carry the user info into every read's
        # log line and into task.json, so the library never builds one.
        logger.warning(
            "ignoring trajectory endpoint %r: the agent's URL carries credentials in its "
            "user info, which the library never puts in a trajectory endpoint; give them "
            "as headers= (an Authorization header) instead",
            endpoint,
        )
        return None
    url = _resolve_on_origin(endpoint, a2a_url)
    if url is None:
        logger.warning(
            "ignoring trajectory endpoint %r: it is not on the agent's origin %r",
            endpoint,
            a2a_url,
        )
    return url


def _extension_params(card: Mapping[str, Any]) -> Mapping[str, Any] | None:
    capabilities = card.get("capabilities") if isinstance(card, Mapping) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    if not isinstance(extensions, list):
        return None
    for extension in extensions:
        if isinstance(extension, Mapping) and extension.get("uri") == TRAJECTORY_EXTENSION_URI:
            params = extension.get("params")
            return params if isinstance(params, Mapping) else None
    return None


def accepts_body(schema: Any, fields: frozenset[str]) -> bool:
    """Whether a request schema accepts a body made of exactly ``fields``.

    Some ``oneOf`` branch (or the top level, when there is none) must require
    nothing that is not sent and declare everything that is; the top level's
    lists apply to every branch. ``supported`` fields count as declared.
    """
    if not isinstance(schema, Mapping):
        return False
    top_required, top_declared = _field_lists(schema)
    branches = schema.get("oneOf")
    if branches is None:
        candidates: list[tuple[set[str], set[str]]] = [(set(), set())]
    elif isinstance(branches, list):
        candidates = [_field_lists(b) for b in branches if isinstance(b, Mapping)]
    else:
        return False
    for branch_required, branch_declared in candidates:
        required = top_required | branch_required
        declared = top_declared | branch_declared | required
        if required <= fields <= declared:
            return True
    return False


def _field_lists(schema: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    def names(key: str) -> set[str]:
        value = schema.get(key)
        if not isinstance(value, list):
            return set()
        return {v for v in value if isinstance(v, str)}

    required = names("required")
    return required, required | names("optional") | names("supported")


def _origin(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
        hostname = parts.hostname
    except ValueError:  # a bad port, an unbalanced IPv6 bracket, an NFKC-unsafe host...
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not hostname or parts.username or parts.password:
        return None
    return scheme, hostname.lower(), port or _DEFAULT_PORTS[scheme]


def has_user_info(url: str) -> bool:
    """Whether an http(s) URL names a user (and maybe a password) before its host."""
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return False


def same_origin(url: str, other: str) -> bool:
    """Whether two http(s) URLs share scheme, host and port (no user info allowed)."""
    origin = _origin(url)
    return origin is not None and origin == _origin(other)


def _resolve_on_origin(endpoint: str, a2a_url: str) -> str | None:
    origin = _origin(a2a_url)
    if origin is None or not printable(endpoint):
        return None
    base = urlsplit(a2a_url)
    root = f"{base.scheme}://{base.netloc}"
    if endpoint.startswith("/") and not endpoint.startswith("//"):
        url = root + endpoint
    elif _RELATIVE_ENDPOINT.match(endpoint) and ":" not in endpoint.split("/", 1)[0]:
        url = root + base.path.rstrip("/") + "/" + endpoint
    elif _ABSOLUTE_ENDPOINT.match(endpoint):
        url = endpoint
    else:
        return None
    try:
        path = urlsplit(url).path
    except ValueError:  # e.g. an unbalanced IPv6 bracket
        return None
    if any(segment in (".", "..") for segment in path.split("/")):
        return None
    return url if _origin(url) == origin else None


def printable(text: str) -> bool:
    """No whitespace, backslash or control/format character, ASCII or not."""
    if text.isascii():
        # In ASCII the only such characters are the controls (which isprintable() refuses,
        # the whitespace among them too), the space and the backslash: checked in C, as
        # every turn's endpoint is when it starts.
        return text.isprintable() and " " not in text and "\\" not in text
    return not any(
        c == "\\" or c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Zs")
        for c in text
    )
