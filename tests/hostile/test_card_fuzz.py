"""Fuzzing the agent card: ``live_trajectory_endpoint`` never leads off the agent's origin.

The card is the agent's own word, and a hostile or careless agent can name any
endpoint. Whatever it names, the URL returned (if any) must be one that the
HTTP client sends to the agent's own scheme, host and port: the oracle is
``httpx.URL``, the parser of the client that makes the reads, not the parser
the code under test uses. Endpoints are built from the parts that confuse URL
parsers (user info, IDN and punycode hosts, IPv6 literals and zones, default
ports written out, ``//``, backslashes, percent-encoding, relative forms) on
agents of each kind of origin; and any JSON at all, as a card or anywhere in one,
gives a URL or ``None``, never an exception.

The budget follows tests/support/hypothesis_profiles.py: ``make test`` runs the
CI profile, ``HYPOTHESIS_PROFILE=stress`` ten times the examples, new ones each
run. The last test breaks the origin check on purpose and shows that the fuzz
finds the escape.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import follower._format._discovery
from follower.lowlevel import live_trajectory_endpoint

from ..support.hypothesis_profiles import property_settings

URI = "urn:agentenv:trajectory/v1"
LIVE_SCHEMA = {"oneOf": [{"required": ["task_id"]}, {"required": ["task_id", "after"]}]}

# Agents of every kind of origin: (the A2A URL, its host as written, another spelling).
AGENTS = [
    ("http://a/agents/x", "a", "A"),
    ("https://agent.example:8443/a2a", "agent.example", "AGENT.example"),
    ("http://[::1]:8080/a2a", "[::1]", "[0:0:0:0:0:0:0:1]"),
    ("http://[fe80::1%25eth0]/", "[fe80::1%25eth0]", "[FE80::1%25eth0]"),
    ("http://b\u00fccher.example/", "b\u00fccher.example", "xn--bcher-kva.example"),
    ("http://xn--bcher-kva.example/a/", "xn--bcher-kva.example", "B\u00dcCHER.example"),
    ("http://127.0.0.1:80/", "127.0.0.1", "127.1"),
]
EVIL_HOSTS = [
    "evil.example",
    "a.evil.example",
    "[fe80::1%25eth1]",
    "[::2]",
    "xn--evl-5na.example",
    "ev\u0131l.example",
    "a\u3002evil.example",
    "%65vil.example",
    "127.0.0.2",
    "0x7f.0.0.1",
    "localhost",
]
SCHEMES = [
    "http://",
    "https://",
    "HTTP://",
    "//",
    "///",
    "http:/",
    "http:",
    "http:\\\\",
    "\\\\",
    "",
]
USERINFO = ["", "user@", "user:pw@", "@", "{agent}@", "{agent}:80@", "%40@", "evil.example@"]
PORTS = ["", ":", ":80", ":443", ":8080", ":8443", ":080", ":+80", ":0", ":65536", ": 80"]
PATHS = [
    "",
    "/",
    "/ext/t",
    "/../x",
    "/%2e%2e/x",
    "/%2F%2Fevil.example/x",
    "?next=http://evil.example/",
    "#@evil.example/",
    "\\evil.example",
    "/ext/t\r\nHost: evil.example",
]
JUNK = st.text(alphabet="@:/\\%#?[]. \t5", max_size=3)


@st.composite
def hostile_endpoints(draw: st.DrawFn, agent_host: str, other_spelling: str) -> str:
    """An endpoint built from URL parts, the agent's host among evil ones, with junk inserted."""
    host = draw(st.sampled_from([agent_host, other_spelling, agent_host + ".", *EVIL_HOSTS]))
    endpoint = (
        draw(st.sampled_from(SCHEMES))
        + draw(st.sampled_from(USERINFO)).replace("{agent}", agent_host)
        + host
        + draw(st.sampled_from(PORTS))
        + draw(st.sampled_from(PATHS))
    )
    if draw(st.booleans()):  # relative forms: a path, with or without its leading slash
        endpoint = draw(st.sampled_from(["", "/", "./", "ext/", "%2F"])) + draw(
            st.sampled_from(PATHS)
        )
    if draw(st.booleans()):
        at = draw(st.integers(0, len(endpoint)))
        endpoint = endpoint[:at] + draw(JUNK) + endpoint[at:]
    return endpoint


def agent_card(endpoint: Any, *, on_method: bool = False) -> dict[str, Any]:
    get: dict[str, Any] = {"method": "POST", "request": LIVE_SCHEMA}
    params: dict[str, Any] = {"endpoint": "/ext/t", "methods": {"get": get}}
    if on_method:
        get["endpoint"] = endpoint
    else:
        params["endpoint"] = endpoint
    return {"capabilities": {"extensions": [{"uri": URI, "params": params}]}}


def where_httpx_sends(url: str) -> tuple[str, bytes, int]:
    """The scheme, host and port that the client's own parser takes from ``url``."""
    parsed = httpx.URL(url)
    port = parsed.port or {"http": 80, "https": 443}[parsed.scheme]
    return parsed.scheme, parsed.raw_host.lower(), port


def check_on_origin(url: str | None, a2a_url: str) -> None:
    if url is None:
        return
    assert isinstance(url, str)
    # What the reads would be sent with: a URL the client takes, to the agent, as itself.
    assert where_httpx_sends(url) == where_httpx_sends(a2a_url), url
    assert not httpx.URL(url).userinfo, url
    assert not any(c.isspace() or c == "\\" or ord(c) < 0x20 or c == "\x7f" for c in url), url


@st.composite
def agents_and_endpoints(draw: st.DrawFn) -> tuple[str, str, bool]:
    a2a_url, host, other = draw(st.sampled_from(AGENTS))
    endpoint = draw(hostile_endpoints(host, other) | st.text(max_size=30))
    return a2a_url, endpoint, draw(st.booleans())


@property_settings(600)
@given(agents_and_endpoints())
def test_no_endpoint_leads_off_the_agents_origin(case: tuple[str, str, bool]) -> None:
    a2a_url, endpoint, on_method = case
    url = live_trajectory_endpoint(agent_card(endpoint, on_method=on_method), a2a_url)
    check_on_origin(url, a2a_url)


def test_the_generated_endpoints_do_reach_the_agent_too() -> None:
    # The property is not vacuous: plain endpoints on each kind of origin give a URL.
    for a2a_url, _, _ in AGENTS:
        origin = "/".join(a2a_url.split("/")[:3])
        for endpoint in ("/ext/t", "ext/t", f"{origin}/ext/t"):
            url = live_trajectory_endpoint(agent_card(endpoint), a2a_url)
            assert url is not None, (a2a_url, endpoint)
            check_on_origin(url, a2a_url)


# --- any JSON, anywhere in the card -------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["POST", "post", URI, "/ext/t", "task_id", "after"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
# The places in a card where each field is looked for.
CARD_PATHS = [
    (),
    ("capabilities",),
    ("capabilities", "extensions"),
    ("capabilities", "extensions", 0),
    ("capabilities", "extensions", 0, "uri"),
    ("capabilities", "extensions", 0, "params"),
    ("capabilities", "extensions", 0, "params", "endpoint"),
    ("capabilities", "extensions", 0, "params", "methods"),
    ("capabilities", "extensions", 0, "params", "methods", "get"),
    ("capabilities", "extensions", 0, "params", "methods", "get", "method"),
    ("capabilities", "extensions", 0, "params", "methods", "get", "endpoint"),
    ("capabilities", "extensions", 0, "params", "methods", "get", "request"),
    ("capabilities", "extensions", 0, "params", "methods", "get", "request", "oneOf"),
    ("capabilities", "extensions", 0, "params", "methods", "get", "request", "oneOf", 1),
    ("capabilities", "extensions", 0, "params", "methods", "get", "request", "required"),
]


def replaced(card: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy: Any = list(card) if isinstance(card, list) else dict(card)
    copy[head] = replaced(card[head], rest, value)
    return copy


@property_settings(600)
@given(path=st.sampled_from(CARD_PATHS), value=json_values, agent=st.sampled_from(AGENTS))
def test_any_json_anywhere_in_a_card_gives_a_url_or_none(
    path: tuple[Any, ...], value: Any, agent: tuple[str, str, str]
) -> None:
    card = agent_card("/ext/t")
    card["capabilities"]["extensions"][0]["params"]["methods"]["get"]["endpoint"] = "/ext/t"
    card["capabilities"]["extensions"][0]["params"]["methods"]["get"]["request"] = {
        "oneOf": [{"required": ["task_id"]}, {"required": ["task_id", "after"]}],
        "required": [],
    }
    hostile = replaced(card, path, value)
    check_on_origin(live_trajectory_endpoint(hostile, agent[0]), agent[0])


def test_a_method_that_is_not_a_string_is_no_post_and_never_printed() -> None:
    # str() of a deeply nested value would recurse; a method is a string or nothing.
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    card = agent_card("/ext/t")
    card["capabilities"]["extensions"][0]["params"]["methods"]["get"]["method"] = deep
    assert live_trajectory_endpoint(card, "http://a/") is None


# --- the fuzz bites -----------------------------------------------------------------------


def naive_origin(url: str) -> tuple[str, str, int] | None:
    """An origin check with a plausible bug: the host is the netloc up to its first ':'."""
    scheme, _, rest = url.partition("://")
    netloc = rest.split("/", 1)[0]
    host, _, port = netloc.partition(":")
    if scheme.lower() not in ("http", "https") or not host:
        return None
    default = 80 if scheme.lower() == "http" else 443
    return scheme.lower(), host.lower(), int(port) if port.isdigit() else default


def test_the_fuzz_finds_an_origin_escape_when_the_check_is_broken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(follower._format._discovery, "_origin", naive_origin)
    with pytest.raises((AssertionError, ExceptionGroup)) as caught:
        test_no_endpoint_leads_off_the_agents_origin()
    # Hypothesis raises a group when it found distinct failures: each is an escape.
    found = caught.value.exceptions if isinstance(caught.value, ExceptionGroup) else [caught.value]
    # Each names the URL that escaped (the first found is the IPv6 agent's port, taken
    # from "[::1]" split at its first ':').
    assert all(isinstance(exc, AssertionError) for exc in found)
    assert all(str(exc).split("\n")[0].lower().startswith("http") for exc in found)
