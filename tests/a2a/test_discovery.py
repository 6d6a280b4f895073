"""Finding the live read in an agent card: which schemas offer it; never a URL off the origin."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from follower.lowlevel import live_trajectory_endpoint

URI = "urn:agentenv:trajectory/v1"
AGENT = "http://a/"
LIVE_SCHEMA = {
    "oneOf": [
        {"required": ["task_id"]},
        {"required": ["task_id", "after"], "optional": ["limit"]},
    ]
}


def card(
    schema: Any = LIVE_SCHEMA,
    *,
    endpoint: Any = "/ext/trajectory",
    method: Any = "POST",
    method_endpoint: str | None = None,
) -> dict[str, Any]:
    """An agent card with the trajectory extension, as in docs/protocol.md, "The agent card"."""
    get = {"method": method, "request": schema}
    if method_endpoint is not None:
        get["endpoint"] = method_endpoint
    params = {"endpoint": endpoint, "methods": {"get": get}}
    return {"capabilities": {"extensions": [{"uri": URI, "params": params}]}}


def card_with_extensions(extensions: Any) -> dict[str, Any]:
    return {"capabilities": {"extensions": extensions}}


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "follower" and r.levelno == logging.WARNING]


# --- which schemas offer the live read ------------------------------------------------


def test_live_example_card_gives_the_url() -> None:
    assert live_trajectory_endpoint(card(), AGENT) == "http://a/ext/trajectory"


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"required": ["task_id", "after"]}, id="both-required"),
        pytest.param(
            {"required": ["task_id"], "optional": ["after", "limit"]}, id="after-optional"
        ),
        pytest.param({"required": ["task_id"], "supported": ["after"]}, id="after-supported"),
        pytest.param({"optional": ["task_id", "after"]}, id="nothing-required"),
        pytest.param({"supported": ["task_id", "after", "limit"]}, id="all-supported"),
        pytest.param(
            {"required": ["task_id"], "oneOf": [{"optional": ["after"]}]}, id="top-and-branch"
        ),
        pytest.param(
            {"supported": ["after"], "oneOf": [{"required": ["task_id"]}]},
            id="top-declares-for-branch",
        ),
        pytest.param(
            {"oneOf": [{"required": ["cursor_token"]}, {"required": ["task_id", "after"]}]},
            id="second-branch",
        ),
    ],
)
def test_schema_accepting_task_id_and_after_gives_the_url(schema: dict[str, Any]) -> None:
    assert live_trajectory_endpoint(card(schema), AGENT) == "http://a/ext/trajectory"


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"required": ["cursor_token"], **LIVE_SCHEMA}, id="top-requires-cursor_token"),
        pytest.param({"required": ["task_id", "after", "limit"]}, id="requires-limit"),
        pytest.param(
            {"oneOf": [{"required": ["task_id"]}, {"required": ["task_id", "after", "limit"]}]},
            id="branch-requires-limit",
        ),
        pytest.param({"required": ["task_id"]}, id="no-after"),
        pytest.param({"required": ["task_id"], "optional": ["limit"]}, id="after-undeclared"),
        pytest.param({"oneOf": [{"required": ["task_id"]}]}, id="no-branch-declares-after"),
        pytest.param(
            {"oneOf": [{"required": ["task_id"]}, {"required": ["after"]}]},
            id="fields-split-across-branches",
        ),
        pytest.param({}, id="empty-schema"),
        pytest.param({"oneOf": []}, id="no-branches"),
        pytest.param({"oneOf": "task_id"}, id="oneOf-not-a-list"),
        pytest.param({"oneOf": [None, "task_id"]}, id="branches-not-objects"),
        pytest.param({"required": "task_id after"}, id="required-not-a-list"),
        pytest.param(None, id="no-schema"),
        pytest.param(["task_id", "after"], id="schema-a-list"),
    ],
)
def test_schema_refusing_the_cursor_read_gives_none(schema: Any) -> None:
    assert live_trajectory_endpoint(card(schema), AGENT) is None


@pytest.mark.parametrize(
    "agent_card",
    [
        pytest.param({}, id="no-capabilities"),
        pytest.param({"capabilities": {}}, id="no-extensions"),
        pytest.param(card_with_extensions([]), id="empty-extensions"),
        pytest.param(
            card_with_extensions([{"uri": "urn:agentenv:trajectory/v2", "params": {}}]),
            id="other-uri",
        ),
        pytest.param(
            card_with_extensions([{"uri": URI, "params": {"endpoint": "/ext/trajectory"}}]),
            id="no-methods",
        ),
        pytest.param(
            card_with_extensions(
                [{"uri": URI, "params": {"endpoint": "/ext/t", "methods": {"list": {}}}}]
            ),
            id="no-get",
        ),
        pytest.param(card(method="GET"), id="method-GET"),
        pytest.param(card(method=None), id="method-null"),
        pytest.param(card(endpoint=None), id="endpoint-null"),
        pytest.param(card(endpoint=""), id="endpoint-empty"),
        pytest.param(card(endpoint=42), id="endpoint-a-number"),
    ],
)
def test_card_without_a_live_read_gives_none(agent_card: dict[str, Any]) -> None:
    assert live_trajectory_endpoint(agent_card, AGENT) is None


def test_other_uri_is_skipped_for_the_trajectory_extension() -> None:
    other = {"uri": "urn:example:other", "params": {"endpoint": "/other"}}
    agent_card = card()
    agent_card["capabilities"]["extensions"].insert(0, other)
    assert live_trajectory_endpoint(agent_card, AGENT) == "http://a/ext/trajectory"


def test_method_endpoint_wins_over_params_endpoint() -> None:
    agent_card = card(endpoint="/ext/trajectory", method_endpoint="/ext/trajectory/read")
    assert live_trajectory_endpoint(agent_card, AGENT) == "http://a/ext/trajectory/read"


def test_method_endpoint_alone_is_enough() -> None:
    agent_card = card(endpoint=None, method_endpoint="/r")
    assert live_trajectory_endpoint(agent_card, AGENT) == "http://a/r"


# --- malformed cards ------------------------------------------------------------------


@pytest.mark.parametrize(
    "agent_card",
    [
        pytest.param({"capabilities": []}, id="capabilities-a-list"),
        pytest.param({"capabilities": "extensions"}, id="capabilities-a-string"),
        pytest.param({"capabilities": None}, id="capabilities-null"),
        pytest.param(card_with_extensions({"uri": URI}), id="extensions-an-object"),
        pytest.param(card_with_extensions(URI), id="extensions-a-string"),
        pytest.param(card_with_extensions(None), id="extensions-null"),
        pytest.param(card_with_extensions([None, 3, URI]), id="extensions-not-objects"),
        pytest.param(card_with_extensions([{"uri": URI}]), id="no-params"),
        pytest.param(card_with_extensions([{"uri": URI, "params": []}]), id="params-a-list"),
        pytest.param(card_with_extensions([{"uri": URI, "params": "x"}]), id="params-a-string"),
        pytest.param(card_with_extensions([{"uri": URI, "params": None}]), id="params-null"),
        pytest.param(
            card_with_extensions([{"uri": URI, "params": {"endpoint": "/e", "methods": []}}]),
            id="methods-a-list",
        ),
        pytest.param(
            card_with_extensions(
                [{"uri": URI, "params": {"endpoint": "/e", "methods": {"get": "POST"}}}]
            ),
            id="get-a-string",
        ),
        pytest.param([], id="card-a-list"),
        pytest.param(None, id="card-null"),
    ],
)
def test_malformed_card_gives_none(agent_card: Any) -> None:
    assert live_trajectory_endpoint(agent_card, AGENT) is None


# --- joining the endpoint to the agent's URL ------------------------------------------


@pytest.mark.parametrize(
    ("a2a_url", "endpoint", "expected"),
    [
        ("http://a/", "/ext/trajectory", "http://a/ext/trajectory"),
        ("http://a", "/ext/trajectory", "http://a/ext/trajectory"),
        ("https://a/", "/ext/t", "https://a/ext/t"),
        ("http://a:8080/", "/ext/t", "http://a:8080/ext/t"),
        ("http://a/agents/x", "/ext/t", "http://a/ext/t"),
        ("http://a/agents/x/", "/ext/t", "http://a/ext/t"),
        ("http://a/agents/x", "ext/t", "http://a/agents/x/ext/t"),
        ("http://a/agents/x/", "ext/t", "http://a/agents/x/ext/t"),
        ("http://a:8080/agents/x", "ext/t", "http://a:8080/agents/x/ext/t"),
        ("http://a", "ext/t", "http://a/ext/t"),
        ("http://a/", "ext/t", "http://a/ext/t"),
    ],
)
def test_endpoint_is_joined_to_the_agent_url(a2a_url: str, endpoint: str, expected: str) -> None:
    assert live_trajectory_endpoint(card(endpoint=endpoint), a2a_url) == expected


@pytest.mark.parametrize(
    ("a2a_url", "endpoint"),
    [
        ("http://a/", "http://a/ext/t"),
        ("http://a/agents/x", "http://a/ext/t"),
        ("http://a/", "http://a:80/ext/t"),
        ("http://a:80/", "http://a/ext/t"),
        ("https://a/", "https://a:443/ext/t"),
        ("https://a:443/", "https://a/ext/t"),
        ("http://a:8080/", "http://a:8080/ext/t"),
        ("http://A/", "http://a/ext/t"),
    ],
)
def test_absolute_endpoint_on_the_same_origin_is_accepted(
    a2a_url: str, endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="follower"):
        assert live_trajectory_endpoint(card(endpoint=endpoint), a2a_url) == endpoint
    assert warnings_logged(caplog) == []


OFF_ORIGIN = [
    pytest.param("//evil.example/x", id="scheme-relative"),
    pytest.param("@evil.example/x", id="at-host"),
    pytest.param(".evil.example/x", id="dot-host"),
    pytest.param(":8080/x", id="colon-port"),
    pytest.param("evil.example:8080/x", id="host-port-as-relative"),
    pytest.param("javascript:alert(1)", id="other-scheme"),
    pytest.param("http://other/x", id="other-host"),
    pytest.param("http://a.evil.example/x", id="host-prefix"),
    pytest.param("https://a/x", id="https-when-agent-is-http"),
    pytest.param("http://a:8080/x", id="other-port"),
    pytest.param("http://a:443/x", id="https-port-on-http"),
    pytest.param("http://user@a/x", id="userinfo"),
    pytest.param("http://user:pw@a/x", id="userinfo-password"),
    pytest.param("http://a@evil.example/x", id="agent-as-userinfo"),
    pytest.param("/ext\\t", id="backslash"),
    pytest.param("\\\\evil.example/x", id="double-backslash"),
    pytest.param("/\\evil.example/x", id="slash-backslash"),
    pytest.param("http:\\\\evil.example/x", id="backslash-scheme"),
    pytest.param("/ext t", id="space"),
    pytest.param(" /ext/t", id="leading-space"),
    pytest.param("/ext/t\n", id="newline"),
    pytest.param("/\t/evil.example/x", id="tab"),
    pytest.param("/ext/\r\nX: y", id="crlf"),
    pytest.param("/ext/\x00", id="nul"),
    pytest.param("/ext/\x1b[31m", id="escape"),
    pytest.param("/ext/\x7f", id="del"),
    pytest.param("/ext/../x", id="dotdot-root"),
    pytest.param("/ext/..", id="dotdot-last"),
    pytest.param("ext/../../x", id="dotdot-relative"),
    pytest.param("http://a/ext/../x", id="dotdot-absolute"),
]


def assert_no_endpoint_and_a_warning(endpoint: str, caplog: pytest.LogCaptureFixture) -> None:
    """A card naming ``endpoint`` offers no live read, and the follower logs why."""
    with caplog.at_level(logging.WARNING, logger="follower"):
        assert live_trajectory_endpoint(card(endpoint=endpoint), "http://a/agents/x") is None
    assert warnings_logged(caplog)


@pytest.mark.parametrize("endpoint", OFF_ORIGIN)
def test_off_origin_endpoint_gives_none_and_a_warning(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert_no_endpoint_and_a_warning(endpoint, caplog)


@pytest.mark.parametrize(
    "endpoint",
    [
        pytest.param("/ext/\x85", id="C1-NEL"),
        pytest.param("/ext/\x9b31m", id="C1-CSI"),
        pytest.param("/ext/\u00a0t", id="no-break-space"),
        pytest.param("/ext/\u2028t", id="line-separator"),
    ],
)
def test_non_ascii_control_or_space_in_endpoint_gives_none_and_a_warning(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert_no_endpoint_and_a_warning(endpoint, caplog)


@pytest.mark.parametrize(
    "endpoint",
    [
        pytest.param("http://[evil.example/x", id="unclosed-ipv6-bracket"),
        pytest.param("http://a]/x", id="stray-bracket"),
        pytest.param("http://a:99999/x", id="port-out-of-range"),
        pytest.param("http://a:port/x", id="port-not-a-number"),
        pytest.param("http://evil.example\uff03@a/x", id="nfkc-netloc"),
    ],
)
def test_unparseable_endpoint_gives_none_not_an_exception(endpoint: str) -> None:
    assert live_trajectory_endpoint(card(endpoint=endpoint), AGENT) is None


def test_root_endpoint_with_a_url_in_its_query_stays_on_the_origin() -> None:
    # "Starts with /" means "from the origin's root", whatever the query holds.
    agent_card = card(endpoint="/ext/t?from=http://x")
    assert live_trajectory_endpoint(agent_card, AGENT) == "http://a/ext/t?from=http://x"


@pytest.mark.parametrize(
    "a2a_url",
    ["ftp://a/", "a/agents/x", "http:///x", "http://user@a/", "http://a:99999/"],
)
def test_agent_url_without_a_usable_origin_gives_none(a2a_url: str) -> None:
    assert live_trajectory_endpoint(card(), a2a_url) is None


# --- property: whatever the card says, never a URL off the origin ---------------------


def on_agent_origin(url: str) -> bool:
    parts = urlsplit(url)
    return (
        parts.scheme == "http"
        and parts.hostname == "a"
        and parts.port in (None, 80)
        and not parts.username
        and ".." not in parts.path.split("/")
        and not any(c.isspace() or c == "\\" or ord(c) < 0x20 for c in url)
    )


endpoints = st.tuples(
    st.sampled_from(["", "/", "//", "http://", "https://", "http://a", "http://a:80", "ext/"]),
    st.text(alphabet="a/.:@[]\\ ?#%x8\t", max_size=12),
).map("".join)


@given(endpoint=endpoints | st.text())
@example(endpoint="http://[evil.example/x")
@example(endpoint="http://a@evil.example/x")
@example(endpoint="/ext/../..")
def test_any_endpoint_gives_none_or_a_url_on_the_origin(endpoint: str) -> None:
    url = live_trajectory_endpoint(card(endpoint=endpoint), "http://a/agents/x")
    assert url is None or on_agent_origin(url)
