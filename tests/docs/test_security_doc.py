"""docs/security.md names only tests and errors that exist, and each defence names its tests.

The page says, for each defence, which test shows it holds. A test renamed or removed
would leave the page citing evidence that is gone, so every ``test_...`` name and
``tests/...py`` path in its code spans must be in the test tree (collected by parsing the
test files with :mod:`ast`, never by running them; a name ending in ``*`` must match at
least one test), and every ``...Error`` it names must be an exception class: the
library's own (exported from ``follower``), a builtin, or httpx's (the client a read
goes through). And a row of a defence table whose evidence column names no test at all
is a defence shown by nothing.
"""

from __future__ import annotations

import ast
import builtins
import fnmatch
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest

import follower

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "security.md"
TESTS = ROOT / "tests"

_FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
# A test's name, or a pattern of names; not a module's name inside a path.
_TEST_NAME = re.compile(r"(?<![\w/.])test_\w+\*?(?!\w|\.py)")
_TEST_PATH = re.compile(r"(?<![\w/.])tests/[\w/]+\.py\b")
_ERROR_NAME = re.compile(r"^(?:follower\.|httpx\.)?([A-Z]\w*Error)$")
# The columns of a defence table that hold its evidence.
_EVIDENCE_COLUMNS = {"shown by", "test", "tests"}
# Where an error the page names may come from, in this order.
_ERROR_HOMES = (follower, builtins, httpx)


def code_spans(markdown: str) -> Iterator[str]:
    """The page's inline code spans (fenced blocks hold programs, not citations)."""
    yield from _CODE_SPAN.findall(_FENCED.sub("", markdown))


def named_tests(markdown: str) -> set[str]:
    """Every test name (or ``test_...*`` pattern) in the page's code spans."""
    return {name for span in code_spans(markdown) for name in _TEST_NAME.findall(span)}


def named_test_paths(markdown: str) -> set[str]:
    return {path for span in code_spans(markdown) for path in _TEST_PATH.findall(span)}


def named_errors(markdown: str) -> set[str]:
    return {m.group(1) for span in code_spans(markdown) if (m := _ERROR_NAME.match(span.strip()))}


def defined_tests(sources: Iterable[str]) -> set[str]:
    """The names of the test functions (module level or in a class) in these sources."""
    names: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and node.name.startswith("test_"):
                names.add(node.name)
    return names


def missing_tests(named: Iterable[str], defined: set[str]) -> list[str]:
    """The named tests (or patterns) that no defined test answers to."""
    return sorted(name for name in named if not _answers(name, defined))


def _answers(name: str, defined: set[str]) -> bool:
    return bool(fnmatch.filter(defined, name)) if name.endswith("*") else name in defined


def misplaced_tests(cell: str, defined_in: dict[str, set[str]]) -> list[str]:
    """Tests a cell names after a ``tests/...py`` path that are not in that file.

    The page writes ``tests/test_x.py``: ``test_a``, ``test_b``; a path scopes the
    names after it, up to the next path.
    """
    misplaced: list[str] = []
    path: str | None = None
    for span in code_spans(cell):
        if paths := _TEST_PATH.findall(span):
            path = paths[-1]
            continue
        if path is None:
            continue
        misplaced += [
            f"{path}::{name}"
            for name in _TEST_NAME.findall(span)
            if not _answers(name, defined_in.get(path, set()))
        ]
    return misplaced


def unknown_errors(names: Iterable[str]) -> list[str]:
    def is_exception_class(name: str) -> bool:
        for home in _ERROR_HOMES:
            found = getattr(home, name, None)
            if isinstance(found, type) and issubclass(found, BaseException):
                return True
        return False

    return sorted(name for name in names if not is_exception_class(name))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def evidence_cells(markdown: str) -> list[tuple[str, str]]:
    """(the row's first cell, its evidence cell) for each row of each defence table.

    A defence table is one whose header has a "shown by", "test" or "tests" column.
    Cells are split on ``|``: the page keeps pipes out of its table cells.
    """
    rows: list[tuple[str, str]] = []
    lines = _FENCED.sub("", markdown).splitlines()
    for i, line in enumerate(lines):
        is_header = line.startswith("|") and i + 1 < len(lines)
        if not is_header or not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            continue
        if i > 0 and lines[i - 1].startswith("|"):
            continue  # a separator-like row inside a table, not a header
        header = [cell.lower() for cell in _cells(line)]
        columns = [c for c, name in enumerate(header) if name in _EVIDENCE_COLUMNS]
        if not columns:
            continue
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            cells = _cells(row)
            rows += [(cells[0], cells[c] if c < len(cells) else "") for c in columns]
    return rows


def cites_a_test(cell: str) -> bool:
    return bool(named_tests(cell) or named_test_paths(cell))


def _test_files() -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(TESTS.rglob("*.py"))
    }


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


# --- the page against the code ----------------------------------------------------------


def test_every_test_the_page_names_exists(page: str) -> None:
    named = named_tests(page)
    assert len(named) > 50  # the parser finds the page's citations at all
    assert missing_tests(named, defined_tests(_test_files().values())) == []


def test_every_test_named_after_a_file_is_in_that_file(page: str) -> None:
    defined_in = {path: defined_tests([source]) for path, source in _test_files().items()}
    misplaced = [m for _, cell in evidence_cells(page) for m in misplaced_tests(cell, defined_in)]
    assert misplaced == []


def test_every_test_file_the_page_names_exists(page: str) -> None:
    paths = named_test_paths(page)
    assert paths
    assert sorted(p for p in paths if not (ROOT / p).is_file()) == []


def test_every_error_the_page_names_is_an_exception_class(page: str) -> None:
    names = named_errors(page)
    assert {"UsageError", "ClientClosedError", "InvalidArgumentError"} <= names
    assert unknown_errors(names) == []


def test_every_defence_names_a_test_that_shows_it(page: str) -> None:
    rows = evidence_cells(page)
    assert len(rows) > 30
    assert [first for first, evidence in rows if not cites_a_test(evidence)] == []


# --- the checks themselves: each finds what it is for ---------------------------------

SMALL_PAGE = """\
| defence | how | shown by |
|---|---|---|
| real | it holds | `tests/stores/test_keys.py`: `test_invalid_keys_are_refused` |
| typo | - | `test_invalid_keys_are_refusd`, `test_retry_after_*`, `test_nothing_like_it_*` |
| shown by nothing | a promise | the code review |
| moved | it holds | `tests/test_nowhere.py` |

Prose may name `follower.ClientClosedError`, `ValueError`, `ConnectError`, a path such as
`.venvs/3.11/bin/python -m pytest tests/stores/test_keys.py -q`, and `ClientClosdError`.

```python
test_in_a_program_is_no_citation()
```
"""

DEFINED = {"test_invalid_keys_are_refused", "test_retry_after_in_seconds_is_honoured"}


def test_a_misspelt_test_name_or_a_pattern_that_matches_nothing_is_found() -> None:
    named = named_tests(SMALL_PAGE)
    assert named == {
        "test_invalid_keys_are_refused",
        "test_invalid_keys_are_refusd",
        "test_retry_after_*",
        "test_nothing_like_it_*",
    }
    assert missing_tests(named, DEFINED) == [
        "test_invalid_keys_are_refusd",
        "test_nothing_like_it_*",
    ]


def test_a_test_named_after_another_file_is_found() -> None:
    cell = (
        "`tests/stores/test_keys.py`: `test_a`, `test_b*`; "
        "`tests/stores/test_stores.py`: `test_a`; `test_c`"
    )
    defined_in = {
        "tests/stores/test_keys.py": {"test_a", "test_b2"},
        "tests/stores/test_stores.py": {"test_c"},
    }
    assert misplaced_tests(cell, defined_in) == ["tests/stores/test_stores.py::test_a"]


def test_a_test_file_is_found_whole_and_inside_a_command() -> None:
    assert named_test_paths(SMALL_PAGE) == {"tests/stores/test_keys.py", "tests/test_nowhere.py"}


def test_a_misspelt_error_is_found_and_a_real_one_from_any_home_is_not() -> None:
    names = named_errors(SMALL_PAGE)
    assert names == {"ClientClosedError", "ValueError", "ConnectError", "ClientClosdError"}
    assert unknown_errors(names) == ["ClientClosdError"]


def test_a_defence_that_names_no_test_is_found() -> None:
    rows = evidence_cells(SMALL_PAGE)
    assert [first for first, _ in rows] == ["real", "typo", "shown by nothing", "moved"]
    assert [first for first, evidence in rows if not cites_a_test(evidence)] == ["shown by nothing"]


def test_tests_are_collected_from_the_source_without_running_it() -> None:
    source = (
        "raise SystemExit('never run')\n"
        "def test_a(): ...\n"
        "async def test_b(): ...\n"
        "class TestC:\n"
        "    def test_c(self): ...\n"
        "def helper_test_d(): ...\n"
    )
    assert defined_tests([source]) == {"test_a", "test_b", "test_c"}
