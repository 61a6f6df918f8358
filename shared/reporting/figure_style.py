"""How every figure looks: one look per method (`series_styles`, from shared/reporting/palette.py),
whole-number ticks, lines with a band of one std over seeds, titles wrapped to a panel's width,
and the caption, warning and legend around the panels (`finish`), then saved as PDF and PNG.
matplotlib loads only when a figure is drawn (`pyplot`)."""

from __future__ import annotations

import itertools
import math
import textwrap
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from shared.reporting.palette import COLOURS, style


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, out_stem: Path) -> None:
    """PDF and PNG, the same bytes on every build of the same runs (a PDF without its creation
    date): shipped figures are committed, and a rebuild changes only what the runs change."""
    for suffix, metadata in (("pdf", {"CreationDate": None}), ("png", None)):
        fig.savefig(f"{out_stem}.{suffix}", dpi=150, bbox_inches="tight", metadata=metadata)


# --- how methods look -----------------------------------------------------------------------

# Every method the papers compare, in a fixed order: its position picks its colour, marker and
# line style (shared/reporting/palette.py), so that a method looks the same in every figure; there are
# fewer methods than (marker, line style) pairs, so no two methods here share one.
METHOD_ORDER = [
    "FedAvg",
    "FedProx",
    "MOON",
    "FedCurv",
    "FedNTD",
    "FedLSD",
    "FedCAD",
    "FedSSD",
    "FedCSD",
    "FedGKD",
    "FedGKD-VOTE",
    "FedGKD+",
    "FedDistill+",
    "FedGen",
    "FedProto",
    "FedNova",
    "FedAvgM",
    "SCAFFOLD",
    "Base",
]
WARNING_COLOUR = "#b3261e"


def series_styles(labels: list[str]) -> dict[str, dict]:
    """Colour, marker and line style per series (matplotlib keywords): a method of METHOD_ORDER
    keeps its own marker and line style in every figure, and its colour unless a method before it
    in METHOD_ORDER has that colour in this figure (then the first colour free here); any other
    label (a setting, a method not listed) takes the first style no other series here has."""
    labels = list(dict.fromkeys(labels))
    used = {METHOD_ORDER.index(label) for label in labels if label in METHOD_ORDER}
    free = (i for i in itertools.count() if i not in used)
    looks = {label: style(METHOD_ORDER.index(label) if label in METHOD_ORDER else next(free)) for label in labels}
    taken: set[str] = set()

    def rank(label):
        return METHOD_ORDER.index(label) if label in METHOD_ORDER else len(METHOD_ORDER)

    for label in sorted(labels, key=rank):  # stable: the figure's order among labels not listed
        if looks[label]["color"] in taken:
            looks[label]["color"] = next((c for c in COLOURS if c not in taken), looks[label]["color"])
        taken.add(looks[label]["color"])
    return looks


def integer_ticks(axis) -> None:
    """Whole numbers only (rounds, counts): no tick at round 2.5."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def round_step(count: int, most: int = 12) -> int:
    """A tick every 1, 2, 5, 10, 20, 25, 50, 100, ... items, so that at most `most` show."""
    steps = (step * 10**power for power in itertools.count() for step in (1, 2, 2.5, 5))
    return next(int(step) for step in steps if step == int(step) and count / step <= most)


def index_ticks(ax, rows: int, columns: int) -> None:
    """A heatmap's rows and columns numbered from 0 at round steps (0, 20, 40, ... of 200
    classes), at the centres of their cells."""
    for count, set_ticks in ((columns, ax.set_xticks), (rows, ax.set_yticks)):
        positions = np.arange(0, count, round_step(count))
        set_ticks(positions + 0.5, [str(p) for p in positions])
    ax.tick_params(axis="y", labelrotation=0)


def mark_every(points: int) -> int:
    """A marker every few points on long curves (100 rounds), on every point on short ones."""
    return max(1, points // 10)


def panel_title(text: str, panel_width: float, fontsize: float = 9) -> str:
    """`text` in lines as wide as a panel (`panel_width` inches; about 0.6 em a character)."""
    return "\n".join(
        textwrap.fill(line, max(24, int(panel_width * 72 / (0.6 * fontsize)))) for line in text.splitlines()
    )


# --- layout -----------------------------------------------------------------------------------


def finish(
    fig,
    out_stem: Path,
    title: str,
    warning: str | None = None,
    legend: tuple | None = None,
    legend_columns: int | None = None,
) -> None:
    """Title (the paper's caption and the scale) and the warning above the panels, the legend
    below them, then save. The figure grows by the room these take."""
    width, height = fig.get_size_inches()
    chars = max(40, int(width * 11))  # characters of 10.5 pt bold that fit the width
    heading, _, rest = title.partition("\n")
    heading_lines = textwrap.wrap(heading, chars) or [""]
    rest_lines = [line for part in rest.splitlines() for line in textwrap.wrap(part, int(chars * 1.1))]
    warning_lines = textwrap.wrap(warning, int(chars * 1.1)) if warning else []
    line = 0.2  # inches per line of text
    title_lines = heading_lines + rest_lines
    top = 0.15 + line * len(title_lines) + (0.15 + line * len(warning_lines) if warning_lines else 0)
    bottom = 0.0
    if legend:
        handles, labels = legend
        ncol = legend_columns or max(1, min(len(labels), int(width // 1.4)))
        bottom = 0.15 + line * 1.2 * math.ceil(len(labels) / ncol)
    total = height + top + bottom
    fig.set_size_inches(width, total)
    fig.tight_layout(rect=(0, bottom / total, 1, 1 - top / total))
    y = 1 - 0.08 / total
    fig.text(0.5, y, "\n".join(heading_lines), ha="center", va="top", fontsize=10.5, fontweight="bold")
    if rest_lines:
        fig.text(0.5, y - line * len(heading_lines) / total, "\n".join(rest_lines), ha="center", va="top", fontsize=9.5)
    if warning_lines:
        y -= (line * len(title_lines) + 0.12) / total
        fig.text(
            0.5,
            y,
            "\n".join(warning_lines),
            ha="center",
            va="top",
            fontsize=10,
            color=WARNING_COLOUR,
            fontweight="bold",
            bbox={"facecolor": "#fdecea", "edgecolor": WARNING_COLOUR, "boxstyle": "round"},
        )
    if legend:
        fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.0))
    save(fig, out_stem)


def legend_of(axes) -> tuple[list, list[str]]:
    """Each labelled line once, in the order drawn."""
    seen = {}
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    return list(seen.values()), list(seen)


def mean_std_by_round(series: list[tuple[list, list]]) -> pd.DataFrame:
    """Per round, the mean and std (ddof=0) over seeds of (rounds, values) pairs; None values
    (rounds that did not test local models) are left out."""
    records = [(r, v) for rounds, values in series for r, v in zip(rounds, values) if v is not None]
    if not records:
        return pd.DataFrame(columns=["mean", "std"])
    frame = pd.DataFrame.from_records(records, columns=["round", "value"])
    return frame.groupby("round")["value"].agg(mean="mean", std=lambda v: v.std(ddof=0)).sort_index()


def line_with_band(ax, stats: pd.DataFrame, label: str, look: dict) -> None:
    x = stats.index.to_numpy()
    ax.plot(x, stats["mean"], label=label, markevery=mark_every(len(x)), markersize=5, linewidth=1.4, **look)
    ax.fill_between(
        x, stats["mean"] - stats["std"], stats["mean"] + stats["std"], color=look["color"], alpha=0.15, linewidth=0
    )


def coinciding(series: dict[str, pd.DataFrame]) -> list[list[str]]:
    """Groups of two or more labels whose curves are the very same numbers (a method that
    equals FedAvg at a reduced scale): drawn on top of each other, only the last would show."""
    groups: dict[str, list[str]] = defaultdict(list)
    for label, stats in series.items():
        groups[stats.to_json()].append(label)
    return [labels for labels in groups.values() if len(labels) > 1]


def note_coinciding(ax, series: dict[str, pd.DataFrame]) -> None:
    """Say in the panel which curves coincide, so that a hidden one is not taken for missing."""
    groups = coinciding(series)
    if groups:
        # wrapped to stay inside a 3.4-inch panel (layout would shrink the axes to make room)
        text = "\n".join(textwrap.fill("same curve: " + " = ".join(g), 40) for g in groups)
        ax.text(
            0.02,
            0.98,
            text,
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize=7,
            color=WARNING_COLOUR,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )
