"""Keeping request credentials out of what the library says: one scrub, and who knows the secrets.

An agent may echo what it was sent (a token quoted in a page's ``state``, in a
JSON-RPC error, in an error body), and a URL may carry a password. Every error
(:class:`~follower.FollowerError` scrubs its message and context as it is made)
and every record of the library's loggers goes through :func:`scrub`, which hides

- a password in any URL's user info (``scheme://user:***@host``), always;
- the credentials of the requests in flight: :func:`hiding` declares them for a
  block (a follower's lease of its client, an A2A call), from the values of
  the credential headers (:func:`secrets_of`) the caller gave, those of its
  client's own headers and ``auth=``, and the passwords of its URLs.

The secrets live in a context variable, so they follow the task that sends the
requests (and the worker threads it starts), and every message made in that
task while the block runs, wherever in the library it is made, is scrubbed.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    import httpx

REDACTED = "***"
# Shorter pieces are never hidden: "a" would blank every message, and a three-letter
# value is no secret worth it.
MIN_SECRET_CHARS = 4
# A header whose name says it carries a credential; its value is a secret.
_CREDENTIAL_NAMES = frozenset({"authorization", "proxy-authorization", "cookie"})
_CREDENTIAL_WORDS = ("auth", "token", "key", "secret", "password", "passwd", "session", "cookie")
# scheme://user:password@ -> keep the user, hide the password (as httpx's repr does).
_USER_INFO_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*):[^\s/?#@]*@")

Secrets = frozenset[str]
_hidden: ContextVar[Secrets] = ContextVar("follower_hidden_secrets", default=frozenset())


def is_credential_header(name: str) -> bool:
    """Whether a header's value is a credential: ``Authorization``, ``Cookie``, ``X-Api-Key``..."""
    lowered = name.lower()
    return lowered in _CREDENTIAL_NAMES or any(word in lowered for word in _CREDENTIAL_WORDS)


def secrets_of(
    *,
    client: httpx.AsyncClient | None = None,
    headers: Iterable[tuple[str, str]] | Mapping[str, str] = (),
    urls: Iterable[str | None] = (),
) -> Secrets:
    """The secrets requests made with these carry: to hide in whatever is said of them.

    The values of the credential headers among ``headers`` and the client's own
    headers, what the client's ``auth=`` sends (httpx's ``BasicAuth``,
    ``DigestAuth``), and the passwords of ``urls``' user info.
    """
    pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
    values: list[str] = []
    if client is not None:
        pairs += list(client.headers.items())
        values += _auth_values(client.auth)
    values += [value for name, value in pairs if is_credential_header(name)]
    values += [_basic(user_info) for user_info in map(_user_info, urls) if user_info]
    return frozenset(piece for value in values for piece in _pieces(value))


def _auth_values(auth: object) -> list[str]:
    # httpx's auth classes keep what they send: BasicAuth its header, DigestAuth the pair.
    values = []
    header = getattr(auth, "_auth_header", None)
    if isinstance(header, str):
        values.append(header)
    password = getattr(auth, "_password", None)
    if isinstance(password, bytes):
        values.append(password.decode("utf-8", "replace"))
    return values


def _user_info(url: str | None) -> tuple[str, str] | None:
    """A URL's user and password, when it has a password."""
    try:
        parts = urlsplit(url) if url else None
    except ValueError:
        return None
    if parts is None or not parts.password:
        return None
    return unquote(parts.username or ""), unquote(parts.password)


def _basic(user_info: tuple[str, str]) -> str:
    # What httpx sends for a URL's user info: its pieces are the password and this.
    user, password = user_info
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _pieces(value: str) -> Iterator[str]:
    """A value, its credentials after the scheme, and what a basic one decodes to."""
    value = value.strip()
    yield value
    for part in value.split(";"):  # a cookie's name=value pairs
        yield part.partition("=")[2].strip()
    scheme, _, credentials = value.partition(" ")
    credentials = credentials.strip()
    if not credentials:
        return
    yield credentials
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return
        yield decoded
        yield decoded.partition(":")[2]


@contextmanager
def hiding(secrets: Secrets) -> Iterator[None]:
    """Within the block (and the tasks and threads it starts), messages hide ``secrets`` too."""
    token = hide(secrets)
    try:
        yield
    finally:
        unhide(token)


def hide(secrets: Secrets) -> Token[Secrets] | None:
    """:func:`hiding` without a block: from now on in this context, until :func:`unhide`.

    For holders of a long-lived lease, which keep the token (one object) rather
    than a suspended generator. None when none of ``secrets`` is worth hiding.
    """
    worth = [s for s in secrets if len(s) >= MIN_SECRET_CHARS]
    if not worth:
        return None
    return _hidden.set(_hidden.get().union(worth))


def unhide(token: Token[Secrets] | None) -> None:
    """Stop hiding what :func:`hide` hid, in the same context."""
    if token is not None:
        _hidden.reset(token)


def scrub(text: str) -> str:
    """``text`` with URL passwords and the secrets of the requests in flight hidden.

    Every occurrence is hidden, overlapping ones as one, and so is a start of a
    secret that ends the text: a quoted value cut short must not leave most of a
    token behind.
    """
    if "@" in text:
        text = _USER_INFO_PASSWORD.sub(rf"\1:{REDACTED}@", text)
    secrets = _hidden.get()
    # Every occurrence, and every start of one that ends the text, begins with its head.
    if not any(secret[:MIN_SECRET_CHARS] in text for secret in secrets):
        return text
    spans = sorted(
        [(at, at + len(s)) for s in secrets for at in _occurrences(text, s)]
        + [(len(text) - n, len(text)) for n in (_cut_start(s, text) for s in secrets) if n]
    )
    if not spans:
        return text
    merged = [list(spans[0])]
    for start, end in spans[1:]:
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    parts, done = [], 0
    for start, end in merged:
        parts += [text[done:start], REDACTED]
        done = end
    parts.append(text[done:])
    return "".join(parts)


def quoted(value: object, limit: int) -> str:
    """``repr(value)`` scrubbed, then cut to ``limit`` characters, for a message.

    In that order: a cut inside a URL's password would part it from its ``@``,
    and the scrub would no longer see it as one.
    """
    return scrub(repr(value))[:limit]


def _occurrences(text: str, secret: str) -> Iterator[int]:
    at = text.find(secret)
    while at != -1:
        yield at
        at = text.find(secret, at + 1)


def _cut_start(secret: str, text: str) -> int:
    """How long a start of ``secret`` (MIN_SECRET_CHARS or more) ending ``text`` is, or 0."""
    head = secret[:MIN_SECRET_CHARS]
    at = text.find(head, max(len(text) - len(secret) + 1, 0))
    while at != -1:
        if secret.startswith(text[at:]):
            return len(text) - at
        at = text.find(head, at + 1)
    return 0


def scrub_value(value: Any) -> Any:
    """A context value (a task id, a URL, a key) scrubbed if it is a string, else as it is."""
    return scrub(value) if isinstance(value, str) else value


class _ScrubbedRecords(logging.Filter):
    """Scrubs a library record's message, its string fields, and its traceback's text."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, ()
        for name, value in list(vars(record).items()):
            if isinstance(value, str) and name not in ("msg", "message"):
                setattr(record, name, scrub(value))
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            # A handler's Formatter prints exc_text as it finds it: the chain's messages too.
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        return True


SCRUBBED_RECORDS = _ScrubbedRecords()
# Every logger of the library, and httpx's, whose request lines print a URL's password.
# (tests/format/test_redact.py checks that no logger named follower* is missing.)
SCRUBBED_LOGGERS = (
    "follower",
    "follower.a2a",
    "follower.chunks",
    "follower.follow",
    "follower.polls",
    "follower.step",
    "follower.stream",
    "follower.temporal",
    "follower.testing",
    "follower.turns",
    "httpx",
)
for _name in SCRUBBED_LOGGERS:
    logging.getLogger(_name).addFilter(SCRUBBED_RECORDS)
