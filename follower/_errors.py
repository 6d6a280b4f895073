"""Every error the library raises, named by who caused it.

::

    FollowerError                    root: catch this to catch anything of ours
    │                                    .task_id .turn_id .url .key: what it is about
    ├── AgentError                   the agent (or a proxy before it) misbehaved
    │   ├── TaskNotFoundError        404: the agent does not know the task
    │   ├── AgentRefusedError        another 4xx: the agent refused our read   .status_code
    │   ├── AgentUnavailableError    5xx, 408, 429, transport error or read timeout
    │   │                                .status_code .retry_after_seconds
    │   ├── AgentCardError           no agent card, or not a JSON object
    │   ├── A2AProtocolError         a JSON-RPC error, or an answer that is not one   .code
    │   ├── TaskTimeoutError         a task did not end within the turn's deadline
    │   └── MalformedPageError       the answer is not a valid page   .reason .after
    ├── StoreError                   an object store misbehaved
    │   ├── ObjectExistsError        write-once: the key is already written
    │   │   └── ObjectConflictError      ... with other bytes than the put's
    │   ├── ObjectNotFoundError      the key is not written
    │   ├── CorruptObjectError       a stored object cannot be parsed
    │   ├── StoreEscapeError         a symbolic link in a folder store leads out of its root
    │   ├── StoreNotFoundError       the store itself is missing: no such bucket
    │   ├── StoreAccessDeniedError   the store refused our credentials (403)
    │   └── StoreUnavailableError    unreachable, timed out, or 5xx after retries
    ├── PoolBusyError                our own connection pool had no free connection in time
    ├── UsageError                   the caller used the library wrongly
    │   ├── InvalidArgumentError     an option out of its range (a negative interval...)
    │   ├── InvalidKeyError          a key or prefix breaks the key rules
    │   ├── TurnStateError           follow() twice, or after the block ended
    │   ├── ClientClosedError        the caller's httpx client was closed while a follower read
    │   └── TurnExistsError          the turn is stored already, and resume was not asked
    │       └── TurnConflictError        resume was asked, but it is another task's turn
    ├── ReaderIdleError              a reader saw no new object for too long
    └── WriterGoneError              a turn's writer stopped without an end mark
                                         .heartbeat_seconds .silent_seconds

Every error carries four context attributes, each ``None`` where no layer knew
it: ``task_id`` (the agent's task), ``turn_id`` (the step's turn), ``url`` (the
agent URL the request went to) and ``key`` (the store key, or the prefix of a
listing). A lower layer fills what it knows when it raises; a layer above that
knows more fills the rest as the error passes (:func:`add_context`), so the
error keeps its class and its ``__cause__``. The names after a class (``.after``,
``.status_code``...) are its own attributes, on top of those four. Every message
is one line, and names the most specific of them the raiser knew. No message or
context attribute holds a request's credentials, even where it quotes the agent:
they are scrubbed as the error is made (:mod:`follower._redact`).

``PoolBusyError`` is ours, not the agent's: it never counts as a failed read,
never ends following, and a follower just reads again.

Not in the tree: the post-stop sentinel (:class:`FollowingEnded`), which ends a
follower's loop like ``EndOfStream`` ends a stream's; it never leaves the library.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from ._redact import scrub, scrub_value

if TYPE_CHECKING:
    from typing import Unpack

_E = TypeVar("_E", bound=BaseException)


class ErrorContext(TypedDict, total=False):
    """The context attributes every :class:`FollowerError` takes as keywords."""

    task_id: str | None
    turn_id: str | None
    url: str | None
    key: str | None


_CONTEXT_NAMES = ("task_id", "turn_id", "url", "key")


def _one_line(message: object) -> str:
    # A quoted lower-level error (an OSError, a botocore message) may span lines. Not
    # only a str: a caller's own store may raise one of ours bare, or around an OSError.
    # Scrubbed: a quoted answer may echo the request's credentials (follower._redact).
    return scrub(" ".join(str(message).splitlines()))


def _rebuilt(cls: type[FollowerError], args: tuple[Any, ...]) -> FollowerError:
    """Unpickle without calling ``__init__``: its required keywords are in the state."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    return exc


class FollowerError(Exception):
    """Root of every error the library raises.

    ``task_id``, ``turn_id``, ``url`` and ``key`` say what the error is about;
    each is ``None`` where no layer it passed through knew it.
    """

    # Defaults on the class too: a subclass whose __init__ skips ours still has them.
    task_id: str | None = None
    turn_id: str | None = None
    url: str | None = None
    key: str | None = None

    def __init__(self, message: object = "", **context: Unpack[ErrorContext]) -> None:
        super().__init__(_one_line(message))
        self.task_id = scrub_value(context.get("task_id"))
        self.turn_id = scrub_value(context.get("turn_id"))
        self.url = scrub_value(context.get("url"))
        self.key = scrub_value(context.get("key"))

    def __reduce__(self) -> tuple[Any, ...]:
        # BaseException's rebuilds with cls(*args), which a required keyword breaks.
        return (_rebuilt, (type(self), self.args), self.__dict__)


def add_context(
    exc: _E,
    *,
    task_id: str | None = None,
    turn_id: str | None = None,
    url: str | None = None,
    key: str | None = None,
    after: int | None = None,
) -> _E:
    """Fill in the context ``exc`` lacks, at the layer boundary that knows it; return ``exc``.

    Sets only attributes that are still ``None`` (what the raiser knew stays),
    and ``after`` only on a :class:`MalformedPageError`. Never wraps: the
    caller re-raises the same object, so its class and ``__cause__`` stay.
    Anything that is not a :class:`FollowerError` is left alone.
    """
    if isinstance(exc, FollowerError):
        for name, value in zip(_CONTEXT_NAMES, (task_id, turn_id, url, key), strict=True):
            if value is not None and getattr(exc, name) is None:
                setattr(exc, name, scrub_value(value))
        if after is not None and isinstance(exc, MalformedPageError) and exc.after is None:
            exc.after = after
    return exc


# --- the agent's faults -------------------------------------------------------------


class AgentError(FollowerError):
    """The agent, or a proxy in front of it, answered wrongly or not at all."""


class TaskNotFoundError(AgentError):
    """The agent does not know the task (404): never seen, evicted, or restarted."""


class AgentRefusedError(AgentError):
    """The agent refused the request: a 4xx other than 404, or another non-200 answer."""

    status_code: int

    def __init__(self, message: str, *, status_code: int, **context: Unpack[ErrorContext]) -> None:
        super().__init__(message, **context)
        self.status_code = status_code


class AgentUnavailableError(AgentError):
    """The agent could not be read now: 5xx, 408, 429, transport error or timeout.

    These are the only agent errors worth retrying. ``status_code`` is the
    answer's HTTP status (None for a transport error or a timeout), and
    ``retry_after_seconds`` what its ``Retry-After`` asked for, if it named a
    valid delay or date (a follower waits at least that long, within its cap).
    """

    status_code: int | None
    retry_after_seconds: float | None

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retry_after_seconds: float | None = None,
        **context: Unpack[ErrorContext],
    ) -> None:
        super().__init__(message, **context)
        self.status_code = status_code
        self.retry_after_seconds = retry_after_seconds


class AgentCardError(AgentError):
    """The agent answered, but with no agent card (a non-200), or one that is not JSON."""


class A2AProtocolError(AgentError):
    """An A2A call failed with a JSON-RPC error, or its answer is malformed.

    ``code`` is the JSON-RPC error's code, as the agent sent it (None when there was
    none); a code that is no number (JSON-RPC's are integers) is kept as its text,
    scrubbed like the message, since an agent may echo a token there too.
    """

    code: object

    def __init__(
        self, message: str, *, code: object = None, **context: Unpack[ErrorContext]
    ) -> None:
        super().__init__(message, **context)
        self.code = code if code is None or isinstance(code, int | float) else scrub(str(code))


class TaskTimeoutError(AgentError, TimeoutError):
    """The agent's task did not end within the turn's deadline."""


class MalformedPageReason(enum.StrEnum):
    """What is wrong with a page: :attr:`MalformedPageError.reason`; values are stable strings.

    One error with a reason, not a class per fault: no caller handles one fault
    apart from another (each ends following with the same log line), but a log,
    a metric or a test can still tell them apart.
    """

    NOT_AN_OBJECT = "not_an_object"
    """Not JSON, not a JSON object, or a body in an encoding that was not asked for."""
    BAD_FIELD = "bad_field"
    """A field is missing, has the wrong type, or is negative."""
    UNKNOWN_STATE = "unknown_state"
    """``state`` is not one of the five trajectory states."""
    CURSOR_MISMATCH = "cursor_mismatch"
    """The cursor does not add up: ``next != after + len(events)``."""
    TASK_MISMATCH = "task_mismatch"
    """``task_id`` is not the one asked for."""
    NO_PROGRESS = "no_progress"
    """``has_more`` on a page that does not advance the cursor."""
    TOO_LARGE = "too_large"
    """The body is larger than ``max_page_bytes`` (or would decode to far more); not loaded."""
    TOO_MANY_EVENTS = "too_many_events"
    """More events than an agent may send in one page (``MAX_PAGE_EVENTS``, 1000)."""
    EVENT_TOO_LARGE = "event_too_large"
    """One event, as compact JSON, is larger than ``max_event_bytes``."""
    TOO_DEEP = "too_deep"
    """Nested deeper than ``MAX_JSON_DEPTH`` levels; refused before decoding."""
    BAD_NUMBER = "bad_number"
    """A number JSON cannot carry exactly: ``NaN``, ``Infinity``, ``1e400``, or an integer
    over Python's 4,300-digit limit."""


class MalformedPageError(AgentError):
    """The agent answered 200, but not with a valid page.

    ``reason`` (a :class:`MalformedPageReason`) says what is wrong; it compares
    equal to its string value. ``after`` is the cursor of the read that brought
    it (None for an answer that was no cursor read: an A2A call, the card).
    """

    reason: MalformedPageReason
    after: int | None = None

    def __init__(
        self,
        message: str,
        *,
        reason: MalformedPageReason,
        after: int | None = None,
        **context: Unpack[ErrorContext],
    ) -> None:
        super().__init__(message, **context)
        self.reason = MalformedPageReason(reason)
        self.after = after


# --- the store's faults -------------------------------------------------------------


class StoreError(FollowerError):
    """An object store failed or holds something it should not."""


class ObjectExistsError(StoreError):
    """A write-once store already holds the key."""


class ObjectConflictError(ObjectExistsError):
    """A write-once put found other bytes under its key; nothing was overwritten.

    The same bytes count as done (an idempotent retry): only a difference is a conflict.
    """


class ObjectNotFoundError(StoreError):
    """The store holds no object under the key."""


class CorruptObjectError(StoreError):
    """A stored object cannot be parsed as what its key says it is."""


class StoreEscapeError(StoreError):
    """A key of a :class:`~follower.FilesystemStore` leads out of its root through a symbolic link.

    The key itself is valid: something in the store's folder (a link planted
    below the root) points elsewhere, and the store neither reads nor writes
    through it.
    """


class StoreNotFoundError(StoreError):
    """The store itself does not exist: no such bucket (or container) to read or write.

    Not :class:`ObjectNotFoundError`, which is a key missing from a store that exists.
    """


class StoreAccessDeniedError(StoreError):
    """The store refused the call: our credentials or its policy do not allow it (403)."""


class StoreUnavailableError(StoreError):
    """The store could not be reached or served the call now, after its retries.

    An endpoint that refuses connections or never answers (connect or read
    timeout), or one that kept answering 5xx, throttling or "a write in
    progress" for every retry. The only store errors worth retrying later.
    """


# --- our own side ------------------------------------------------------------------


class PoolBusyError(FollowerError):
    """No connection of our own pool was free in time: not the agent's fault.

    A follower reads again after its poll interval; it never counts this as a
    failed read of the agent, nor ends following because of it.
    """


# --- the caller's faults ------------------------------------------------------------


class UsageError(FollowerError):
    """The library was used in a way it does not support."""


class InvalidArgumentError(UsageError, ValueError):
    """An option is out of its range: a non-positive interval, a negative cursor..."""


class InvalidKeyError(UsageError, ValueError):
    """A key or prefix breaks the key rules (segments, no ``..``, no backslash...)."""


class TurnStateError(UsageError, RuntimeError):
    """``follow()`` was called twice in one turn, or after the turn's block ended."""


class ClientClosedError(UsageError, RuntimeError):
    """The caller's ``httpx.AsyncClient`` was closed while a follower still read through it.

    No read through it can succeed, so following ends; in a turn it is logged,
    never raised into the step. Close a client you pass as ``client=`` only
    after the blocks that use it have exited. ``url`` is the read's URL and
    ``task_id`` the task it followed.
    """


class TurnExistsError(UsageError):
    """The store already holds this turn: entering it would mix two runs.

    Pass ``resume=True`` to continue the stored turn of the same task, or use
    another prefix or turn id. Nothing stored was touched.
    """


class TurnConflictError(TurnExistsError):
    """A resumed turn is stored for another task (or for no task it can name)."""


# --- readers ------------------------------------------------------------------------


class ReaderIdleError(FollowerError, TimeoutError):
    """A reader of a stored trajectory saw no new object for ``idle_timeout_seconds``."""


class WriterGoneError(FollowerError):
    """A turn's writer stopped without an end mark: no heartbeat of it for longer than the bound.

    ``heartbeat_seconds``: how often the writer said it beat; ``silent_seconds``:
    how long the reader, on its own clock, saw no new heartbeat and no new chunk.
    """

    heartbeat_seconds: float | None = None
    silent_seconds: float | None = None

    def __init__(
        self,
        message: object = "",
        *,
        heartbeat_seconds: float | None = None,
        silent_seconds: float | None = None,
        **context: Unpack[ErrorContext],
    ) -> None:
        super().__init__(message, **context)
        self.heartbeat_seconds = heartbeat_seconds
        self.silent_seconds = silent_seconds


# --- the sentinel -------------------------------------------------------------------


class FollowingEnded(Exception):
    """A read failed after the step stopped: the agent is gone, stop following.

    Raised at one seam (the failed read after stop) and caught by its owner,
    ``follow_trajectory``, which then returns normally. It is deliberately not
    a :class:`FollowerError`: it is not an error, and it never reaches users.
    """
