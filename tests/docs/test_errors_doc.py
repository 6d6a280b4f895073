"""docs/errors.md checked against the code, so that the page cannot drift from the classes.

Every error class exported from ``follower`` has a row in one of the page's tables;
every backticked ``...Error`` the page names exists; every ``Class.attribute`` it
names is an attribute of that class; and its attributes table lists exactly the
attributes each class adds to its bases.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import re
from pathlib import Path

import follower
from follower import FollowerError

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "errors.md"
ATTRIBUTES_HEADING = "## What an error is about"
NAME = re.compile(r"`([A-Za-z_][\w.]*Error)`")
ATTRIBUTE = re.compile(r"`([A-Za-z_]\w*Error)\.([a-z_]\w*)`")


def page_text() -> str:
    return PAGE.read_text(encoding="utf-8")


def exported_errors() -> dict[str, type[FollowerError]]:
    found = {}
    for name in follower.__all__:
        value = getattr(follower, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            found[name] = value
    return found


def own_attributes(cls: type) -> set[str]:
    return set(inspect.get_annotations(cls))


def all_attributes(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ for name in own_attributes(klass)}


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table row of ``text`` (headers and rules left out)."""
    rows = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        if re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line):
            continue
        if index + 1 < len(lines) and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[index + 1]):
            continue  # a header
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def section(text: str, heading: str) -> str:
    start = text.index(heading) + len(heading)
    end = text.find("\n## ", start)
    return text[start:] if end < 0 else text[start:end]


def test_every_exported_error_has_a_row_in_a_table() -> None:
    first_cells = [row[0] for row in table_rows(page_text())]
    missing = [
        name for name in exported_errors() if not any(f"`{name}`" in cell for cell in first_cells)
    ]
    assert missing == [], f"docs/errors.md has no row for {missing}"


def test_every_error_the_page_names_exists() -> None:
    unknown = []
    for name in sorted(set(NAME.findall(page_text()))):
        if "." in name:
            module, _, attribute = name.rpartition(".")
            exists = hasattr(importlib.import_module(module), attribute)
        else:
            builtin = getattr(builtins, name, None)
            exists = hasattr(follower, name) or (
                isinstance(builtin, type) and issubclass(builtin, BaseException)
            )
        if not exists:
            unknown.append(name)
    assert unknown == [], f"docs/errors.md names errors that do not exist: {unknown}"


def test_every_attribute_the_page_names_is_one_of_its_class() -> None:
    errors = exported_errors()
    named = ATTRIBUTE.findall(page_text())
    assert named, "the page names no Class.attribute: the pattern is broken"
    wrong = [
        f"{cls}.{attribute}"
        for cls, attribute in named
        if cls not in errors or attribute not in all_attributes(errors[cls])
    ]
    assert wrong == [], f"docs/errors.md names attributes that do not exist: {wrong}"


def test_the_attributes_table_lists_what_each_class_adds() -> None:
    rows = table_rows(section(page_text(), ATTRIBUTES_HEADING))
    documented = {}
    for row in rows:
        (cls,) = re.findall(r"`(\w+Error)`", row[0])
        documented[cls] = set(re.findall(r"`(\w+)`", row[1]))
    actual = {
        name: own_attributes(cls) for name, cls in exported_errors().items() if own_attributes(cls)
    }
    assert documented == actual
    assert set(actual["FollowerError"]) == {"task_id", "turn_id", "url", "key"}


def test_every_malformed_page_reason_has_a_row_and_every_row_is_a_reason() -> None:
    text = section(page_text(), "## The agent's faults")
    start = text.index("**Malformed pages.**")
    rows = table_rows(text[start:])
    documented = [re.findall(r"`(\w+)`", row[0])[0] for row in rows]
    assert documented == [reason.value for reason in follower.MalformedPageReason]
