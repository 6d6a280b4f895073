"""What the package publishes, and the dependency groups that working on it installs.

Users see the extras (``pip install 'follower[trio]'``); the tools that test,
lint and document the project are dependency groups, which no built
distribution carries. ``tools/venv`` takes both by name.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent.parent
USER_EXTRAS = {"trio", "testing", "temporal", "s3", "otel"}
DEV_TOOLS = {"pytest", "hypothesis", "mypy", "ruff", "mkdocs", "moto", "looptime", "trustme"}


def _pyproject() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def _groups() -> dict[str, list]:
    return _pyproject()["dependency-groups"]


def _resolve(group: str, seen: tuple[str, ...] = ()) -> list[Requirement]:
    """A group's requirements with its include-groups expanded, as PEP 735 reads them."""
    if group in seen:
        raise AssertionError(f"dependency groups include each other: {' -> '.join((*seen, group))}")
    requirements = []
    for item in _groups()[group]:
        if isinstance(item, str):
            requirements.append(Requirement(item))
        else:
            assert set(item) == {"include-group"}, f"{group}: {item!r} is not an include"
            assert item["include-group"] in _groups(), f"{group} includes an unknown group"
            requirements += _resolve(item["include-group"], (*seen, group))
    return requirements


def test_the_published_metadata_offers_only_the_user_extras() -> None:
    metadata = importlib.metadata.metadata("follower")
    assert set(metadata.get_all("Provides-Extra") or []) == USER_EXTRAS
    assert set(_pyproject()["project"]["optional-dependencies"]) == USER_EXTRAS
    published = {Requirement(line).name for line in importlib.metadata.requires("follower") or []}
    assert not published & DEV_TOOLS, f"dev tools in the published requirements: {published}"


def test_the_license_is_published_as_an_spdx_expression() -> None:
    metadata = importlib.metadata.metadata("follower")
    assert metadata["License-Expression"] == "MIT"
    assert "LICENSE" in (metadata.get_all("License-File") or [])


@pytest.mark.parametrize("group", ["test", "lint", "docs"])
def test_every_dependency_group_parses(group: str) -> None:
    requirements = _resolve(group)
    assert requirements
    assert not {r.name for r in requirements} & {"follower"}, "a group installs the project"


def test_lint_has_what_the_tests_import() -> None:
    # ruff reads the tests and mypy the package's optional imports: lint includes test.
    lint = {r.name for r in _resolve("lint")}
    assert {r.name for r in _resolve("test")} <= lint
    assert {"ruff", "mypy"} <= lint


def test_every_tools_venv_call_names_an_extra_or_a_group() -> None:
    known = USER_EXTRAS | set(_groups())
    callers = [ROOT / "Makefile", ROOT / "README.md", *(ROOT / "tools").iterdir()]
    callers += [*(ROOT / "docs").rglob("*.md"), *(ROOT / "benchmarks").glob("*.md")]
    calls = []
    for path in callers:
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            calls += re.findall(r"tools/venv\s+\S*\d\S*\s+([a-z0-9_,-]+)", text)
    assert calls, "no tools/venv call found"
    for names in calls:
        assert set(names.split(",")) <= known, f"tools/venv ... {names}: not all are known"


def test_no_hint_in_the_package_names_an_extra_of_the_unpublished_package() -> None:
    # `pip install 'follower[X]'` finds nothing while follower is not on PyPI: a hint for a
    # missing extra names the form that works, from a checkout (follower/_extras.py).
    hints = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "follower").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"follower\[\w", line)
    ]
    assert hints == []
