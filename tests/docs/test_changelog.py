"""Changelog fragments (changes/README.md): each well-formed, and the changelog builds with them.

``tools/changelog`` is loaded as a module for the checks on the repository's own files,
and run as a command on a copy in a temporary folder for the fold, which deletes files.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
TOOL = ROOT / "tools" / "changelog"


def load_tool() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("changelog_tool", str(TOOL))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


changelog = load_tool()
MARKER = changelog.MARKER


def run_tool(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_fragment_waiting_in_changes_is_well_formed() -> None:
    fragments, problems = changelog.read_fragments(ROOT / "changes")
    assert problems == []
    names = {p.name for p in (ROOT / "changes").iterdir()} - {"README.md"}
    assert {f"{f.topic}.{f.kind}.md" for f in fragments} == names


def test_the_unreleased_section_and_the_fragments_build_a_release() -> None:
    text = (ROOT / "docs" / "changelog.md").read_text(encoding="utf-8")
    assert changelog.marker_problems(text) == []
    fragments, _ = changelog.read_fragments(ROOT / "changes")
    released = changelog.release(text, fragments, "9.9.9", "2030-01-01")
    for fragment in fragments:
        assert "- " + "\n  ".join(fragment.text.splitlines()) in released
    assert "## 9.9.9 (2030-01-01)" in released
    # The next release finds a fresh unreleased section, the marker in it.
    assert changelog.marker_problems(released) == []
    assert released.index("## Unreleased") < released.index(MARKER) < released.index("## 9.9.9")
    # Everything the changelog said before is still there, in order.
    kept = iter(released.splitlines())
    said = [line for line in text.splitlines() if line != MARKER and "(unreleased)" not in line]
    assert all(line in kept for line in said)
    assert [
        line
        for line in released.splitlines()
        if "unreleased" in line.lower() and line.startswith("## ")
    ] == ["## Unreleased"]
    # The draft the site shows holds every fragment where the release puts it.
    drafted = changelog.fold(text, fragments)
    assert all(fragment.text.splitlines()[0] in drafted for fragment in fragments)


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("retries.md", "Text.\n", "name it"),
        ("Retries.fixed.md", "Text.\n", "name it"),
        ("put.retries.fixed.md", "Text.\n", "name it"),
        ("retries.feature.md", "Text.\n", "is none of"),
        ("retries.fixed.md", "  \n\n", "empty"),
        ("retries.fixed.md", "One paragraph.\n\nAnother.\n", "one paragraph"),
        ("retries.fixed.md", "One paragraph.\n \t\nAnother.\n", "one paragraph"),
        ("retries.fixed.md", "- A bullet the fold adds itself.\n", "leading bullet"),
        ("retries.fixed.md", "* A bullet.\n", "leading bullet"),
        ("retries.fixed.md", "1. A list.\n", "leading bullet"),
        ("retries.fixed.md", "### A heading\n", "leading bullet"),
        ("retries.fixed.md", "```python\nx = 1\n```\n", "leading bullet"),
        ("retries.fixed.md", "> A quote.\n", "leading bullet"),
    ],
)
def test_a_fragment_of_the_wrong_shape_is_refused_saying_why(
    name: str, text: str, says: str
) -> None:
    problems = changelog.fragment_problems(name, text)
    assert len(problems) == 1
    assert problems[0].startswith(name + ": ")
    assert says in problems[0]


@pytest.mark.parametrize(
    "text",
    [
        "Text.",
        "Puts are retried for up to 120 s\n(`STORE_RETRY_SECONDS`), across lines.\n",
        "`-1` is refused: a code span first is text.\n",
    ],
)
def test_a_paragraph_is_a_fragment(text: str) -> None:
    assert changelog.fragment_problems("a-topic_2.migration.md", text) == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("# Changelog\n\n## 0.1.0 (2030-01-01)\n\n- x\n", "0 unreleased sections"),
        (f"## 0.2.0 (unreleased)\n\n{MARKER}\n\n## 0.1.0 (unreleased)\n", "2 unreleased"),
        ("## Unreleased\n\n- x\n", "0 times"),
        (f"## Unreleased\n\n{MARKER}\n{MARKER}\n", "2 times"),
        (f"## Unreleased\n\n## 0.1.0 (2030-01-01)\n\n{MARKER}\n", "not in the unreleased"),
    ],
)
def test_a_changelog_without_one_marker_in_one_unreleased_section_is_refused(
    text: str, says: str
) -> None:
    problems = changelog.marker_problems(text)
    assert len(problems) == 1
    assert says in problems[0]
    with pytest.raises(ValueError, match=says):
        changelog.fold(text, [])


def make_repository(root: Path, changelog_text: str, fragments: dict[str, str]) -> None:
    (root / "docs").mkdir()
    (root / "docs" / "changelog.md").write_text(changelog_text)
    (root / "changes").mkdir()
    (root / "changes" / "README.md").write_text("# Changelog fragments\n\n- not a fragment\n")
    for name, text in fragments.items():
        (root / "changes" / name).write_text(text)


CHANGELOG = f"""# Changelog

## 0.1.0 (unreleased)

{MARKER}

### Following a live trajectory

- What 0.1.0 brings.
"""


def test_a_release_folds_the_fragments_by_kind_and_topic_and_deletes_them(tmp_path: Path) -> None:
    make_repository(
        tmp_path,
        CHANGELOG,
        {
            "zeta.fixed.md": "A fix that reads\nover two lines.\n",
            "alpha.fixed.md": "An earlier topic.\n",
            "names.migration.md": "`old_name` is `new_name`.\n",
            "reader.added.md": "Something new.",
        },
    )
    checked = run_tool(tmp_path, "check")
    assert (checked.returncode, checked.stdout) == (0, "4 fragment(s), all well-formed\n")
    drafted = run_tool(tmp_path, "draft")
    assert drafted.returncode == 0
    assert len(list((tmp_path / "changes").iterdir())) == 5
    released = run_tool(tmp_path, "release", "0.1.0", "--date", "2030-01-01")
    assert released.returncode == 0, released.stderr
    assert [p.name for p in (tmp_path / "changes").iterdir()] == ["README.md"]
    assert (
        (tmp_path / "docs" / "changelog.md").read_text()
        == f"""# Changelog

## Unreleased

{MARKER}

## 0.1.0 (2030-01-01)

### Added

- Something new.

### Fixed

- An earlier topic.
- A fix that reads
  over two lines.

### {changelog.KINDS["migration"]}

- `old_name` is `new_name`.

### Following a live trajectory

- What 0.1.0 brings.
"""
    )
    # The draft (what the site shows) is the release but for its headings and the marker.
    assert drafted.stdout == (tmp_path / "docs" / "changelog.md").read_text().replace(
        f"## Unreleased\n\n{MARKER}\n\n## 0.1.0 (2030-01-01)\n\n",
        f"## 0.1.0 (unreleased)\n\n{MARKER}\n\n",
    )
    # Released with nothing waiting: the dated section, no empty line doubled.
    again = run_tool(tmp_path, "release", "0.1.1", "--date", "2030-02-01")
    assert again.returncode == 0, again.stderr
    text = (tmp_path / "docs" / "changelog.md").read_text()
    assert "## 0.1.1 (2030-02-01)\n\n## 0.1.0 (2030-01-01)\n" in text
    assert "\n\n\n" not in text


def test_check_fails_naming_each_bad_fragment_and_a_release_changes_nothing(
    tmp_path: Path,
) -> None:
    make_repository(
        tmp_path,
        CHANGELOG,
        {"good.added.md": "Fine.\n", "bad.feature.md": "Kind.\n", "two.fixed.md": "A.\n\nB.\n"},
    )
    checked = run_tool(tmp_path, "check")
    assert checked.returncode == 1
    assert checked.stderr.splitlines() == [
        "changes/bad.feature.md: the kind 'feature' is none of added, changed, fixed, removed, "
        "migration",
        "changes/two.fixed.md: one paragraph only (it has a blank line)",
    ]
    released = run_tool(tmp_path, "release", "0.1.0")
    assert released.returncode == 1
    assert (tmp_path / "docs" / "changelog.md").read_text() == CHANGELOG
    assert len(list((tmp_path / "changes").iterdir())) == 4
