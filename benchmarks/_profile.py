"""Where a follower process's CPU goes: py-spy's raw samples, summed by package and function.

``scale.py --profile DIR`` runs our children under ``py-spy record --format raw``
(py-spy installs from PyPI; it needs ptrace, which root has here). Each raw line is
one stack, ``frame;frame;...;leaf COUNT``, root first, a frame ``name (path:line)``;
py-spy leaves idle samples out, so the counts are CPU.
"""

from __future__ import annotations

import collections
import re
import shutil
import sys
from pathlib import Path

_FRAME = re.compile(r"(?P<name>.*) \((?P<path>[^()]*?)(?::(?P<line>[0-9]+))?\)$")


def py_spy() -> str | None:
    """The py-spy beside this interpreter, or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def package_of(path: str) -> str:
    """A frame's file, named by what owns it: the library's module, else its package.

    py-spy names files relative to their ``sys.path`` entry (``httpx/_models.py``,
    ``asyncio/events.py``, ``contextlib.py``), so the first part is the package.
    """
    path = path.replace("\\", "/").split("site-packages/")[-1]
    parts = Path(path).parts
    if not parts:
        return "?"
    if parts[0] == "follower" and len(parts) > 1:
        return "follower." + Path(parts[-1]).stem
    return Path(parts[0]).stem


def where_time_goes(raw: Path, *, top: int = 12) -> list[str]:
    """Lines telling where the samples were: self time by package, then by function."""
    by_package: collections.Counter[str] = collections.Counter()
    by_function: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        leaf = _FRAME.match(frames[-1])
        if leaf is None:
            continue
        package = package_of(leaf["path"])
        by_package[package] += count
        by_function[f"{package}: {leaf['name']}"] += count
        seen = set()
        for frame in frames:
            match = _FRAME.match(frame)
            if match is None:
                continue
            owner = package_of(match["path"])
            if owner.startswith("follower.") and owner not in seen:
                seen.add(owner)
                inclusive[owner] += count
    if not total:
        return [f"no samples in {raw}"]

    def share(count: int) -> str:
        return f"{100 * count / total:5.1f}%"

    lines = [f"{total} samples (CPU, idle left out) in {raw}", "self time by package:"]
    lines += [f"  {share(c)}  {name}" for name, c in by_package.most_common(top)]
    lines.append("self time by function:")
    lines += [f"  {share(c)}  {name}" for name, c in by_function.most_common(top)]
    lines.append("the library's modules, with what they call (inclusive):")
    lines += [f"  {share(c)}  {name}" for name, c in inclusive.most_common(top)]
    return lines
