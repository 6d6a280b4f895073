"""The one scrub of credentials (``follower._redact``): what it hides, from whom, and where it runs.

docs/security.md ("Credentials"). The echoing agents of tests/hostile/test_echoed_secrets.py
show it end to end; these pin the rules: which values are secrets, how a secret cut
short is still hidden, that the secrets follow the task (and its worker threads) and
no further, that every logger of the library scrubs, and that a URL's user info is
named as the reason a card's endpoint is ignored.
"""

from __future__ import annotations

import importlib
import logging
import pickle
import pkgutil

import anyio
import anyio.to_thread
import httpx
import pytest

import follower
from follower import (
    A2AProtocolError,
    AgentUnavailableError,
    InvalidArgumentError,
    LiveTurns,
    MalformedPageError,
    MalformedPageReason,
    MemoryStore,
)
from follower._errors import add_context
from follower._format._discovery import live_trajectory_endpoint
from follower._redact import (
    REDACTED,
    SCRUBBED_RECORDS,
    hiding,
    is_credential_header,
    scrub,
    secrets_of,
)
from follower.testing import ReferenceAgent

TOKEN = "tok-7f3a9c1e5b2d"


# --- what is a secret -------------------------------------------------------------------


def test_the_values_of_credential_headers_are_secrets_and_others_are_not() -> None:
    secrets = secrets_of(
        headers=[
            ("Authorization", f"Bearer {TOKEN}"),
            ("X-Api-Key", "key-0123"),
            ("Cookie", "session=cookie-4567; theme=dark"),
            ("X-Team", "platform"),
        ]
    )
    assert {f"Bearer {TOKEN}", TOKEN, "key-0123", "cookie-4567"} <= secrets
    assert "platform" not in secrets
    assert is_credential_header("proxy-authorization")
    assert not is_credential_header("accept")


def test_a_clients_headers_and_auth_and_a_urls_password_are_secrets() -> None:
    basic = httpx.AsyncClient(auth=httpx.BasicAuth("robot", "pw-basic-1"))
    digest = httpx.AsyncClient(auth=httpx.DigestAuth("robot", "pw-digest-2"))
    headed = httpx.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
    assert {"pw-basic-1", "robot:pw-basic-1"} <= secrets_of(client=basic)
    assert "pw-digest-2" in secrets_of(client=digest)
    assert TOKEN in secrets_of(client=headed)
    # httpx's defaults (User-Agent, Accept...) are no secrets.
    assert not secrets_of(client=httpx.AsyncClient())
    from_url = secrets_of(urls=["http://robot:pw%2Durl-3@agent.test/", None, "http://[::1"])
    assert {"pw-url-3", "robot:pw-url-3"} <= from_url


# --- how a text is scrubbed -------------------------------------------------------------


def test_a_urls_password_is_always_hidden_and_its_user_kept() -> None:
    text = "at http://robot:pw-9@agent.test:8080/a2a and 'https://u:p@h/x' and http://h:80/@x"
    assert scrub(text) == (
        "at http://robot:***@agent.test:8080/a2a and 'https://u:***@h/x' and http://h:80/@x"
    )


def test_secrets_are_hidden_only_while_their_block_runs() -> None:
    text = f"the agent said: bad token Bearer {TOKEN}; Bearer {TOKEN}"
    assert scrub(text) == text
    with hiding(secrets_of(headers=[("Authorization", f"Bearer {TOKEN}")])):
        assert scrub(text) == f"the agent said: bad token {REDACTED}; {REDACTED}"
        with hiding(frozenset({"other-secret"})):
            assert scrub(f"{TOKEN} other-secret") == f"{REDACTED} {REDACTED}"
        assert scrub("other-secret") == "other-secret"
    assert scrub(text) == text


def test_overlapping_secrets_are_hidden_as_one() -> None:
    with hiding(frozenset({"abcd1234", "1234efgh"})):
        assert scrub("x abcd1234efgh y") == f"x {REDACTED} y"


def test_a_secret_cut_short_at_the_end_is_hidden_but_a_few_letters_are_not() -> None:
    with hiding(frozenset({TOKEN})):
        for cut in range(4, len(TOKEN)):
            assert scrub("state 'x" + TOKEN[:cut]) == f"state 'x{REDACTED}"
        assert scrub("state 'tok") == "state 'tok"
    with hiding(frozenset({"abc"})):  # too short to be worth hiding
        assert scrub("abc") == "abc"


# --- errors ------------------------------------------------------------------------------


def test_an_error_made_while_secrets_are_hidden_hides_them_everywhere() -> None:
    with hiding(frozenset({TOKEN})):
        exc = A2AProtocolError(
            f"failed: {TOKEN}", code=f"E-{TOKEN}", url=f"http://robot:{TOKEN}@h/", task_id=TOKEN
        )
        add_context(exc, key=f"k/{TOKEN}")
    again = pickle.loads(pickle.dumps(exc))
    for shown in (str(exc), repr(exc), repr(vars(exc)), str(again), repr(vars(again))):
        assert TOKEN not in shown
    assert str(exc) == f"failed: {REDACTED}"
    assert exc.url == f"http://robot:{REDACTED}@h/"
    assert exc.code == f"E-{REDACTED}"
    assert A2AProtocolError("x", code=-32000).code == -32000  # a JSON-RPC code stays a number


def test_an_error_made_outside_hides_a_urls_password_only() -> None:
    exc = AgentUnavailableError(f"read at http://robot:pw-9@h/ failed: {TOKEN}")
    assert str(exc) == f"read at http://robot:{REDACTED}@h/ failed: {TOKEN}"


@pytest.mark.anyio
async def test_the_secrets_follow_the_task_into_its_threads_and_tasks(anyio_backend: str) -> None:
    # A large page is decoded in a worker thread, a follower runs in a task of its own.
    def refuse() -> Exception:
        return MalformedPageError(
            f"unknown state {TOKEN!r}", reason=MalformedPageReason.UNKNOWN_STATE
        )

    made: list[Exception] = []

    async def in_a_task() -> None:
        made.append(refuse())

    with hiding(frozenset({TOKEN})):
        in_a_thread = await anyio.to_thread.run_sync(refuse)
        async with anyio.create_task_group() as tg:
            tg.start_soon(in_a_task)
    assert TOKEN not in str(in_a_thread)
    assert TOKEN not in str(made[0])
    assert TOKEN in str(refuse())  # and no further than the block


# --- log records -------------------------------------------------------------------------


def test_every_logger_of_the_library_scrubs_its_records() -> None:
    for module in pkgutil.walk_packages(follower.__path__, "follower."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] == "follower"]
    assert "follower.turns" in names
    for name in [*names, "httpx"]:
        assert SCRUBBED_RECORDS in logging.getLogger(name).filters, name


def test_a_scrubbed_record_hides_its_message_fields_and_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    logger = logging.getLogger("follower.turns")
    with hiding(frozenset({TOKEN})):
        try:
            raise ValueError(f"the agent said {TOKEN}")  # a cause made before any scrub
        except ValueError:
            logger.exception("read of %s failed", TOKEN, extra={"task_id": TOKEN})
    [record] = caplog.records
    assert TOKEN not in logging.Formatter("%(message)s %(task_id)s").format(record)
    assert record.exc_text is not None
    assert TOKEN not in record.exc_text
    assert "ValueError: the agent said ***" in record.exc_text


# --- the card: the real reason an endpoint is ignored ----------------------------------


def test_an_agent_url_with_user_info_is_why_its_endpoint_is_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    card = ReferenceAgent().card("http://agent.test/")
    assert (
        live_trajectory_endpoint(card, "http://agent.test/") == "http://agent.test/ext/trajectory"
    )
    assert live_trajectory_endpoint(card, f"http://robot:{TOKEN}@agent.test/") is None
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "user info" in warning
    assert "origin" not in warning
    assert TOKEN not in warning


@pytest.mark.parametrize("endpoint", ["http://user:{}@host/a b", "http://user:{}@host:no-port/"])
def test_a_long_password_in_a_refused_endpoint_is_hidden_before_it_is_cut(endpoint: str) -> None:
    # A token of 160 characters: a message that cut the URL before scrubbing it would
    # part the password from its "@" and show most of it.
    password = "S3CRETpw" * 20
    with pytest.raises(InvalidArgumentError) as caught:
        LiveTurns(endpoint.format(password), MemoryStore(), "p/", poll_interval_seconds=1)
    assert "user:***@" in str(caught.value)
    assert password[:8] not in str(caught.value)
