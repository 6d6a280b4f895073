"""A griffe extension: the library's reST-flavoured docstrings, read as Markdown.

The docstrings use Sphinx's inline roles (``:class:`Fault```) and literal blocks
(a paragraph ending ``::``), which read well in ``help()`` and an editor. The API
reference renders Markdown, so each role becomes inline code and each ``::`` a colon
(or nothing, on a line of its own) before the indented block, which Markdown already
reads as code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# :class:`X`, :meth:`~a.b.C.d`, :func:`.x`: the name as it reads.
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`[~.]?([^`]+)`")
_LITERAL_ALONE = re.compile(r"^(\s*)::\s*$", re.MULTILINE)
_LITERAL_AFTER_TEXT = re.compile(r"(\S)::\s*$", re.MULTILINE)


def as_markdown(text: str) -> str:
    """``text`` with its reST roles and literal-block markers turned into Markdown."""
    text = _ROLE.sub(lambda match: f"`{match.group(1)}`", text)
    text = _LITERAL_ALONE.sub("", text)
    return _LITERAL_AFTER_TEXT.sub(r"\1:", text)


class RestRolesAsMarkdown(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_markdown(obj.docstring.value)
