"""The built documentation site reads from ``file://`` with no network: every diagram
drawn, search answering.

Each page is opened in a headless Chromium driven over the DevTools protocol (on a pipe,
so no port), with host names resolving nowhere; every request a page makes is recorded,
and only files of the site may be among them. The site is the one ``tools/test`` built
(``FOLLOWER_DOCS_SITE``), or one built here by ``tools/docs``. ``tools/chromium`` finds or
installs the browser; ``tools/test`` runs it and passes its path as ``CHROMIUM``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROOT = Path(__file__).resolve().parents[2]
# Bounds, not expectations: a page on a busy machine may take seconds to draw. A page
# gives up waiting after PAGE_SECONDS and says what it has; the protocol's replies get
# longer, so that a page's own answer always comes first.
PAGE_SECONDS = 60.0
REPLY_SECONDS = PAGE_SECONDS + 30.0
BUILD_SECONDS = 600.0
# The flags that keep Chromium off the network it would reach for itself (updates, sync,
# first-run pages) and working as root in a container; names resolve nowhere, so a page
# that reached for a CDN could not draw from it even by chance.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
    "--remote-debugging-pipe",
)
# What a page may load and still read offline: its own files and what it makes itself.
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


def chromium_path() -> str:
    """The browser's path, or a failure (a skip outside CI) that says how to get one."""
    names = ("chromium", "chromium-browser", "google-chrome")
    found = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, names)), None)
    if found:
        return found
    how = (
        "no Chromium for the docs site's browser test: tools/chromium installs one "
        "(as root: apt-get install -y chromium), or name one with CHROMIUM=/path"
    )
    # CI must run it; elsewhere the skip says why (pytest -ra lists it).
    if os.environ.get("CI") or os.environ.get("REQUIRE_CHROMIUM") == "1":
        pytest.fail(how)
    pytest.skip(how)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site: ``tools/test``'s, or a strict build of our own."""
    built = os.environ.get("FOLLOWER_DOCS_SITE")
    if built:
        return Path(built)
    target = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run(
        [ROOT / "tools" / "docs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return target


class DevTools:
    """A browser driven over the DevTools protocol on a pipe: one JSON message per NUL."""

    def __init__(self, process: subprocess.Popen[bytes], commands: Any, replies: Any) -> None:
        self._process = process
        self._commands = commands
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._events: list[dict[str, Any]] = []
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, args=(replies,), daemon=True)
        self._reader.start()

    def join(self) -> None:
        """Wait for the reader to see the pipe close (the browser has exited)."""
        self._reader.join(timeout=REPLY_SECONDS)

    def _read(self, replies: Any) -> None:
        buffered = b""
        while chunk := replies.read1(65536):
            buffered += chunk
            *messages, buffered = buffered.split(b"\0")
            for message in messages:
                self._messages.put(json.loads(message))
        self._messages.put(None)  # the browser is gone

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command; wait (bounded) for its reply, keeping the events before it."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        self._commands.write(json.dumps(message).encode() + b"\0")
        self._commands.flush()
        reply = self._until(method, lambda message: message.get("id") == self._next_id)
        assert "error" not in reply, (method, reply["error"])
        result: dict[str, Any] = reply["result"]
        return result

    def wait_for(self, method: str, session: str) -> None:
        """Wait (bounded) for the next ``method`` event of ``session``."""
        self._until(
            method,
            lambda message: message.get("method") == method and message.get("sessionId") == session,
        )

    def _until(self, waiting_for: str, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first message ``wanted``, keeping every event before it."""
        deadline = time.monotonic() + REPLY_SECONDS
        while True:
            try:
                message = self._messages.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {waiting_for} in {REPLY_SECONDS} s") from None
            if message is None:
                raise AssertionError(f"the browser exited while waiting for {waiting_for}")
            if "method" in message:
                self._events.append(message)
            if wanted(message):
                return message

    def events(self, method: str, session: str) -> list[dict[str, Any]]:
        """The params of every ``method`` event that ``session`` sent so far."""
        return [
            event["params"]
            for event in self._events
            if event.get("method") == method and event.get("sessionId") == session
        ]

    def evaluate(self, session: str, expression: str) -> Any:
        """The value of ``expression`` (a promise is awaited) in the page."""
        reply = self.call(
            "Runtime.evaluate",
            session,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
        )
        assert "exceptionDetails" not in reply, reply["exceptionDetails"]
        value: Any = reply["result"].get("value")
        return value

    def open(self, url: str) -> str:
        """A new tab at ``url``, loaded, recording its requests; its session's id."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        attached = self.call("Target.attachToTarget", targetId=target, flatten=True)
        session: str = attached["sessionId"]
        self.call("Network.enable", session)
        self.call("Page.enable", session)
        self.call("Page.navigate", session, url=url)
        self.wait_for("Page.loadEventFired", session)
        return session

    def requested(self, session: str) -> list[str]:
        """Every URL the page asked for, its own files among them."""
        urls: list[str] = [
            event["request"]["url"] for event in self.events("Network.requestWillBeSent", session)
        ]
        return urls


@pytest.fixture(scope="module")
def browser() -> Iterator[DevTools]:
    executable = chromium_path()
    # The protocol's pipe is the child's fds 3 (commands in) and 4 (replies out).
    commands_read, commands_write = os.pipe()
    replies_read, replies_write = os.pipe()

    def onto_fds_3_and_4() -> None:
        # Copied above 4 first, so that neither dup2 overwrites the other's source.
        high_read = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
        high_write = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10)
        os.dup2(high_read, 3)
        os.dup2(high_write, 4)

    with tempfile.TemporaryDirectory() as profile:
        process = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=onto_fds_3_and_4,  # before the reader thread starts
            close_fds=False,  # fds 3 and 4 must reach the browser; ours are close-on-exec
        )
        os.close(commands_read)
        os.close(replies_write)
        with open(commands_write, "wb") as commands, open(replies_read, "rb") as replies:
            devtools = DevTools(process, commands, replies)
            try:
                yield devtools
            finally:
                with contextlib.suppress(OSError):
                    commands.write(b'{"id": 0, "method": "Browser.close"}\0')
                    commands.flush()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                devtools.join()


def pages_with_diagrams(site: Path) -> dict[Path, int]:
    """Each built page that holds diagrams, and how many."""
    counts = {
        page: page.read_text(encoding="utf-8").count('<pre class="mermaid">')
        for page in sorted(site.rglob("*.html"))
    }
    return {page: count for page, count in counts.items() if count}


def waited_for(condition: str) -> str:
    """A promise of ``condition``'s value once it is truthy, or at PAGE_SECONDS its last."""
    return f"""
    new Promise(settled => {{
      const until = Date.now() + {PAGE_SECONDS * 1000};
      const check = () => {{
        const value = {condition};
        value || Date.now() > until ? settled(value) : setTimeout(check, 50);
      }};
      check();
    }})
    """


# Material swaps each diagram's <pre> for a <div class="mermaid"> holding the drawn SVG
# in a closed shadow root, which page scripts cannot see; the protocol's DOM can.
DIAGRAMS_DRAWN = 'document.querySelectorAll("div.mermaid").length'


def drawn_diagrams(browser: DevTools, session: str) -> list[dict[str, Any]]:
    """Each diagram host in the page, with the SVG its shadow root holds (or None)."""
    root = browser.call("DOM.getDocument", session, depth=-1, pierce=True)["root"]
    hosts: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        attributes = node.get("attributes", [])
        classes = dict(zip(attributes[::2], attributes[1::2], strict=True)).get("class", "")
        if node.get("localName") == "div" and "mermaid" in classes.split():
            svgs = [
                child
                for shadow in node.get("shadowRoots", [])
                for child in shadow.get("children", [])
                if child.get("localName") == "svg"
            ]
            hosts.append(svgs[0] if svgs else {})
        for child in [*node.get("children", []), *node.get("shadowRoots", [])]:
            walk(child)

    walk(root)
    return hosts


def svg_attribute(svg: dict[str, Any], name: str) -> str | None:
    attributes = svg.get("attributes", [])
    return dict(zip(attributes[::2], attributes[1::2], strict=True)).get(name)


def assert_offline(browser: DevTools, session: str) -> None:
    """Every request the page made was for a file of the site, or one it made itself."""
    remote = [url for url in browser.requested(session) if not url.startswith(LOCAL_SCHEMES)]
    assert remote == [], "the page reached for the network"


def test_the_site_has_diagrams_to_check(site: Path) -> None:
    # The design page draws the pattern: if its diagrams went, the test below checks nothing.
    assert pages_with_diagrams(site).get(site / "design.html", 0) >= 5


def test_every_diagram_is_drawn_from_the_disk_with_no_network(
    site: Path, browser: DevTools
) -> None:
    for page, expected in pages_with_diagrams(site).items():
        session = browser.open(page.as_uri())
        browser.evaluate(session, waited_for(f"{DIAGRAMS_DRAWN} >= {expected}"))
        drawn = browser.evaluate(session, DIAGRAMS_DRAWN)
        assert drawn == expected, f"{page}: {drawn} of {expected} diagrams drawn"
        hosts = drawn_diagrams(browser, session)
        assert len(hosts) == expected, page
        for svg in hosts:
            assert svg.get("localName") == "svg", f"{page}: a diagram without its SVG"
            # Mermaid draws a bad diagram's source as an "error" picture.
            assert svg_attribute(svg, "aria-roledescription") not in (None, "error"), page
            assert svg.get("childNodeCount", 0) > 0, page
        assert_offline(browser, session)


def test_search_answers_from_the_disk_with_no_network(site: Path, browser: DevTools) -> None:
    # ?q= opens the search box with that query, as a shared search link does.
    session = browser.open((site / "index.html").as_uri() + "?q=drain_seconds")
    links = '[...document.querySelectorAll(".md-search-result__item a")]'
    results = browser.evaluate(
        session, waited_for(f'{links}.map(a => a.getAttribute("href")).join(" ")')
    )
    assert results, "search answered nothing"
    # The page that tells what drain_seconds bounds, found in the site on the disk.
    design = (site / "design.html").as_uri()
    assert any(href.startswith(f"{design}?") for href in results.split()), results
    assert_offline(browser, session)
