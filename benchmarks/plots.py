"""``make bench``'s figures drawn: SVG images for docs/benchmarks.md.

Reads the JSON the benchmarks wrote into ``--results`` (default ``benchmarks/results/``)
and draws, with matplotlib, into ``--out`` (default ``docs/images/benchmarks/``):

- from ``scale.json``: CPU per read, poll lag p99, RSS per follower and the worst loop
  block while the followers start, each against N, a line per side (the old follower,
  ours on asyncio, ours on trio), the targets dashed; where a cell ran several rounds,
  the median of its rounds with their spread (least to most) as error bars;
- from ``streams.json``: event latency p50 and p99, a stream beside cursor reads, and the
  CPU of an idle follower;
- from ``read_path.json``: CPU per read of each way of reading, asyncio and trio side by
  side, the floor (raw bytes over anyio streams) marked.

Under each plot: the run's date, machine and command, from the JSON's ``"about"``
(``_measure.run_about``); a JSON written before that was recorded shows what it has. The
same JSON draws the same bytes (no timestamp in the SVG, fixed ids), so the images in
docs/ change only when the figures do. A JSON that is missing is named and skipped; one
that cannot be read is an error naming it (the others are still drawn). Prints the
markdown to paste into docs/benchmarks.md, each image with its caption.

Usage: ``python benchmarks/plots.py [--results benchmarks/results]
[--out docs/images/benchmarks]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import matplotlib
except ImportError:  # pragma: no cover - said, not drawn
    sys.exit(
        "plots.py needs matplotlib: `tools/venv 3.11 testing,trio,bench` (what make bench "
        "uses) or `pip install --group bench` installs it"
    )
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from scale import CPU_RATIO_1000, LAG_P99_5000_MS, RSS_5000_KIB, STARTUP_BLOCK_5000_MS

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
DEFAULT_OUT = DOCS / "images" / "benchmarks"
# Where docs/benchmarks.md finds the images, relative to it.
DOCS_IMAGES = "images/benchmarks"
# The same JSON, the same bytes: fixed ids, no date in the file, text as text (a fraction of
# the size of glyphs drawn as paths; the fonts matplotlib measures with come first in each
# text's font list, and the browser's sans-serif after).
STYLE: dict[Any, Any] = {
    "svg.hashsalt": "follower-benchmarks",
    "svg.fonttype": "none",
    "font.size": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "legend.fontsize": 8.0,
}
SAVE_METADATA: dict[str, Any] = {"Date": None}
FIGURE_SIZE = (7.0, 4.0)
CAPTION_WIDTH = 110  # characters a line under a plot
# One colour and marker a side, the same in every image; a backend keeps its side's colour.
SIDES = ("old", "ours-asyncio", "ours-trio")
COLOURS = {"old": "#555555", "ours-asyncio": "#1f77b4", "ours-trio": "#ff7f0e"}
MARKERS = {"old": "s", "ours-asyncio": "o", "ours-trio": "^"}
BACKEND_SIDE = {"asyncio": "ours-asyncio", "trio": "ours-trio"}
VIA_COLOURS = {"stream": "#2ca02c", "cursor": "#1f77b4"}
TARGET_COLOUR = "#d62728"


class MalformedError(Exception):
    """A results file that is not what its benchmark writes."""


@dataclass(frozen=True)
class Image:
    """One image drawn: its file, what it shows (alt text) and the caption under it in the docs."""

    path: Path
    alt: str
    caption: str


@dataclass(frozen=True)
class Cell:
    """One side at one N: the median of its rounds, their spread, and whether all started."""

    n: int
    median: float
    low: float
    high: float
    complete: bool


# --- reading ---------------------------------------------------------------------------


def load(path: Path) -> dict[str, Any] | None:
    """A results file as a JSON object; ``None`` if there is none."""
    try:
        content = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MalformedError(f"{path}: cannot be read ({exc})") from exc
    try:
        document = json.loads(content)
    except ValueError as exc:
        raise MalformedError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise MalformedError(f"{path}: not a JSON object")
    return document


def rows_of(document: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    """``document[key]``, which must be a list of objects."""
    rows = document.get(key)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise MalformedError(f"{path}: {key!r} is not a list of objects")
    return rows


def number(row: dict[str, Any], key: str, path: Path) -> float | None:
    """A figure of a row: a number, or ``None`` where the run measured none."""
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedError(f"{path}: {key!r} is {value!r}, not a number")
    return float(value)


def text(row: dict[str, Any], key: str, path: Path) -> str:
    value = row.get(key)
    if not isinstance(value, str):
        raise MalformedError(f"{path}: {key!r} is {value!r}, not a string")
    return value


def about_lines(document: dict[str, Any], name: str) -> list[str]:
    """The run's date, machine and command, as the lines under its plots."""
    about = document.get("about")
    if isinstance(about, dict):
        date, machine = str(about.get("date")), str(about.get("machine"))
        python, command = str(about.get("python")), str(about.get("command"))
    else:  # a JSON written before "about": what it kept
        date = str(document.get("date", "not recorded"))
        kept = document.get("machine")
        kept = kept if isinstance(kept, dict) else {}
        parts = [
            kept.get("cpu_model"),
            f"{kept['cpus']} cores" if kept.get("cpus") else None,
            kept.get("platform") or kept.get("system"),
        ]
        machine = ", ".join(str(part) for part in parts if part) or "not recorded"
        python = f"Python {kept['python']}" if kept.get("python") else "Python not recorded"
        command = f"not recorded{_options_of(document, name)}"
    lines = [f"{name}.json, the run of {date}; {python}", f"machine: {machine}", "command:"]
    for words in _options(command):
        if len(lines[-1]) + 1 + len(words) > CAPTION_WIDTH:
            lines.append("   ")
        lines[-1] += " " + words
    return lines


def _options(command: str) -> list[str]:
    """A command's words, each option with its value, so that a line never parts them."""
    words: list[str] = []
    for word in command.split(" "):
        if words and words[-1].startswith("-") and " " not in words[-1] and word[:1] != "-":
            words[-1] += " " + word
        else:
            words.append(word)
    return words


def _options_of(document: dict[str, Any], name: str) -> str:
    """For scale.json without its command: the options its config stands for."""
    config = document.get("config")
    if name != "scale" or not isinstance(config, dict):
        return ""
    options = []
    if isinstance(config.get("followers"), list):
        options.append("--followers " + ",".join(str(n) for n in config["followers"]))
    if isinstance(config.get("sides"), list):
        options.append("--sides " + ",".join(str(side) for side in config["sides"]))
    for key in ("rounds", "seconds"):
        if key in config:
            options.append(f"--{key} {config[key]:g}")
    return f" (its config: {' '.join(options)})" if options else ""


# --- drawing ---------------------------------------------------------------------------


def new_figure(
    title: str, note: str, size: tuple[float, float] = FIGURE_SIZE
) -> tuple[Figure, Axes]:
    """A figure of one plot: its title, and a line above the plot on how it was measured."""
    figure = Figure(figsize=size)
    axes = figure.add_subplot()
    axes.set_title(title, loc="left", fontsize=10.5, fontweight="bold", pad=16)
    axes.text(0, 1.02, note, transform=axes.transAxes, fontsize=8, color="#555555")
    return figure, axes


def save(figure: Figure, axes: Axes, caption: list[str], path: Path) -> None:
    """Write the figure with the run's date, machine and command under the plot."""
    # Under the x axis's label, whatever its ticks' height, aligned with the plot's left.
    axes.annotate(
        "\n".join(caption),
        xy=(0, 0),
        xycoords=("axes fraction", axes.xaxis.label),
        xytext=(0, -10),
        textcoords="offset points",
        va="top",
        ha="left",
        fontsize=7.0,
        color="#444444",
        parse_math=False,
        annotation_clip=False,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="svg", bbox_inches="tight", metadata=SAVE_METADATA)


def thousands(value: float, _position: float | None = None) -> str:
    if value >= 1:
        return f"{value:,.0f}"
    return f"{value:g}"


def log_axis_n(axes: Axes, ns: Iterable[int]) -> None:
    """N on a log scale, a tick at each N measured."""
    axes.set_xscale("log")
    ticks = sorted(set(ns))
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.xaxis.set_major_formatter(FuncFormatter(thousands))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xlabel("N, followers in one process (log scale)")
    if len(ticks) == 1:
        axes.set_xlim(ticks[0] / 2, ticks[0] * 2)


def log_axis_y(axes: Axes) -> None:
    axes.set_yscale("log")
    axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(thousands))
    axes.yaxis.set_minor_formatter(NullFormatter())


# --- scale.json ------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalePlot:
    """One figure of scale.py against N."""

    name: str
    key: str
    title: str
    ylabel: str
    alt: str
    caption: str
    log: bool
    target: float | None = None
    target_label: str = ""


SCALE_PLOTS = (
    ScalePlot(
        "scale-cpu-per-read",
        "cpu_per_read_us",
        "CPU per read against N",
        "CPU µs per read",
        "CPU per read against N, a line per side measured",
        "CPU per read (µs) against N (`scale.py`); dotted: 0.2x the old follower's, the "
        "target at N = 1,000.",
        log=False,
    ),
    ScalePlot(
        "scale-poll-lag-p99",
        "lag_p99_ms",
        "Poll lag p99 against N",
        "poll lag p99, ms (log scale)",
        "Poll lag p99 against N, a line per side measured",
        "Poll lag p99 (ms, log scale) against N (`scale.py`); dashed: the target, under "
        "250 ms at 5,000 followers.",
        log=True,
        target=LAG_P99_5000_MS,
        target_label="target: < 250 ms (at N = 5,000)",
    ),
    ScalePlot(
        "scale-rss-per-follower",
        "rss_per_follower_kib",
        "Memory per follower against N",
        "RSS KiB per follower (log scale)",
        "RSS per follower against N, a line per side measured",
        "RSS per follower (KiB, log scale) against N, at the end of start-up (`scale.py`); "
        "dashed: the target, 20 KiB at 5,000 followers.",
        log=True,
        target=RSS_5000_KIB,
        target_label="target: <= 20 KiB (at N = 5,000)",
    ),
    ScalePlot(
        "scale-startup-block",
        "loop_blocked_startup_ms",
        "Worst event-loop block while the followers start, against N",
        "worst loop block, ms (log scale)",
        "Worst loop block at start-up against N, a line per side measured",
        "The worst lateness of a 10 ms sleep while N followers start (ms, log scale; "
        "`scale.py`); dashed: the target, 50 ms at 5,000 followers.",
        log=True,
        target=STARTUP_BLOCK_5000_MS,
        target_label="target: <= 50 ms (at N = 5,000)",
    ),
)


def scale_cells(
    runs: list[dict[str, Any]], key: str, path: Path, *, positive: bool
) -> dict[str, list[Cell]]:
    """Per side, a cell per N: the rounds' median, least and most (positive ones on a log axis)."""
    grouped: dict[tuple[str, int], list[tuple[float, bool]]] = {}
    for run in runs:
        n = run.get("followers")
        if not isinstance(n, int) or isinstance(n, bool):
            raise MalformedError(f"{path}: a run's 'followers' is {n!r}, not a whole number")
        side = text(run, "side_name", path)
        value = number(run, key, path)
        started = number(run, "started", path)
        if value is None or (positive and value <= 0):
            continue
        complete = started is None or started >= n
        grouped.setdefault((side, n), []).append((value, complete))
    cells: dict[str, list[Cell]] = {}
    for (side, n), found in sorted(grouped.items(), key=lambda item: item[0][1]):
        values = [value for value, _ in found]
        cells.setdefault(side, []).append(
            Cell(
                n,
                statistics.median(values),
                min(values),
                max(values),
                all(complete for _, complete in found),
            )
        )
    return cells


def side_order(sides: Iterable[str]) -> list[str]:
    known = [side for side in SIDES if side in sides]
    return known + sorted(set(sides) - set(SIDES))


def draw_scale(document: dict[str, Any], path: Path, out: Path) -> list[Image]:
    runs = rows_of(document, "runs", path)
    if not runs:
        raise MalformedError(f"{path}: no runs")
    counts = Counter((run.get("followers"), run.get("side_name")) for run in runs).values()
    fewest, rounds = min(counts), max(counts)
    spread = "1 round a cell (no spread)"
    if rounds > 1:
        told = str(rounds) if fewest == rounds else f"{fewest} to {rounds}"
        spread = f"median of {told} rounds a cell; bars: least to most"
    caption = about_lines(document, "scale")
    images = []
    for plot in SCALE_PLOTS:
        cells = scale_cells(runs, plot.key, path, positive=plot.log)
        figure, axes = new_figure(plot.title, f"scale.py: {spread}; 1 s poll, the lean agent")
        incomplete = False
        for side in side_order(cells):
            found = cells[side]
            ns = [cell.n for cell in found]
            medians = [cell.median for cell in found]
            colour = COLOURS.get(side, "#9467bd")
            marker = MARKERS.get(side, "D")
            errors = None
            if rounds > 1:
                errors = [
                    [cell.median - cell.low for cell in found],
                    [cell.high - cell.median for cell in found],
                ]
            axes.errorbar(
                ns,
                medians,
                yerr=errors,
                color=colour,
                marker=marker,
                markersize=5,
                linewidth=1.4,
                capsize=3,
                label=side,
            )
            short = [cell for cell in found if not cell.complete]
            if short:
                incomplete = True
                axes.plot(
                    [cell.n for cell in short],
                    [cell.median for cell in short],
                    linestyle="none",
                    marker=marker,
                    markersize=5,
                    markerfacecolor="white",
                    markeredgecolor=colour,
                    zorder=4,
                )
        if plot.key == "cpu_per_read_us" and "old" in cells:
            old = cells["old"]
            axes.plot(
                [cell.n for cell in old],
                [CPU_RATIO_1000 * cell.median for cell in old],
                linestyle=":",
                color=COLOURS["old"],
                linewidth=1.2,
                label=f"{CPU_RATIO_1000}x old (the target at N = 1,000)",
            )
        if plot.target is not None:
            axes.axhline(
                plot.target,
                linestyle="--",
                color=TARGET_COLOUR,
                linewidth=1.0,
                label=plot.target_label,
            )
        log_axis_n(axes, [cell.n for found in cells.values() for cell in found])
        if plot.log:
            log_axis_y(axes)
        else:
            axes.set_ylim(bottom=0)
            axes.yaxis.set_major_formatter(FuncFormatter(thousands))
        axes.set_ylabel(plot.ylabel)
        handles, labels = axes.get_legend_handles_labels()
        if incomplete:
            handles.append(
                Line2D(
                    [],
                    [],
                    linestyle="none",
                    marker="o",
                    markerfacecolor="white",
                    markeredgecolor="#555555",
                )
            )
            labels.append("open: not every follower had started")
        axes.legend(handles, labels, loc="best")
        target = out / f"{plot.name}.svg"
        save(figure, axes, caption, target)
        images.append(Image(target, plot.alt, plot.caption))
    return images


# --- streams.json ----------------------------------------------------------------------


def grouped_bars(
    axes: Axes,
    groups: list[str],
    series: dict[str, list[float | None]],
    colours: dict[str, str],
    unit: str,
) -> None:
    """Bars a group, one a series, log scale, each labelled with its value."""
    width = 0.8 / max(len(series), 1)
    for index, (name, values) in enumerate(series.items()):
        offset = (index - (len(series) - 1) / 2) * width
        for position, value in enumerate(values):
            x = position + offset
            if value is None or value <= 0:  # nothing a log scale can draw: said instead
                axes.text(
                    x,
                    0.02,
                    "-" if value is None else "0",
                    transform=axes.get_xaxis_transform(),
                    ha="center",
                    va="bottom",
                )
                continue
            bar = axes.bar(
                x,
                value,
                width * 0.95,
                color=colours.get(name, "#9467bd"),
                label=name if position == 0 else None,
            )
            axes.bar_label(bar, labels=[f"{value:,.3g} {unit}"], fontsize=7, padding=2)
    axes.set_xticks(range(len(groups)), groups)
    axes.grid(axis="x", visible=False)
    log_axis_y(axes)
    axes.margins(y=0.15)
    axes.legend(loc="upper left")


def draw_streams(document: dict[str, Any], path: Path, out: Path) -> list[Image]:
    caption = about_lines(document, "streams")
    backend = str(document.get("backend", "asyncio"))
    images = []
    latency = rows_of(document, "latency", path)
    if not latency:
        raise MalformedError(f"{path}: no latency rows")
    by_via = {text(row, "via", path): row for row in latency}
    turns = "/".join(sorted({f"{number(row, 'turns', path) or 0:g}" for row in latency}))
    figure, axes = new_figure(
        "Event latency: agent emits → stored",
        f"streams.py on {backend}: {turns} turns a way; cursor reads at a 1 s poll",
    )
    grouped_bars(
        axes,
        ["p50", "p99"],
        {
            via: [number(row, "p50_ms", path), number(row, "p99_ms", path)]
            for via, row in by_via.items()
        },
        VIA_COLOURS,
        "ms",
    )
    axes.set_ylabel("ms (log scale)")
    target = out / "streams-latency.svg"
    save(figure, axes, caption, target)
    images.append(
        Image(
            target,
            "Event latency p50 and p99, a stream beside cursor reads",
            "Event latency, agent emits -> stored, p50 and p99 (ms, log scale): a stream "
            "beside cursor reads at a 1 s poll (`streams.py`).",
        )
    )
    if "idle" in document:
        idle = rows_of(document, "idle", path)
        ns = sorted({int(number(row, "followers", path) or 0) for row in idle})
        vias: dict[str, list[float | None]] = {}
        for row in idle:
            via = text(row, "via", path)
            n = int(number(row, "followers", path) or 0)
            vias.setdefault(via, [None] * len(ns))[ns.index(n)] = number(
                row, "cpu_us_per_follower_second", path
            )
        figure, axes = new_figure(
            "CPU of an idle follower",
            f"streams.py on {backend}: N open streams on tasks that send nothing, beside N "
            "cursor followers polling each second",
        )
        grouped_bars(axes, [f"N = {n:,}" for n in ns], vias, VIA_COLOURS, "µs")
        axes.set_ylabel("CPU µs per follower-second (log scale)")
        target = out / "streams-idle-cpu.svg"
        save(figure, axes, caption, target)
        images.append(
            Image(
                target,
                "CPU per idle follower-second, a stream beside cursor reads",
                "CPU per idle follower-second (µs, log scale) by N: open streams that receive "
                "nothing beside cursor followers polling each second (`streams.py`).",
            )
        )
    return images


# --- read_path.json --------------------------------------------------------------------

FLOOR = "raw"
DEFAULT_WAY = "read_page + ours"


def draw_read_path(document: dict[str, Any], path: Path, out: Path) -> list[Image]:
    results = rows_of(document, "results", path)
    if not results:
        raise MalformedError(f"{path}: no results")
    ways: list[str] = []
    backends: list[str] = []
    cpu: dict[tuple[str, str], tuple[float, float, float]] = {}
    for row in results:
        way, backend = text(row, "way", path), text(row, "backend", path)
        median = number(row, "cpu_us_per_read", path)
        if median is None:
            continue
        rounds = row.get("rounds", [])
        if not isinstance(rounds, list):
            raise MalformedError(f"{path}: 'rounds' of {way} on {backend} is not a list")
        spread = [median]
        for value in rounds:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise MalformedError(f"{path}: a round of {way} on {backend} is {value!r}")
            spread.append(float(value))
        ways += [way] if way not in ways else []
        backends += [backend] if backend not in backends else []
        cpu[(way, backend)] = (median, min(spread), max(spread))
    rounds_of = document.get("rounds")
    rounds_note = (
        f"median of {rounds_of} rounds a way; bars: least to most"
        if isinstance(rounds_of, int) and rounds_of > 1
        else "1 round a way (no spread)"
    )
    figure, axes = new_figure(
        "CPU per read, one follower's read alone",
        f"read_path.py: a {document.get('page_bytes', '?')}-byte page over loopback "
        f"keep-alive; {rounds_note}; hatched: the floor",
        (FIGURE_SIZE[0], 1.4 + 0.45 * len(ways)),
    )
    height = 0.8 / max(len(backends), 1)
    floor = {}
    for index, backend in enumerate(backends):
        colour = COLOURS.get(BACKEND_SIDE.get(backend, backend), "#9467bd")
        offset = (index - (len(backends) - 1) / 2) * height
        for position, way in enumerate(ways):
            if (way, backend) not in cpu:
                continue
            median, low, high = cpu[(way, backend)]
            is_floor = way == FLOOR
            axes.barh(
                position + offset,
                median,
                height * 0.95,
                xerr=[[median - low], [high - median]] if high > low else None,
                capsize=2,
                color=colour,
                hatch="////" if is_floor else None,
                edgecolor="black" if is_floor else colour,
                linewidth=0.8 if is_floor else 0,
            )
            # The value past the bar's spread, so that the two do not overlap.
            axes.annotate(
                f"{median:,.0f}",
                xy=(high, position + offset),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
            if is_floor:
                floor[backend] = median
    for backend, value in floor.items():
        colour = COLOURS.get(BACKEND_SIDE.get(backend, backend), "#9467bd")
        axes.axvline(value, linestyle=":", color=colour, linewidth=1.0)
    labels = []
    for way in ways:
        if way == FLOOR:
            labels.append(f"{way} (the floor)")
        elif way == DEFAULT_WAY:
            labels.append(f"{way} (the default)")
        else:
            labels.append(way)
    axes.set_yticks(range(len(ways)), labels)
    for label in axes.get_yticklabels():
        if label.get_text().endswith(("(the floor)", "(the default)")):
            label.set_fontweight("bold")
    axes.invert_yaxis()
    axes.grid(axis="y", visible=False)
    axes.set_xlim(left=0)
    axes.margins(x=0.12)
    axes.set_xlabel("CPU µs per read")
    axes.legend(
        [Patch(color=COLOURS.get(BACKEND_SIDE.get(b, b), "#9467bd")) for b in backends],
        backends,
        loc="lower right",
    )
    target = out / "read-path.svg"
    save(figure, axes, about_lines(document, "read_path"), target)
    return [
        Image(
            target,
            "CPU per read of each way of reading, asyncio and trio side by side",
            "CPU per read (µs) of each way of reading one page, asyncio beside trio "
            "(`read_path.py`); hatched: the floor, raw HTTP/1.1 on anyio streams.",
        )
    ]


# --- main ------------------------------------------------------------------------------

DRAWERS: tuple[tuple[str, Callable[[dict[str, Any], Path, Path], list[Image]]], ...] = (
    ("scale", draw_scale),
    ("streams", draw_streams),
    ("read_path", draw_read_path),
)


def shown(path: Path) -> str:
    """A path as short as it can be said: relative to here when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def markdown(images: list[Image], out: Path) -> list[str]:
    """Each image with its caption, as docs/benchmarks.md embeds them."""
    try:
        folder = out.resolve().relative_to(DOCS.resolve()).as_posix()
    except ValueError:
        folder = DOCS_IMAGES
    lines = []
    for image in images:
        lines += [f"![{image.alt}]({folder}/{image.path.name})", f"*{image.caption}*", ""]
    return lines


def draw_all(results: Path, out: Path) -> tuple[list[Image], list[str], list[str]]:
    """Every image the results allow: those drawn, the files not there, the errors."""
    images: list[Image] = []
    missing: list[str] = []
    errors: list[str] = []
    for name, draw in DRAWERS:
        path = results / f"{name}.json"
        try:
            document = load(path)
            if document is None:
                missing.append(shown(path))
                continue
            with matplotlib.rc_context(STYLE):
                images += draw(document, path, out)
        except MalformedError as exc:
            errors.append(str(exc))
        except (KeyError, TypeError, ValueError) as exc:
            errors.append(f"{path}: not as {name}.py writes it ({type(exc).__name__}: {exc})")
    return images, missing, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--results",
        type=Path,
        default=HERE / "results",
        help="the folder of the benchmarks' JSON (default: benchmarks/results)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="where the SVG images go (default: docs/images/benchmarks)",
    )
    args = parser.parse_args(argv)
    images, missing, errors = draw_all(args.results, args.out)
    for image in images:
        print(f"drew {shown(image.path)}")
    for path in missing:
        print(f"not drawn: no {path}")
    if images:
        print(f"\nTo paste into docs/benchmarks.md (the images are in {shown(args.out)}):\n")
        for line in markdown(images, args.out):
            print(line)
    for error in errors:
        print(f"plots: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
