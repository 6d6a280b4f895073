"""Which endpoints may be read: `printable`, the check every turn's endpoint passes at its start.

Its ASCII path (str methods, in C) must refuse and accept exactly what the
character-by-character rule does, for any text.
"""

from __future__ import annotations

import unicodedata

from hypothesis import example, given
from hypothesis import strategies as st

from follower._format._discovery import printable


def printable_by_each_character(text: str) -> bool:
    return not any(
        c == "\\" or c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Zs")
        for c in text
    )


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)) | st.text())
@example("http://127.0.0.1:8000/ext/trajectory")
@example("http://agent/a b")
@example("http://agent/a\\b")
@example("http://agent/\x7f")
@example("http://agent/\x1f")
@example("http://agent/\t")
@example("http://agent/\u200b")  # zero-width space: a format character
@example("http://agent/\u00a0")  # no-break space
@example("http://agent/é")
@example("")
def test_printable_is_the_rule_for_each_character(text: str) -> None:
    assert printable(text) == printable_by_each_character(text)
