"""The figures the docs and comments quote are the code's: a table, checked against the code.

Users read the caps, bounds and exit codes in the docs, not in the code, so a constant that
changes without its quotes misleads them (the changelog still said 64 MiB a page once the cap
had become 16 MiB). Two guards:

- ``QUOTES``: for each constant users read about, its value (the code's, found by name in
  the package: ``C.NAME``), the places that quote it, and how it is written there (a phrase
  with ``{}`` for the value, ``{:MiB}``, ``{:KiB}``, ``{:s}`` or ``{:ms}`` for its unit). Each
  phrase must be in its file, whitespace and line breaks aside. A changed constant fails every
  place that quotes it; a reworded place fails until its phrase is updated here.
- a scan of every page and comment for the name of any of the package's constants written
  beside a figure (`` `NAME` = 128 ``, ``10 s (`NAME`)``, `` `max_page_bytes`, default 16 MiB ``):
  the figure must be the code's, so a new quote that the table does not list is checked too.

Where a quote says how two constants relate ("half a page"), the relation is asserted.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

import follower
from follower.testing import Fault

ROOT = Path(__file__).resolve().parent.parent.parent
Number = int | float
_CONSTANT = re.compile(r"_?[A-Z][A-Z0-9_]*")


class Constants:
    """Every module-level constant of the package, by its name, wherever it is defined.

    Looked up by name rather than imported from a module: modules move and split (the
    package is being laid out as subpackages) while the names users read stay. A name
    that no module defines, or that two define with different values, fails when used.
    """

    def __init__(self) -> None:
        self.found: dict[str, dict[str, Any]] = {}
        for info in pkgutil.walk_packages(follower.__path__, "follower."):
            if info.name.endswith("__main__"):
                continue  # running it is the command line
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if _CONSTANT.fullmatch(name) and not callable(value):
                    self.found.setdefault(name, {})[info.name] = value

    def __getattr__(self, name: str) -> Any:
        where = self.found.get(name)
        if not where:
            raise AttributeError(f"no module of follower defines {name}")
        values = list(where.values())
        if any(value != values[0] for value in values):
            raise AttributeError(f"{name} differs between {', '.join(where)}")
        return values[0]

    def numbers(self) -> dict[str, Number]:
        """The constants that are one number and mean the same wherever they are defined."""
        numbers = {}
        for name in self.found:
            try:
                value = getattr(self, name)
            except AttributeError:
                continue
            if isinstance(value, int | float) and not isinstance(value, bool):
                numbers[name] = value
        return numbers


C = Constants()


class Figure:
    """A constant's value, written as the docs write it: ``{:MiB}``, ``{:KiB}``, ``{:s}``."""

    def __init__(self, value: Number) -> None:
        self.value = value

    def __format__(self, spec: str) -> str:
        value = self.value
        if spec in UNITS:
            return f"{value / UNITS[spec]:g} {spec}"
        if spec == "ms":
            return f"{value * 1000:g} ms"
        if spec == "minute":
            return {60: "a minute", 120: "two minutes"}.get(value, f"{value:g} s")
        return format(value, spec or "g")


UNITS = {"MiB": 2**20, "KiB": 2**10, "s": 1}


class Quoted(NamedTuple):
    """A constant (or a figure the code derives), and each (file, phrase) that quotes it."""

    name: str
    value: Number | tuple[Number, ...]
    places: tuple[tuple[str, str], ...]
    # Other names it goes by in the docs (an option's keyword), for the scan.
    aliases: tuple[str, ...] = ()


QUOTES = (
    # --- a page and an event -----------------------------------------------------------
    Quoted(
        "DEFAULT_MAX_PAGE_BYTES",
        C.DEFAULT_MAX_PAGE_BYTES,
        (
            ("docs/changelog.md", "Bodies are capped (`max_page_bytes`, default {:MiB})"),
            ("docs/security.md", "`max_page_bytes` defaults to {:MiB}"),
            ("docs/protocol.md", "| `max_page_bytes` | {:MiB}"),
            ("docs/design.md", "`max_page_bytes` (default {:MiB})"),
            ("tests/hostile/test_http_fuzz.py", "at the default cap, {:MiB},"),
        ),
        aliases=("max_page_bytes",),
    ),
    Quoted(
        "DEFAULT_MAX_EVENT_BYTES",
        C.DEFAULT_MAX_EVENT_BYTES,
        (
            ("docs/security.md", "{:MiB} of compact JSON by default"),
            ("docs/protocol.md", "| `max_event_bytes` | {:MiB} |"),
            ("docs/errors.md", "larger than `max_event_bytes` ({:MiB}) as compact JSON"),
        ),
        aliases=("max_event_bytes",),
    ),
    Quoted(
        "MAX_PAGE_EVENTS",
        C.MAX_PAGE_EVENTS,
        (
            ("docs/security.md", "At most {} events a page"),
            ("docs/protocol.md", "holds more than {} events"),
            ("docs/errors.md", "more than {} events in one page"),
        ),
    ),
    Quoted(
        "MAX_JSON_DEPTH",
        C.MAX_JSON_DEPTH,
        (
            ("docs/security.md", "`MAX_JSON_DEPTH` = {}"),
            ("docs/protocol.md", "nests deeper than {} levels"),
            ("docs/errors.md", "the body nests deeper than {} levels"),
            ("docs/errors.md", "nests deeper than {} levels (`MAX_JSON_DEPTH`"),
        ),
    ),
    Quoted(
        "LARGE_PAGE_BYTES",
        C.LARGE_PAGE_BYTES,
        (
            ("docs/security.md", "A body over {:KiB} (`LARGE_PAGE_BYTES`"),
            ("docs/protocol.md", "one over {:KiB} that would decode"),
            ("docs/errors.md", "a body over {:KiB} that would decode"),
        ),
    ),
    Quoted(
        "DECODED_PAGE_FACTOR",
        C.DECODED_PAGE_FACTOR,
        (
            ("docs/security.md", "errs high; over {} x the cap it is a"),
            ("docs/protocol.md", "would decode to more than {} x it"),
            ("docs/errors.md", "would decode to more than {} x the"),
        ),
    ),
    Quoted(
        "PAGE_DECODER_THREADS",
        C.PAGE_DECODER_THREADS,
        (("docs/security.md", "at most {} at a time on an event loop"),),
    ),
    Quoted(
        "the agent's events and bytes a read (the reference agent's)",
        (C.MAX_EVENTS_PER_READ, C.MAX_BYTES_PER_READ),
        (("docs/protocol.md", "The agent returns at most {} events and about {:MiB} of events"),),
    ),
    Quoted(
        "a read's wire bound: WIRE_FACTOR x the cap + WIRE_ALLOWANCE_BYTES, CHUNK_WIRE_BYTES",
        (C.WIRE_FACTOR, C.WIRE_ALLOWANCE_BYTES, C.CHUNK_WIRE_BYTES),
        (
            (
                "docs/protocol.md",
                "at most {} x the cap + {:MiB} on the wire, each chunk of a chunked body "
                "counting {} bytes more",
            ),
            ("docs/security.md", "at most {} x its cap + {:MiB}, each chunk counting {} bytes"),
            (
                "docs/changelog.md",
                "at most {} x `max_page_bytes` + {:MiB} on the wire (each chunk counting {} bytes",
            ),
        ),
    ),
    Quoted(
        "the codec's head and fields (MAX_HEAD_BYTES, MAX_HEADERS)",
        (C.MAX_HEAD_BYTES, C.MAX_HEADERS),
        (("docs/design.md", "{:KiB} and {} fields"),),
    ),
    Quoted(
        "MAX_CHUNKS_A_CALL",
        C.MAX_CHUNKS_A_CALL,
        (("docs/security.md", "the parser pauses after {:,} chunks"),),
    ),
    Quoted(
        "_ERROR_BODY_BYTES",
        C._ERROR_BODY_BYTES,
        (
            ("docs/protocol.md", "from at most {:KiB} read) for its error message"),
            ("follower/_http/_exchange.py", "error bodies over {:KiB} are cut short"),
        ),
    ),
    # --- reading -------------------------------------------------------------------------
    Quoted(
        "DEFAULT_READ_TIMEOUT_SECONDS",
        C.DEFAULT_READ_TIMEOUT_SECONDS,
        (
            ("docs/protocol.md", "| `read_timeout_seconds` | {:s} |"),
            ("docs/design.md", "`read_timeout_seconds` (default {})"),
        ),
        aliases=("read_timeout_seconds",),
    ),
    Quoted(
        "POOL_WAIT_SECONDS",
        C.POOL_WAIT_SECONDS,
        (
            ("docs/protocol.md", "The wait for a pooled connection has its own {:s} bound"),
            ("docs/protocol.md", "our own pool had no free connection in {:s}"),
            ("docs/errors.md", "`POOL_WAIT_SECONDS` ({:s})"),
            ("docs/design.md", "after at most {:s} of waiting for a pooled connection"),
        ),
    ),
    Quoted(
        "a read's whole bound on a transport without connection events",
        (
            C.DEFAULT_READ_TIMEOUT_SECONDS,
            C.POOL_WAIT_SECONDS,
            C.DEFAULT_READ_TIMEOUT_SECONDS + C.POOL_WAIT_SECONDS,
        ),
        (
            ("docs/design.md", "{:s} + {:s} = {:s}"),
            ("docs/protocol.md", "A transport that reports no connection events gets both: {2:s}"),
        ),
    ),
    Quoted(
        "the agents' backoff (BACKOFF_STEP_SECONDS, BACKOFF_CAP_SECONDS)",
        (C.BACKOFF_STEP_SECONDS, C.BACKOFF_CAP_SECONDS),
        (
            ("docs/errors.md", "+ {:s} x failures, capped at {:s}"),
            ("docs/protocol.md", "`floor + {:s} x failures`; both are capped at {:s}"),
            ("docs/design.md", "+ {:s} x failures, at most {:s}"),
            ("docs/security.md", "`floor + {:s} x n`"),
            ("docs/testing.md", "`poll_interval + {:s} x failures`"),
            (
                "follower/_backoff.py",
                "the floor + ``step_seconds`` ({:s}) x failures; both are capped at {:s}",
            ),
        ),
    ),
    Quoted(
        "AFTER_STOP_PAUSE_SECONDS",
        C.AFTER_STOP_PAUSE_SECONDS,
        (
            ("docs/protocol.md", "read again after `min({:s}, poll_interval_seconds)`"),
            ("docs/design.md", "`min({:s}, poll_interval_seconds)` (`AFTER_STOP_PAUSE_SECONDS`"),
            ("docs/security.md", "a follower pauses {:s} (or its poll interval if shorter)"),
        ),
    ),
    Quoted(
        "no endless back-to-back reads (MAX_READS_WITHOUT_PAUSE, BACKLOG_PAGE_BYTES)",
        (C.MAX_READS_WITHOUT_PAUSE, C.BACKLOG_PAGE_BYTES),
        (
            ("docs/protocol.md", "after {} such pages in a row under {:KiB} each"),
            ("docs/security.md", "After {} pages in a row that have more and are under {:KiB}"),
        ),
    ),
    Quoted(
        "NOT_FOUND_GRACE_SECONDS",
        C.NOT_FOUND_GRACE_SECONDS,
        (
            ("docs/protocol.md", "within {:s} of the first read"),
            ("docs/protocol.md", "{:s} of its first read (`NOT_FOUND_GRACE_SECONDS`)"),
            ("docs/errors.md", "within {:s} of its first read"),
        ),
    ),
    Quoted(
        "SETTLE_SECONDS (a flapping run ends after this long with no failure)",
        C.SETTLE_SECONDS,
        (
            ("docs/changelog.md", "it ends only after {:minute} of answers with none"),
            ("docs/errors.md", "before they had answered for {:s}: one run"),
            ("docs/errors.md", "then none for {:s}"),
            ("docs/protocol.md", "once reads have answered for {:minute} with"),
        ),
    ),
    Quoted(
        "IDLE_EXPIRY_SECONDS",
        C.IDLE_EXPIRY_SECONDS,
        (
            ("docs/design.md", "none is reused after {:s} idle"),
            ("follower/_http/_transport.py", "httpx's own default is the same {:s}"),
        ),
    ),
    Quoted(
        "DEFAULT_TASK_DEADLINE_SECONDS",
        C.DEFAULT_TASK_DEADLINE_SECONDS,
        (("docs/errors.md", "passed `deadline_seconds` (default {})"),),
    ),
    Quoted(
        "FOLLOWERS_PER_PROXIED_CLIENT",
        C.FOLLOWERS_PER_PROXIED_CLIENT,
        (
            ("docs/changelog.md", "behind a proxy, httpx's transport in shards of {}"),
            ("docs/design.md", "`FOLLOWERS_PER_PROXIED_CLIENT = {}`"),
            (
                "benchmarks/README.md",
                "bounded shards of {} followers (`FOLLOWERS_PER_PROXIED_CLIENT`)",
            ),
        ),
    ),
    # --- a step's turns ------------------------------------------------------------------
    Quoted(
        "DEFAULT_DRAIN_SECONDS",
        C.DEFAULT_DRAIN_SECONDS,
        (
            ("docs/design.md", "`drain_seconds` (default {}, `DEFAULT_DRAIN_SECONDS`)"),
            ("docs/protocol.md", "`drain_seconds` (default {})"),
            ("README.md", "(at most `drain_seconds`, default {})"),
        ),
        aliases=("drain_seconds",),
    ),
    Quoted(
        "the cleanup bounds (CLEANUP_WRITE_SECONDS each, CLEANUP_SECONDS in all)",
        (C.CLEANUP_WRITE_SECONDS, C.CLEANUP_SECONDS),
        (
            (
                "docs/design.md",
                "{:s} each (`CLEANUP_WRITE_SECONDS`), {:s} in all (`CLEANUP_SECONDS`)",
            ),
            ("docs/design.md", "shielded, {:s} a write, {:s} in all"),
            ("docs/protocol.md", "bounded to {:s} each and {:s} in all"),
            ("docs/security.md", "bounded, {:s} each and {:s} in all"),
            ("docs/security.md", "shielded, {:s} each and {:s} in all, logged"),
            ("follower/_retries.py", "a cleanup write's {:s} still hold a few tries"),
        ),
    ),
    Quoted(
        "STORED_TURN_READ_SECONDS",
        C.STORED_TURN_READ_SECONDS,
        (
            ("docs/design.md", "on entering its block | {:s}, then `StoreError` |"),
            ("docs/errors.md", "reading what the store holds of the turn takes over {:s}"),
        ),
    ),
    Quoted(
        "the store's put retries (STORE_RETRY_FLOOR_SECONDS, _STEP_, BACKOFF_CAP_, STORE_RETRY_)",
        (
            C.STORE_RETRY_FLOOR_SECONDS,
            C.STORE_RETRY_STEP_SECONDS,
            C.BACKOFF_CAP_SECONDS,
            C.STORE_RETRY_SECONDS,
        ),
        (
            (
                "docs/changelog.md",
                "jittered waits of {0:s} to {0:s} + {1:s} x failures (capped at {2:s}), "
                "for up to {3:s} a put",
            ),
            (
                "docs/errors.md",
                "tried again after {0:s} to {0:s} + {1:s} x failures (capped at {2:s}), before the "
                "next, for up to {3:s} from its first failure (`STORE_RETRY_SECONDS`)",
            ),
            (
                "docs/security.md",
                "waits a jittered {0:s} to {0:s} + {1:s} x failures (capped at {2:s};",
            ),
            (
                "docs/security.md",
                "for at most {3:s} from that put's first failure (`STORE_RETRY_SECONDS`",
            ),
            (
                "docs/design.md",
                "(from {0:s}, growing {1:s} a failure, capped at {2:s}) for up to {3:s}",
            ),
            ("docs/errors.md", "(given up after {3:s})"),
            (
                "follower/_retries.py",
                "between {0:s} and {0:s} + {1:s} x failures (capped at {2:s})",
            ),
        ),
    ),
    # --- reading back ----------------------------------------------------------------------
    Quoted(
        "DEFAULT_WRITER_HEARTBEAT_SECONDS",
        C.DEFAULT_WRITER_HEARTBEAT_SECONDS,
        (
            ("docs/protocol.md", "every `writer_heartbeat_seconds` (default {})"),
            ("docs/protocol.md", "default {:s}, `DEFAULT_WRITER_HEARTBEAT_SECONDS`"),
            ("follower/_turns/_step.py", "every ``writer_heartbeat_seconds`` (default {}:"),
        ),
        aliases=("writer_heartbeat_seconds",),
    ),
    Quoted(
        "WRITER_GONE_HEARTBEATS",
        C.WRITER_GONE_HEARTBEATS,
        (
            ("docs/protocol.md", "(`WRITER_GONE_HEARTBEATS` = {})"),
            ("docs/protocol.md", "> {} x `heartbeat_seconds` + `listing_lag_seconds`"),
            ("docs/errors.md", "for {} x `heartbeat_seconds` + `listing_lag_seconds`"),
            ("docs/reading.md", "once none has appeared for {} heartbeat intervals"),
            ("follower/_storing/_reader.py", "for {} heartbeat intervals plus"),
        ),
    ),
    Quoted(
        "a writer's heartbeats a turn an hour, at the default interval",
        3600 / C.DEFAULT_WRITER_HEARTBEAT_SECONDS,
        (
            ("docs/protocol.md", "**{} at the default**"),
            ("follower/_options.py", "{} puts a turn an hour"),
            ("follower/_turns/_step.py", "(default 10: {} puts an hour)"),
        ),
    ),
    Quoted(
        "the writer-gone bound at the defaults (3 beats and the listing lag)",
        C.WRITER_GONE_HEARTBEATS * C.DEFAULT_WRITER_HEARTBEAT_SECONDS
        + C.DEFAULT_LISTING_LAG_SECONDS,
        (
            ("docs/reading.md", "({:s} with the defaults)"),
            ("follower/_options.py", "the listing lag ({:s} by default)"),
        ),
    ),
    Quoted(
        "DEFAULT_LISTING_LAG_SECONDS",
        C.DEFAULT_LISTING_LAG_SECONDS,
        (
            ("docs/changelog.md", "`read_live_trajectory(..., listing_lag_seconds={:.1f})`"),
            ("docs/errors.md", "`listing_lag_seconds` ({:s} by"),
            ("docs/protocol.md", "`listing_lag_seconds` (default {:s})"),
            ("docs/reading.md", "`listing_lag_seconds` (default {:s})"),
            ("docs/design.md", "`listing_lag_seconds`, {:s} by default"),
        ),
        aliases=("listing_lag_seconds",),
    ),
    Quoted(
        "the reader's defaults in its signature (DEFAULT_READER_POLL_SECONDS, listing lag)",
        (C.DEFAULT_READER_POLL_SECONDS, C.DEFAULT_LISTING_LAG_SECONDS),
        (
            (
                "docs/protocol.md",
                "`read_live_trajectory(store, prefix_key, turn_id, *, "
                "poll_interval_seconds={:.1f}, idle_timeout_seconds=None, "
                "listing_lag_seconds={:.1f}, turn_ends=False)`",
            ),
        ),
    ),
    Quoted(
        "_RELIST_SECONDS",
        C._RELIST_SECONDS,
        (
            ("docs/design.md", "listing at least every {:s} anyway"),
            ("docs/protocol.md", "The reader still lists at least every {:s} of its clock"),
        ),
    ),
    # --- keys ---------------------------------------------------------------------------
    Quoted(
        "MAX_KEY_BYTES",
        C.MAX_KEY_BYTES,
        (
            ("docs/protocol.md", "{} bytes of UTF-8 (`MAX_KEY_BYTES`"),
            ("docs/security.md", "{} bytes of UTF-8 a key"),
            ("docs/errors.md", "{} bytes of UTF-8 a key"),
        ),
    ),
    Quoted(
        "MAX_SEGMENT_BYTES",
        C.MAX_SEGMENT_BYTES,
        (("docs/protocol.md", "no `/`, at most {} bytes"),),
    ),
    Quoted(
        "a turn's prefix and id together: MAX_KEY_BYTES - len(LIVE_FOLDER) - LONGEST_NAME",
        (
            C.MAX_KEY_BYTES,
            len(C.LIVE_FOLDER),
            C.LONGEST_NAME,
            C.MAX_KEY_BYTES - len(C.LIVE_FOLDER) - C.LONGEST_NAME,
        ),
        (("docs/protocol.md", "{} - {} - {} = {} bytes"),),
    ),
    # --- the command line ------------------------------------------------------------------
    Quoted(
        "the command's store bounds (PROBE_SECONDS, PROBE_NOTICE_SECONDS, STORE_CALL_SECONDS)",
        (C.PROBE_SECONDS, C.PROBE_NOTICE_SECONDS, C.STORE_CALL_SECONDS),
        (
            (
                "docs/changelog.md",
                "the bucket's pre-flight gives up after {:s} (saying after {:s} what it waits "
                "for), each other store call after {:s}",
            ),
            (
                "docs/security.md",
                "The bucket's pre-flight gives up after {:s}, saying after {:s} what it waits "
                "for; every other store call of a command after {:s} without an answer",
            ),
            ("docs/errors.md", "gives up after {0:s} (`PROBE_SECONDS`; after {1:s} it prints"),
            ("docs/errors.md", "(giving up after {0:s})"),
            ("docs/errors.md", "after {2:s} without an answer (`STORE_CALL_SECONDS`"),
            (
                "docs/tutorials/s3.md",
                "for at most {:s} (saying after {:s} what they wait for), and give any later "
                "store call {:s} to answer",
            ),
        ),
    ),
    Quoted(
        "the interrupted command's cleanup (CANCEL_TASK_SECONDS, CLEANUP_SECONDS)",
        (C.CANCEL_TASK_SECONDS, C.CLEANUP_SECONDS),
        (
            (
                "docs/errors.md",
                "(the task's cancel {:s}, the turn's and the step's marks {:s} each)",
            ),
            ("docs/errors.md", "limited to {0:s} (`CANCEL_TASK_SECONDS`)"),
        ),
    ),
    Quoted(
        "follower validate's timings (QUICK and FULL)",
        tuple(
            getattr(timings, field)
            for timings in (C.QUICK, C.FULL)
            for field in ("poll_interval_seconds", "read_timeout_seconds", "drain_seconds")
        ),
        (
            (
                "follower/_cli/_parser.py",
                "short intervals (poll {:s}, read timeout {:s}, drain {:s})",
            ),
            ("follower/_cli/_parser.py", "(default: poll {3:s}, read timeout {4:s}, drain {5:s}"),
            ("README.md", "(`read_timeout_seconds`, {1:s} with `--quick`)"),
        ),
    ),
    Quoted(
        "exit codes in prose (EXIT_BAD_STORE, _INCOMPLETE, _BOUND_BROKEN, _BROKEN_PIPE, ...)",
        (
            C.EXIT_BAD_STORE,
            C.EXIT_INCOMPLETE,
            C.EXIT_BOUND_BROKEN,
            C.EXIT_BROKEN_PIPE,
            C.EXIT_INTERRUPTED,
            C.EXIT_USAGE,
        ),
        (
            ("README.md", "bucket or a refusal is one line, exit {0}."),
            ("README.md", "`follow` says how many events were stored and exits {1}."),
            ("README.md", "says which below it, and the command exits {2}."),
            ("README.md", "ends a command quietly with exit {3}"),
            ("README.md", "`follower: interrupted` and exit {4}"),
            ("docs/changelog.md", "usage errors (exit {5}) instead of tracebacks"),
            ("docs/changelog.md", "`| head` exits {3} and Ctrl-C {4},"),
            ("docs/changelog.md", "`follow` exits {1} when a trajectory was not read to its end"),
            ("docs/changelog.md", "a silent endpoint is one line and exit {0}"),
            ("docs/changelog.md", "`follow` on a full disk exits {0} naming the store, not {1}."),
            ("docs/changelog.md", "exit {2} when a bound broke"),
            ("docs/tutorials/s3.md", "one line and exit {0}."),
            ("docs/tutorials/s3.md", "`StoreError`s (CLI exit {0})"),
            ("docs/security.md", "one line, exit {0}, instead of botocore's"),
        ),
    ),
    # --- S3 and Temporal --------------------------------------------------------------------
    Quoted(
        "S3Store's client (_MAX_ATTEMPTS, _CONNECT_TIMEOUT_SECONDS, _READ_TIMEOUT_SECONDS)",
        (C._MAX_ATTEMPTS, C._CONNECT_TIMEOUT_SECONDS, C._READ_TIMEOUT_SECONDS),
        (
            (
                "docs/tutorials/s3.md",
                "{} attempts in all, each bounded by a {:s} connect and {:s} read",
            ),
        ),
    ),
    Quoted(
        "_CONFLICT_BASE_SECONDS",
        C._CONFLICT_BASE_SECONDS,
        (
            (
                "docs/design.md",
                "it does not retry a 409, so the put does, with the same formula and a {:ms} base",
            ),
        ),
    ),
    Quoted(
        "EXIT_CLEANUP_SECONDS",
        C.EXIT_CLEANUP_SECONDS,
        (
            (
                "docs/security.md",
                "(in a daemon thread, for at most {:s}, so a stalled disk cannot hold the exit)",
            ),
        ),
    ),
    Quoted(
        "MIN_SECRET_CHARS",
        C.MIN_SECRET_CHARS,
        (("docs/security.md", "Pieces shorter than {} characters are not hidden"),),
    ),
    Quoted(
        "DEFAULT_HEARTBEAT_SECONDS",
        C.DEFAULT_HEARTBEAT_SECONDS,
        (
            ("docs/temporal.md", "({:s} without one;"),
            ("follower/temporal/workflow_types.py", "(or {:s} without one)"),
            ("follower/temporal/_attempt.py", "or {:s} without one"),
        ),
    ),
    Quoted(
        "MAX_HEARTBEAT_TURNS",
        C.MAX_HEARTBEAT_TURNS,
        (
            ("docs/temporal.md", "at most the latest {} (`MAX_HEARTBEAT_TURNS`)"),
            ("docs/temporal.md", "its beat lists the latest {} turns"),
        ),
    ),
)


@functools.cache
def prose(path: str) -> str:
    """A file's words, one space between each, comment markers dropped: lines wrap anywhere."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    if path.endswith(".py"):
        lines = [line.strip().removeprefix("#") for line in lines]
    return " ".join(" ".join(lines).split())


def written(quoted: Quoted, phrase: str) -> str:
    values = quoted.value if isinstance(quoted.value, tuple) else (quoted.value,)
    return phrase.format(*(Figure(value) for value in values))


def unquoted(quoted: Quoted) -> list[str]:
    """Each place that does not write ``quoted``'s value as the table says."""
    return [
        f"{path}: no {written(quoted, phrase)!r}"
        for path, phrase in quoted.places
        if " ".join(written(quoted, phrase).split()) not in prose(path)
    ]


@pytest.mark.parametrize("quoted", QUOTES, ids=[re.sub(r"\W+", "-", q.name)[:48] for q in QUOTES])
def test_every_place_quotes_the_codes_value(quoted: Quoted) -> None:
    assert unquoted(quoted) == []


def test_a_changed_constant_fails_every_place_that_quotes_it() -> None:
    # As if the code's cap had changed and nothing else: each quote is then stale.
    planted = QUOTES[0]._replace(value=2 * C.DEFAULT_MAX_PAGE_BYTES)
    assert len(unquoted(planted)) == len(planted.places)


# The command line's exit codes (EXIT_CLEANUP_SECONDS is a bound of the stores', not a code).
EXIT_NAMES = sorted(
    name for name in C.numbers() if name.startswith("EXIT_") and not name.endswith("_SECONDS")
)


@pytest.mark.parametrize("name", EXIT_NAMES)
def test_every_exit_code_is_in_the_errors_pages_table_with_its_value(name: str) -> None:
    value = getattr(C, name)
    assert f"| `{name}` | {value} |" in prose("docs/errors.md")


def test_the_figures_the_docs_relate_are_related_in_the_code() -> None:
    # docs/security.md: the page cap is "4 x the agent's ~4 MiB a read".
    assert C.DEFAULT_MAX_PAGE_BYTES == 4 * C.MAX_BYTES_PER_READ
    cap, agent = Figure(C.DEFAULT_MAX_PAGE_BYTES), Figure(C.MAX_BYTES_PER_READ)
    assert f"defaults to {cap:MiB} (4 x the agent's ~{agent:MiB} a read)" in prose(
        "docs/security.md"
    )
    # follower/_options.py: an event is "half a page, so a page at the cap holds at least two".
    assert C.DEFAULT_MAX_EVENT_BYTES == C.DEFAULT_MAX_PAGE_BYTES // 2
    # The reference agent's "most events a read" is the follower's "most events a page".
    assert C.MAX_EVENTS_PER_READ == C.MAX_PAGE_EVENTS
    # follower/_http/_transport.py: a connection idle this long is not reused,
    # "httpx's own default".
    assert httpx.Limits().keepalive_expiry == C.IDLE_EXPIRY_SECONDS
    # docs/protocol.md, follower/_http/_transport.py: "about 500,000 chunks" at the default cap.
    chunks = (
        C.WIRE_FACTOR * C.DEFAULT_MAX_PAGE_BYTES + C.WIRE_ALLOWANCE_BYTES
    ) // C.CHUNK_WIRE_BYTES
    assert round(chunks, -5) == 500_000
    assert "(about 500,000 chunks at the default)" in prose("docs/protocol.md")
    # docs/protocol.md, "The writer's heartbeat": when a stopped writer is reported, and how
    # late a live writer's beat may land, at the defaults (a reader's 1 s poll).
    beat, lag = C.DEFAULT_WRITER_HEARTBEAT_SECONDS, C.DEFAULT_LISTING_LAG_SECONDS
    poll, beats = C.DEFAULT_READER_POLL_SECONDS, C.WRITER_GONE_HEARTBEATS
    reported = (beats + 0.5) * beat + 2 * lag + 2 * poll
    gap = beats * beat + lag - beat / 2 - poll
    assert (reported, reported - lag, gap, gap - beat) == (47, 42, 29, 19)
    heartbeat = prose("docs/protocol.md")
    assert "(10 s, 5 s, and a 1 s poll) that is 47 s;" in heartbeat
    assert "the report comes by 42 s" in heartbeat
    assert "29 s at the defaults, so a beat may be 19 s late" in heartbeat
    # ... and what it costs: 360 puts at S3's $0.005 per 1,000.
    assert "that is $0.0018 a turn an hour: $1.80 an hour for 1,000 turns" in heartbeat
    assert round(3600 / beat * 0.005 / 1000, 6) == 0.0018
    # follower/testing: the default oversized page is "one byte over the library's default cap".
    assert Fault.oversized().size_bytes == C.DEFAULT_MAX_PAGE_BYTES + 1


# --- the scan: a constant's name beside a figure, anywhere ---------------------------------

_FIGURE = r"(?<![\w.-])(?P<figure>[0-9][0-9,]*(?:\.[0-9]+)?)(?: ?(?P<unit>MiB|KiB|s)\b)?"


def _patterns(name: str) -> list[re.Pattern[str]]:
    named = rf"`{re.escape(name)}`"
    forms = [
        rf"{named} ?= ?{_FIGURE}",  # `NAME` = 128
        rf"`{re.escape(name)} = {_FIGURE}`",  # `NAME = 4`
        rf"{named} \((?:default )?{_FIGURE}[,;) ]",  # `NAME` (5 s) / `name` (default 60,
        rf"{named},? defaults? (?:to )?{_FIGURE}",  # `name`, default 16 MiB
        rf"{named} \| {_FIGURE} ",  # | `name` | 30 s |
        rf"{_FIGURE} \({named}[;)]",  # 10 s (`NAME`; ...), not 1 MiB (`NAME`, `OTHER`)
    ]
    return [re.compile(form) for form in forms]


def quoted_beside(text: str, name: str) -> Iterator[tuple[float, str]]:
    """Each figure written beside ``name`` in ``text``: in the code's units, and as written."""
    if f"`{name}" not in text:
        return  # the most common case, and cheap: every form writes the name in backticks
    for pattern in _patterns(name):
        for match in pattern.finditer(text):
            figure = float(match["figure"].replace(",", ""))
            yield figure * UNITS.get(match["unit"] or "s", 1), match[0]


def scanned_files() -> list[str]:
    globs = ("docs/**/*.md", "*.md", "benchmarks/*.md", "changes/*.md", "follower/**/*.py")
    return sorted(str(p.relative_to(ROOT)) for g in globs for p in ROOT.glob(g))


def named_constants() -> dict[str, Number]:
    """Every numeric constant of the package, by its name in the code, and each option's keyword."""
    named = C.numbers()
    for quoted in QUOTES:
        for alias in quoted.aliases:
            assert not isinstance(quoted.value, tuple)
            named[alias] = quoted.value
    return named


NAMED = named_constants()


def misquotes(text: str) -> list[str]:
    """Figures written beside a constant's name in ``text`` that are not its value."""
    return [
        f"{as_written!r}: {name} is {value:,} in the code"
        for name, value in NAMED.items()
        for figure, as_written in quoted_beside(text, name)
        if figure != value
    ]


def test_no_page_or_comment_writes_a_constant_beside_another_figure() -> None:
    found = [f"{path}: {problem}" for path in scanned_files() for problem in misquotes(prose(path))]
    assert found == []


@pytest.mark.parametrize(
    "planted",
    # Each writes the code's figure doubled, as a stale quote would.
    [
        f"Capped (`max_page_bytes`, default {Figure(2 * C.DEFAULT_MAX_PAGE_BYTES):MiB}).",
        f"| `max_page_bytes` | {Figure(2 * C.DEFAULT_MAX_PAGE_BYTES):MiB} | a 200 body |",
        f"`MAX_JSON_DEPTH` = {2 * C.MAX_JSON_DEPTH}, the stored data's limit",
        f"puts, for up to {Figure(2 * C.STORE_RETRY_SECONDS):s} (`STORE_RETRY_SECONDS`), while",
        f"`drain_seconds` (default {2 * C.DEFAULT_DRAIN_SECONDS:g}, `DEFAULT_DRAIN_SECONDS`)",
        f"`POOL_WAIT_SECONDS` ({Figure(2 * C.POOL_WAIT_SECONDS):s}); it wraps `httpx.PoolTimeout`",
        f"`FOLLOWERS_PER_PROXIED_CLIENT = {2 * C.FOLLOWERS_PER_PROXIED_CLIENT}` followers",
        f"| `EXIT_BAD_STORE` | {2 * C.EXIT_BAD_STORE} | a `StoreError` |",
    ],
)
def test_the_scan_finds_a_planted_misquote(planted: str) -> None:
    assert misquotes(planted) != []


def test_the_scan_passes_a_quote_of_the_codes_value() -> None:
    cap = Figure(C.DEFAULT_MAX_PAGE_BYTES)
    text = f"Bodies are capped (`max_page_bytes`, default {cap:MiB}); `MAX_JSON_DEPTH` = 128."
    assert misquotes(text) == []
