"""How deeply a JSON document the library reads may nest: one limit, measured before decoding.

Python's ``json`` decoder recurses once per ``[`` or ``{``: a document a few
thousand levels deep raises a bare ``RecursionError`` from whatever code
decodes it (and a deep value recurses again wherever it is compared or
encoded). So every JSON document that comes from outside the process (a stored
object, each line of a stored chunk, and an agent's page) is measured first,
on its bytes, and one deeper than :data:`MAX_JSON_DEPTH` is refused by its
caller with a typed error, long before any recursion limit (Python's, or a
worker thread's small C stack) is near.

Measuring costs two ``bytes.count`` calls a document in the common case: a
document with no more than :data:`MAX_JSON_DEPTH` brackets cannot nest
deeper. Only a document with more brackets is scanned, at C speed: its
strings dropped (a bracket inside a string is no nesting), then the running
count of what is left.
"""

from __future__ import annotations

import re
from itertools import accumulate

# Levels of nesting a JSON document may have: `[]` is 1, `{"a": [1]}` is 2. serde_json's
# default, and far deeper than any page or event seen (a page holds its events two levels
# down, so an event may nest 126 levels in a page, 128 on its own line of a chunk).
MAX_JSON_DEPTH = 128

_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_NOT_OPENER_OR_NEWLINE = bytes(c for c in range(256) if c not in b"[{\n")
_STEP = tuple(1 if c in b"[{" else -1 if c in b"]}" else 0 for c in range(256))
# Once escapes are gone, a string is a quote, anything but a quote, a quote: no backtracking.
_STRING = re.compile(rb'"[^"]*"')
# More openers on one line than the limit: only such a line can nest deeper than it.
_LONG_LINE = re.compile(rb"[^\n]{%d}" % (MAX_JSON_DEPTH + 1))


def nests_too_deep(document: bytes) -> bool:
    """Whether one JSON document nests deeper than :data:`MAX_JSON_DEPTH` levels."""
    if document.count(b"[") + document.count(b"{") <= MAX_JSON_DEPTH:
        return False
    return json_depth(document) > MAX_JSON_DEPTH


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


def json_depth(document: bytes) -> int:
    """How deep the decoder would recurse into ``document``, strings not counted.

    Exact for valid JSON. For invalid JSON it may count more than the decoder
    reaches before it fails, never less: refusing by it lets no deep document through.
    """
    # Escaped backslashes first, then escaped quotes: every quote left opens or closes a string.
    plain = document.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = _STRING.sub(b"", plain).translate(None, _NOT_BRACKET)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
