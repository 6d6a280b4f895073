"""MkDocs hooks: pages made at build time from the code, so they cannot drift from it.

- ``reference/cli.md``: the command line's reference, from the parser the command line
  itself uses (``follower._cli_parser.build_parser``): every command's help as
  ``follower COMMAND --help`` prints it, and the fault modes from ``follower.testing``.
- the error tree on the Errors page, from ``follower/_errors.py``'s docstring.
- ``code/<path>.md``: the source of each module of ``follower/`` and each example, so
  the pages can link to the code that implements what they describe, and the strict
  build fails when a linked module is moved or removed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mkdocs.structure.files import File, Files

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent
# Help is wrapped to this width whatever the terminal that builds the site.
HELP_COLUMNS = "88"
SOURCE_GLOBS = ("follower/**/*.py", "examples/*.py")


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages to the site's files."""
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    for path in sorted(p for pattern in SOURCE_GLOBS for p in ROOT.glob(pattern)):
        relative = path.relative_to(ROOT).as_posix()
        files.append(File.generated(config, f"code/{relative}.md", content=source_page(relative)))
    return files


ERROR_TREE_MARKER = "<!-- generated: the error tree -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Fill in the parts of hand-written pages that come from the code."""
    if ERROR_TREE_MARKER in markdown:
        markdown = markdown.replace(ERROR_TREE_MARKER, error_tree())
    return markdown


def error_tree() -> str:
    """The error tree drawn in ``follower/_errors.py``'s docstring, as a fenced block."""
    import follower._errors

    doc = follower._errors.__doc__ or ""
    tree = [line[4:] for line in doc.splitlines() if line.startswith("    ")]
    if not tree:
        raise ValueError("follower/_errors.py's docstring draws no error tree")
    return "\n".join(["```text", *tree, "```"])


def cli_reference() -> str:
    """The command line's reference page, in Markdown."""
    from follower._cli_parser import build_parser
    from follower.testing import FAULT_NAMES

    parser = build_parser()
    lines = [
        "# Command line reference",
        "",
        "Generated when the site is built, from the parser `follower` itself runs",
        "([`follower/_cli_parser.py`](../code/follower/_cli_parser.py.md)): what you read",
        "here is what `--help` prints. What each command is for, with examples, is in",
        "[Reading a step back](../reading.md) (`tail`), the [tutorials](../tutorials/trio.md)",
        "and the README; exit codes are listed in [Errors](../errors.md#command-line-exit-codes).",
        "",
        "## follower",
        "",
        *help_block(parser),
    ]
    for name, command in subcommands(parser):
        lines += ["", f"## follower {name}", "", *help_block(command)]
    lines += [
        "",
        "## Fault modes",
        "",
        "`--fault` (of `demo` and `agent`) makes the reference agent misbehave. It takes one",
        "of these, as `follower.testing.parse_fault` reads them (see",
        "[Testing your own step runner](../testing.md#fault-modes) for what each does):",
        "",
        *(f"- `{name.strip()}`" for name in FAULT_NAMES.split(",")),
        "",
    ]
    return "\n".join(lines)


def subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each command's name and parser, in the order the parser lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, command in action.choices.items():
                if id(command) not in seen:  # an alias names the same parser again
                    seen.add(id(command))
                    yield name, command


def help_block(parser: argparse.ArgumentParser) -> list[str]:
    """``parser``'s help, wrapped at a fixed width, as a fenced block."""
    with fixed_columns():
        text = parser.format_help()
    return ["```text", *text.rstrip().splitlines(), "```"]


@contextlib.contextmanager
def fixed_columns() -> Iterator[None]:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def source_page(relative: str) -> str:
    """A page showing one file of the repository, line-numbered."""
    text = (ROOT / relative).read_text(encoding="utf-8")
    fence = "````" if "```" in text else "```"
    return "\n".join(
        [
            "---",
            "search:",
            "  exclude: true",
            "---",
            "",
            f"# {relative}",
            "",
            f'{fence}python linenums="1"',
            text.rstrip("\n"),
            fence,
            "",
        ]
    )
