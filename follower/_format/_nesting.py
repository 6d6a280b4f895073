"""How deeply a JSON document the library reads may nest: one limit, measured before decoding.

Python's ``json`` decoder recurses once per ``[`` or ``{``: a document a few
thousand levels deep raises a bare ``RecursionError`` from whatever code
decodes it (and a deep value recurses again wherever it is compared or
encoded). So a JSON document that comes from outside the process (a stored
object, each line of a stored chunk, an agent's page) is
measured first, on its bytes (and a large page also for the size it would
decode to), and one deeper than :data:`MAX_JSON_DEPTH` is
refused by its caller with a typed error, long before any recursion limit
(Python's, or a worker thread's small C stack) is near.

Measuring a small document costs two ``bytes.count`` calls in the common case: a
document with no more than :data:`MAX_JSON_DEPTH` brackets cannot nest
deeper. A larger one is scanned: its structure kept (one ``bytes.translate``),
its strings dropped (a bracket inside a string is no nesting), then its
innermost pairs, level by level. That costs about a fifth of decoding a page
of 1,000 small events (70 us against 350 on Python 3.11), and nothing more for
the lines of a chunk, which are measured by one pass over the whole chunk.
"""

from __future__ import annotations

import re
from itertools import accumulate

# What one decoded value may cost at most on a 64-bit CPython: a container (an empty
# dict is 64 bytes, a list 56) or a scalar (a float or large int is 24-32), each with
# the 8-byte slot that holds it. An estimate errs high, so refusing by it is safe.
_CONTAINER_BYTES = 72
_SCALAR_BYTES = 40
_NOT_VALUE_MARK = bytes(c for c in range(256) if c not in b'[{,"')
_STRING = re.compile(rb'"[^"]*"')

# Levels of nesting a JSON document may have: `[]` is 1, `{"a": [1]}` is 2. serde_json's
# default, and far deeper than any page or event seen (a page holds its events two levels
# down, so an event may nest 126 levels in a page, 128 on its own line of a chunk).
MAX_JSON_DEPTH = 128

# Below this size two counts are cheaper than a pass that keeps only the structure.
_SMALL = 4096
# Passes that drop innermost pairs before a running count takes over (a bound on the
# work a hostile document costs: a pass per level would be quadratic).
_PASSES = 8
_RUN_PAST_LIMIT = b"(" * (MAX_JSON_DEPTH + 1)
_STEP = tuple(1 if c == ord("(") else -1 if c == ord(")") else 0 for c in range(256))
# Openers become "(", closers ")", quotes stay, everything else goes.
_AS_PARENTHESES = bytes.maketrans(b"[{]}", b"(())")
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'[]{}"')
_NOT_OPENER_OR_NEWLINE = bytes(c for c in range(256) if c not in b"[{\n")
# More openers on one line than the limit: only such a line can nest deeper than it.
_LONG_LINE = re.compile(rb"[^\n]{%d}" % (MAX_JSON_DEPTH + 1))


def nests_too_deep(document: bytes) -> bool:
    """Whether one JSON document nests deeper than :data:`MAX_JSON_DEPTH` levels."""
    if len(document) <= _SMALL and document.count(b"[") + document.count(b"{") <= MAX_JSON_DEPTH:
        return False
    marks = _structure(document)
    if len(marks) - marks.count(b'"') <= MAX_JSON_DEPTH:
        return False
    return _depth(marks) > MAX_JSON_DEPTH


def too_deep_lines(body: bytes) -> list[int]:
    """The lines (0-based, split at ``\\n``) of a JSON-lines body that nest too deeply.

    One pass over the body in the common case, however many lines it has: a
    line with no more openers than the limit cannot nest deeper than it.
    """
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return []
    openers = body.translate(None, _NOT_OPENER_OR_NEWLINE)
    if len(openers) - openers.count(b"\n") <= MAX_JSON_DEPTH or not _LONG_LINE.search(openers):
        return []
    suspects = [i for i, run in enumerate(openers.split(b"\n")) if len(run) > MAX_JSON_DEPTH]
    lines = body.split(b"\n")
    return [i for i in suspects if json_depth(lines[i]) > MAX_JSON_DEPTH]


def decoded_bytes_estimate(document: bytes) -> int:
    """About how many bytes ``json.loads(document)`` would hold, erring high; linear, at C speed.

    Each opener outside strings is a container, each comma one more value; the
    document's own bytes stand for its strings. A body of tiny values (``[{},{},...]``)
    decodes to 25 times its size: this is how a reader tells before decoding it.
    """
    if b"\\" in document:
        document = document.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = document.translate(None, _NOT_VALUE_MARK)
    # A string with no bracket or comma is two quotes side by side: gone in one pass.
    marks = marks.replace(b'""', b"")
    if b'"' in marks:  # strings that hold brackets or commas
        marks = _STRING.sub(b"", marks)
    containers = marks.count(b"[") + marks.count(b"{")
    return len(document) + _CONTAINER_BYTES * containers + _SCALAR_BYTES * marks.count(b",")


def json_depth(document: bytes) -> int:
    """How deep the decoder would recurse into ``document``, strings not counted.

    Exact for valid JSON up to :data:`MAX_JSON_DEPTH`; a deeper document gives
    some number above it (counting further would only cost time). For invalid
    JSON it may count more than the decoder reaches before it fails, never
    less: refusing by it lets no deep document through. Linear time, all at C
    speed but for a running count of what is left after the first levels.
    """
    return _depth(_structure(document))


def _structure(document: bytes) -> bytes:
    """Only the structure of ``document``: "(" for an opener, ")" for a closer, and quotes."""
    if b"\\" in document:
        # Escaped backslashes first, then escaped quotes: every quote left opens or closes a string.
        document = document.replace(b"\\\\", b"").replace(b'\\"', b"")
    return document.translate(_AS_PARENTHESES, _NOT_STRUCTURE)


def _depth(marks: bytes) -> int:
    # Two quotes with no bracket between them drop out whichever string they end or begin:
    # no structure is lost, and the quotes after them keep their parity.
    marks = marks.replace(b'""', b"")
    if b'"' in marks:  # strings that hold brackets: keep what lies between strings
        marks = b"".join(marks.split(b'"')[::2])
    if _RUN_PAST_LIMIT in marks:  # the plainest attack, found in one pass
        return len(_RUN_PAST_LIMIT)
    # Each pass drops the innermost pairs: a page of events is gone in three or four.
    levels = 0
    while levels < _PASSES and b"()" in marks:
        marks = marks.replace(b"()", b"")
        levels += 1
    if b"()" not in marks:
        # Whatever did not pair up: closers first, then openers never closed, a level each.
        return levels + marks.count(b"(")
    # Deeper still. A run of openers past the limit settles it at once (the common
    # attack: one long run, or one the passes have laid bare); else the running count of
    # what is left (the levels dropped sit below it).
    if _RUN_PAST_LIMIT in marks:
        return levels + len(_RUN_PAST_LIMIT)
    return levels + max(accumulate(map(_STEP.__getitem__, marks)))
