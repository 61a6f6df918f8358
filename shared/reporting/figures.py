"""A paper's figures, drawn from the runs of one of its tables or of a grid of their own (PDF
and PNG): learning curves, partition heatmaps, a metric against a hyperparameter, and a
method's own per-round metric (FedCSD's mask filter rate).

Every figure is titled with the paper's caption and the scale it was built at; a method has the
same colour, marker and line style in every figure (`series_styles`), so the lines stay apart in
black and white; round axes tick at whole rounds; and where a reduced scale makes several
settings or points of a sweep the very same runs (smoke and small cap the local epochs, so
FedSSD Fig. 9's four values of E are one run each), the figure says so in red and the build
prints a warning on stderr.

What a figure is (its kind and its runs) is declared in shared/targets/figure_declarations.py."""

from __future__ import annotations

import itertools
import json
import math
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import yaml

from shared.config.dotted import flatten
from shared.data.catalog import DATASETS
from shared.methods.papers import display_name
from shared.reporting.palette import COLOURS, style
from shared.runs.metrics import cell_value
from shared.runs.provenance import provenance_header
from shared.targets.experiments import SMOKE_LOCAL_EPOCHS, SMOKE_ROUNDS, Cell, Table, cell_overrides, load_metrics
from shared.targets.figure_declarations import Figure


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def completed(cells: list[Cell], runs_dir: Path) -> list[tuple[Cell, dict]]:
    pairs = [(c, load_metrics(runs_dir, c.run_id)) for c in cells]
    return [(c, m) for c, m in pairs if m["status"] == "completed"]


def save(fig, out_stem: Path) -> None:
    for suffix in ("pdf", "png"):
        fig.savefig(f"{out_stem}.{suffix}", dpi=150, bbox_inches="tight")


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


# --- what a panel shows -----------------------------------------------------------------------

DATASET_NAMES = {
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "tiny_imagenet": "Tiny-ImageNet",
    "femnist": "FEMNIST",
    "femnist_digits": "FEMNIST (digits)",
    "office_caltech10": "Office-Caltech-10",
    "ag_news": "AG News",
    "sst5": "SST-5",
    "synthetic": "synthetic",
    "imagefolder": "image folder",
}
# Swept config keys and what they are (the x axis of a sweep); others show the key itself.
SWEPT = {
    "local.epochs": "local epochs",
    "federation.participation": "client sample ratio",
    "federation.rounds": "communication rounds",
    "partition.beta": "Dirichlet concentration",
    "partition.clients": "clients",
    "local.lr": "learning rate",
    "local.batch_size": "batch size",
    "method.mu": "loss weight",
    "method.tau": "temperature",
    "method.temperature": "temperature",
    "method.tma": "teacher momentum",
    "method.alpha": "weight",
    "method.beta": "weight",
    "method.gamma": "weight",
    "method.m_max": "upper bound",
    "method.lam": "weight",
}
ROUND_VALUES = {"mask_filter_rate": "mask filter rate (fraction of samples)"}


def paper_overrides(cell: Cell, table: Table | None) -> dict:
    """The cell's settings before any scale replaced them (the dataset the paper used, not its
    smoke-scale synthetic stand-in); the resolved config where the table is not known."""
    if table is not None:
        return cell_overrides(table, cell.row, cell.column, cell.seed)
    return {"dataset": {"name": cell.config.dataset.name}}


def setting_title(cell: Cell, table: Table | None = None) -> str:
    """What a panel's runs are, from their config: dataset (classes), partition, clients and
    the share sampled per round, e.g. "CIFAR-10 (10 classes), Dir(0.5), 10 clients"."""
    cfg = cell.config
    name = paper_overrides(cell, table).get("dataset", {}).get("name", "cifar10")
    if cfg.dataset.name == "synthetic":
        classes = cfg.dataset.synthetic.num_classes
    else:
        classes = DATASETS[name].classes if name in DATASETS else None
    dataset = DATASET_NAMES.get(name, name) + (f" ({classes} classes)" if classes else "")
    part = cfg.partition
    partition = {
        "dirichlet": f"Dir({part.beta:g})",
        "dirichlet_balanced": f"balanced Dir({part.beta:g})",
        "iid": "IID",
        "classes": f"{part.k} classes per client",
        "writers": "split by writer",
        "domains": "one domain per client",
    }.get(part.kind, part.kind)
    text = f"{dataset}, {partition}, {part.clients} clients"
    if cfg.federation.participation < 1:
        text += f", C={cfg.federation.participation:g}"
    return text


def setting_titles(cells: list[Cell], table: Table | None = None) -> dict[str, str]:
    """Column label -> the title of its panels: `setting_title`, and where two settings read
    the same (they differ in something the title leaves out) the setting's own label after it."""
    first = {c.column.label: c for c in reversed(cells)}
    titles = {label: setting_title(first[label], table) for label in dict.fromkeys(c.column.label for c in cells)}
    repeated = {t for t in titles.values() if list(titles.values()).count(t) > 1}
    return {label: f"{title}; {label}" if title in repeated else title for label, title in titles.items()}


def panel_title(text: str, panel_width: float, fontsize: float = 9) -> str:
    """`text` in lines as wide as a panel (`panel_width` inches; about 0.6 em a character)."""
    return "\n".join(
        textwrap.fill(line, max(24, int(panel_width * 72 / (0.6 * fontsize)))) for line in text.splitlines()
    )


def swept_key(cells: list[Cell], table: Table | None) -> str | None:
    """The config key whose value differs between the points of a sweep (before scaling)."""
    points = defaultdict(dict)
    for c in cells:
        values = flatten(paper_overrides(c, table))
        values.pop("seed", None)
        points[c.column.label] = values
    keys = sorted({k for v in points.values() for k in v})
    varying = [k for k in keys if len({json.dumps(v.get(k), sort_keys=True) for v in points.values()}) > 1]
    return varying[0] if len(varying) == 1 else None


# --- reduced scales that merge settings -------------------------------------------------------


def same_runs(cells: list[Cell], panel: Callable[[Cell], object] = lambda c: None) -> list[list[str]]:
    """Groups of two or more settings (column labels) of one panel that are exactly the same run
    ids although the paper's settings differ: a scale that caps what they vary (smoke's 2 local
    epochs for E = 1, 5, 10, 20) makes them one experiment. Settings that differ only in what
    they read off the runs (accuracy and rounds to a target, a domain's accuracy, the accuracy
    at round 50) are the same runs at every scale, by design, and are not listed."""
    runs: dict[tuple, set] = defaultdict(set)
    settings: dict[str, set] = defaultdict(set)  # what each label asks of the runs, before any scale
    for c in cells:
        runs[(panel(c), c.column.label)].add(c.run_id)
        settings[c.column.label].add(
            json.dumps([c.column.config, c.row.per_column.get(c.column.label)], sort_keys=True)
        )
    groups = defaultdict(list)
    for (key, label), ids in runs.items():
        groups[(key, frozenset(ids))].append(label)
    return [labels for labels in groups.values() if len({frozenset(settings[label]) for label in labels}) > 1]


def sweep_panel(table: Table) -> Callable[[Cell], tuple[str, str]]:
    """A sweep's panel of a cell: the parameter its column varies ("E" of "E=5") and its metric."""
    return lambda c: (
        c.column.label.partition("=")[0] if "=" in c.column.label else "setting",
        table.metric_for(c.column).label,
    )


def merged_settings(kind: str, cells: list[Cell], table: Table | None = None) -> list[list[str]]:
    """`same_runs` within the panels of a figure of this kind (a sweep's points per parameter)."""
    return same_runs(cells, sweep_panel(table)) if kind == "sweep" and table is not None else same_runs(cells)


def same_runs_warning(groups: list[list[str]], scale: str | None) -> str | None:
    if not groups:
        return None
    where = f"at scale {scale}" if scale else "at this scale"
    merged = "; ".join(", ".join(g) for g in groups)
    return (
        f"Warning: {where}, {merged} are the same runs (the scale caps the value they vary), "
        f"so their points cannot differ."
    )


def announce(groups: list[list[str]], out_stem: Path, scale: str | None) -> str | None:
    """The warning drawn on the figure, also printed on stderr (the job's output); None where no
    settings coincide."""
    text = same_runs_warning(groups, scale)
    if text:
        print(f"warning: {out_stem}: {text.removeprefix('Warning: ')}", file=sys.stderr)
    return text


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


# --- the kinds of figure ---------------------------------------------------------------------

CURVE_METRICS = (("global_acc", "global test accuracy (%)"), ("local_acc", "local average accuracy (%)"))


def plot_curves(
    cells: list[Cell],
    runs_dir: Path,
    out_stem: Path,
    title: str,
    table: Table | None = None,
    scale: str | None = None,
    **_,
):
    """Global test accuracy and the local models' average accuracy per round, mean with a band
    of one std over seeds; one column of panels per setting, one line per method."""
    plt = pyplot()
    done = completed(cells, runs_dir)
    settings = list(dict.fromkeys(c.column.label for c in cells))
    methods = list(dict.fromkeys(c.row.label for c in cells))
    looks = series_styles(methods)
    titles = setting_titles(cells, table)
    fig, axes = plt.subplots(2, len(settings), figsize=(3.4 * len(settings), 5.4), squeeze=False)
    for j, setting in enumerate(settings):
        for i, (key, label) in enumerate(CURVE_METRICS):
            ax = axes[i][j]
            drawn = {}
            for method in methods:
                runs = [
                    (m["eval_rounds"], m.get(key) or [])
                    for c, m in done
                    if c.column.label == setting and c.row.label == method
                ]
                stats = mean_std_by_round(runs)
                if len(stats):
                    line_with_band(ax, stats, method, looks[method])
                    drawn[method] = stats
            note_coinciding(ax, drawn)
            ax.set_title(panel_title(f"{titles[setting]}\n{label.replace(' (%)', '')}", 3.4), fontsize=9)
            ax.set_xlabel("communication round")
            ax.set_ylabel(label)
            integer_ticks(ax.xaxis)
    warning = announce(same_runs(cells), out_stem, scale)
    finish(fig, out_stem, title, warning, legend_of(axes))
    plt.close(fig)
    return fig


def plot_partitions(
    cells: list[Cell],
    runs_dir: Path,
    out_stem: Path,
    title: str,
    table: Table | None = None,
    scale: str | None = None,
    **_,
):
    """FedSSD Fig. 6: clients on the x axis, classes on the y axis, training samples as colour,
    with a colour bar on every panel."""
    import seaborn as sns

    plt = pyplot()
    titles = setting_titles(cells, table)
    fig, axes = plt.subplots(1, len(cells), figsize=(3.9 * len(cells), 3.6), squeeze=False)
    for ax, c in zip(axes[0], cells):
        counts = pd.read_csv(runs_dir / c.run_id / "partition.csv", index_col="client").to_numpy()
        sns.heatmap(
            counts.T,
            ax=ax,
            cmap="Blues",
            cbar=True,
            cbar_kws={"label": "training samples"},
            annot=counts.size <= 200,
            fmt="d",
            annot_kws={"size": 5},
        )
        index_ticks(ax, rows=counts.shape[1], columns=counts.shape[0])
        ax.set_title(panel_title(f"{titles[c.column.label]}\nsamples per client and class", 3.9), fontsize=9)
        ax.set_xlabel("client")
        ax.set_ylabel("class")
    warning = announce(same_runs(cells), out_stem, scale)
    finish(fig, out_stem, title, warning)
    plt.close(fig)
    return fig


def swept_setting(cells: list[Cell], table: Table, name: str) -> str:
    """The setting a sweep panel varies, in words and by the paper's symbol (`name`, "μ" of
    "μ=0.1"): "loss weight μ"; the symbol alone where no config key, or several, vary."""
    swept = swept_key(cells, table)
    return f"{SWEPT.get(swept, swept)} {name}" if swept else name


def sweep_titles(cells: list[Cell], table: Table) -> dict[tuple[str, str], str]:
    """Each sweep panel's title: its metric against the setting it varies, so that panels of
    one figure (FedCSD Fig. 3's μ and τ) are told apart and each says what it sweeps."""
    panel = sweep_panel(table)
    panels = dict.fromkeys(panel(c) for c in cells)
    return {
        key: f"{key[1]} against {swept_setting([c for c in cells if panel(c) == key], table, key[0])}" for key in panels
    }


def plot_sweep(
    cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, table: Table, scale: str | None = None, **_
):
    """FedSSD Fig. 9, FedCSD Figs. 3-4: the table's metric against a hyperparameter's value,
    mean and one std over seeds, one line per method; a column labelled "name=value" is the
    point (value) of the panel (name)."""
    plt = pyplot()

    def point(c):
        return c.column.label.partition("=")[2] if "=" in c.column.label else c.column.label

    panel = sweep_panel(table)
    done = completed(cells, runs_dir)
    titles = sweep_titles(cells, table)
    panels = list(titles)
    methods = list(dict.fromkeys(c.row.label for c in cells))
    looks = series_styles(methods)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, key in zip(axes[0], panels):
        in_panel = [c for c in cells if panel(c) == key]
        points = list(dict.fromkeys(point(c) for c in in_panel))
        metric = table.metric_for(in_panel[0].column)
        width = 0.5 / max(1, len(methods) - 1) if len(methods) > 1 else 0.0
        for k, method in enumerate(methods):
            values = defaultdict(list)
            for c, m in done:
                if panel(c) == key and c.row.label == method:
                    values[point(c)].append(cell_value(table.metric_for(c.column), m, None))
            xs = [i for i, p in enumerate(points) if values[p]]
            if not xs:
                continue
            means = [float(np.nanmean(values[points[i]])) for i in xs]
            stds = [float(np.nanstd(values[points[i]])) for i in xs]
            offset = (k - (len(methods) - 1) / 2) * width if len(methods) > 1 else 0.0
            ax.errorbar(
                [x + offset for x in xs],
                means,
                yerr=stds,
                label=method,
                capsize=3,
                markersize=6,
                linewidth=1.4,
                **looks[method],
            )
        ax.set_xticks(range(len(points)), points)
        swept = swept_key(in_panel, table)
        ax.set_xlabel(swept_setting(in_panel, table, key[0]) + (f" ({swept})" if swept else ""))
        ax.set_ylabel(metric.axis_label)
        ax.set_title(titles[key], fontsize=9)
        if not metric.higher_is_better:
            integer_ticks(ax.yaxis)
    warning = announce(merged_settings("sweep", cells, table), out_stem, scale)
    finish(fig, out_stem, title, warning, legend_of(axes))
    plt.close(fig)
    return fig


def plot_round_metric(
    cells: list[Cell],
    runs_dir: Path,
    out_stem: Path,
    title: str,
    value: str,
    table: Table | None = None,
    scale: str | None = None,
    **_,
):
    """FedCSD Fig. 5: a method's own per-round number (metrics.jsonl) against the round, one
    line per setting (and method, where there are several)."""
    plt = pyplot()
    methods = list(dict.fromkeys(c.row.label for c in cells))

    def label_of(c):
        return c.column.label if len(methods) == 1 else f"{c.row.label}, {c.column.label}"

    series = defaultdict(list)
    for c, _m in completed(cells, runs_dir):
        records = [
            json.loads(line) for line in (runs_dir / c.run_id / "metrics.jsonl").read_text().splitlines() if line
        ]
        series[label_of(c)].append(
            ([r["round"] for r in records if value in r], [r[value] for r in records if value in r])
        )
    labels = list(dict.fromkeys(label_of(c) for c in cells))
    looks = series_styles(labels)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for label in labels:
        stats = mean_std_by_round(series[label])
        if len(stats):
            line_with_band(ax, stats, label, looks[label])
    ax.set_xlabel("communication round")
    ax.set_ylabel(ROUND_VALUES.get(value, value.replace("_", " ")))
    ax.set_title(f"{methods[0] if len(methods) == 1 else 'methods'}: {value.replace('_', ' ')} per round", fontsize=9)
    integer_ticks(ax.xaxis)
    warning = announce(same_runs(cells), out_stem, scale)
    finish(fig, out_stem, title, warning, legend_of([ax]), legend_columns=min(3, len(labels)) or 1)
    plt.close(fig)
    return fig


DRAW = {
    "curves": plot_curves,
    "partitions": plot_partitions,
    "sweep": plot_sweep,
    "round_metric": plot_round_metric,
    "custom": lambda cells, runs_dir, out_stem, title, draw_with, **options: draw_with(
        cells, runs_dir, out_stem, title, **options
    ),
}


def draw(kind: str, cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, **options):
    """Draw and save `out_stem`.pdf/.png; returns the matplotlib figure where the kind does."""
    return DRAW[kind](cells, Path(runs_dir), out_stem, title, **options)


SCALE_NOTES = {
    "paper": "the paper's protocol",
    "small": "reduced scale: real data, a tenth of the rounds, at most 2 local epochs; not a paper result",
    "smoke": f"reduced scale: synthetic data, {SMOKE_ROUNDS} rounds of {SMOKE_LOCAL_EPOCHS} local epochs; not a paper result",
}


def figure_title(figure: Figure, scale: str) -> str:
    """ "FedSSD Fig. 9: <the paper's caption>" and, on a second line, the scale."""
    number = figure.name[3:] if figure.name.startswith("fig") else figure.name
    name = display_name(figure.paper)
    return f"{name} Fig. {number}: {figure.caption}\nScale: {scale} ({SCALE_NOTES.get(scale, 'reduced scale')})"


def build_figure(
    figure: Figure, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None
) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = figure.cells(scale, runtime)
    draw(
        figure.kind,
        cells,
        Path(runs_dir),
        out / "figure",
        figure_title(figure, scale),
        table=figure.source,
        value=figure.value,
        draw_with=figure.draw_with,
        scale=scale,
    )
    info = {
        "figure": f"{figure.paper}/{figure.name}",
        "caption": figure.caption,
        "from_table": figure.source.name,
        "runs": sorted({c.run_id for c in cells}),
        **provenance_header(scale),
    }
    warning = same_runs_warning(merged_settings(figure.kind, cells, figure.source), scale)
    if warning:
        info["warning"] = warning.removeprefix("Warning: ")
    (out / "provenance.yaml").write_text(yaml.safe_dump(info, sort_keys=False))
