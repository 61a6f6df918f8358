"""A paper's figures, drawn from the runs of one of its tables or of a grid of their own (PDF
and PNG): learning curves, partition heatmaps, a metric against a hyperparameter, and a
method's own per-round metric (FedCSD's mask filter rate).

Every figure is titled with the paper's caption and the scale it was built at; a method has the
same colour, marker and line style in every figure (`series_styles`), so the lines stay apart in
black and white; round axes tick at whole rounds; and where a reduced scale makes several
settings or points of a sweep the very same runs (smoke and small cap the local epochs, so
FedSSD Fig. 9's four values of E are one run each), the figure says so in red and the build
prints a warning on stderr.

How a figure looks is shared/reporting/figure_style.py; what its panels show (their titles, a sweep's
key, the settings a scale merges), shared/reporting/figure_settings.py. What a figure is (its kind
and its runs) is declared in shared/targets/figure_declarations.py."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

from shared.reporting.figure_settings import (
    announce,
    merged_settings,
    same_runs,
    same_runs_warning,
    setting_titles,
    sweep_label,
    sweep_panel,
    sweep_titles,
    swept_key,
    swept_setting,
)
from shared.reporting.figure_style import (
    finish,
    index_ticks,
    integer_ticks,
    legend_of,
    line_with_band,
    mean_std_by_round,
    note_coinciding,
    panel_title,
    pyplot,
    series_styles,
)
from shared.reporting.summary import cell_value, read_at_scale
from shared.runs.files import read_history, read_summary
from shared.runs.partition_files import drawn_partition
from shared.runs.provenance import provenance_header
from shared.targets.figure_declarations import CURVE_ACCURACIES, Figure
from shared.targets.papers import display_name
from shared.targets.probes import probe_code, probe_path
from shared.targets.scales import SMOKE_LOCAL_EPOCHS, SMOKE_ROUNDS
from shared.targets.table_declarations import Cell, Metric, Table


def completed(cells: list[Cell], runs_dir: Path) -> list[tuple[Cell, dict]]:
    pairs = [(c, read_summary(Path(runs_dir) / c.run_id)) for c in cells]
    return [(c, m) for c, m in pairs if m["status"] == "completed"]


# --- the kinds of figure ---------------------------------------------------------------------

CURVE_METRICS = {"global_acc": "global test accuracy (%)", "local_acc": "local average accuracy (%)"}
DOMAIN_MEAN = f"global {Metric('domain_avg').axis_label}"  # global_acc where the test data has domains
ROUND_VALUES = {
    "mask_filter_rate": "mask filter rate (fraction of samples)",
    "wrong_label_filter_rate": "filter rate (fraction of wrong soft labels)",
}


def plot_curves(
    cells: list[Cell],
    runs_dir: Path,
    out_stem: Path,
    title: str,
    table: Table | None = None,
    scale: str | None = None,
    accuracies: tuple[str, ...] = CURVE_ACCURACIES,
    panels: list[list[str]] | None = None,
    lettered: bool = False,
    **_,
):
    """Global test accuracy and the local models' average accuracy per round (`accuracies`),
    mean with a band of one std over seeds, one line per method; a panel per setting, in one row
    or in the rows of `panels` (FedGKD Fig. 4: a dataset a row), a block of rows per accuracy.
    On test data of several domains the global accuracy is their mean (`accuracy_by_round`);
    `lettered`: each panel's title starts with its letter in the paper's layout, "(a) "."""
    plt = pyplot()
    done = completed(cells, runs_dir)
    present = list(dict.fromkeys(c.column.label for c in cells))
    layout = panels or [present]
    places = [(key, setting) for key in accuracies for row in layout for setting in row]
    letters = {place: f"({chr(ord('a') + i)}) " for i, place in enumerate(places)} if lettered else {}
    # a figure drawn from part of its settings (shipped, or on a copy) lays out those it has
    rows = [row for row in ([s for s in row if s in present] for row in layout) if row]
    methods = list(dict.fromkeys(c.row.label for c in cells))
    looks = series_styles(methods)
    titles = setting_titles(cells, table)
    width = max(len(row) for row in rows)
    fig, axes = plt.subplots(
        len(accuracies) * len(rows), width, figsize=(3.4 * width, 2.7 * len(accuracies) * len(rows)), squeeze=False
    )
    for k, key in enumerate(accuracies):
        for r, row in enumerate(rows):
            for j in range(width):
                ax = axes[k * len(rows) + r][j]
                if j < len(row):
                    setting = [(c, m) for c, m in done if c.column.label == row[j]]
                    label = curves_panel(ax, runs_dir, setting, methods, key, looks)
                    heading = f"{letters.get((key, row[j]), '')}{titles[row[j]]}\n{label.replace(' (%)', '')}"
                    ax.set_title(panel_title(heading, 3.4), fontsize=9)
                    ax.set_ylabel(label)
                else:
                    ax.set_axis_off()
    warning = announce(same_runs(cells), out_stem, scale)
    finish(fig, out_stem, title, warning, legend_of(axes))
    plt.close(fig)
    return fig


def curves_panel(ax, runs_dir: Path, done: list[tuple[Cell, dict]], methods: list[str], key: str, looks: dict) -> str:
    """One setting's accuracy (`key`) per round: a line per method, over its seeds; returns what
    it drew (the axis label)."""
    drawn, by_domain = {}, key == "global_acc" and any(m.get("domain_acc") for _, m in done)
    for method in methods:
        runs = [accuracy_by_round(runs_dir, c, m, key, by_domain) for c, m in done if c.row.label == method]
        stats = mean_std_by_round(runs)
        if len(stats):
            line_with_band(ax, stats, method, looks[method])
            drawn[method] = stats
    note_coinciding(ax, drawn)
    ax.set_xlabel("communication round")
    integer_ticks(ax.xaxis)
    return DOMAIN_MEAN if by_domain else CURVE_METRICS[key]


def accuracy_by_round(runs_dir: Path, cell: Cell, metrics: dict, key: str, by_domain: bool) -> tuple[list, list]:
    """A run's accuracy in each evaluated round; `by_domain`: the global model's mean over the
    test data's domains, each round's as the table reports the last (FedCSD Table II's Average)."""
    if not by_domain:
        return metrics["eval_rounds"], metrics.get(key) or []
    records = [r for r in read_history(runs_dir / cell.run_id) or [] if "domain_acc" in r]
    return [r["round"] for r in records], [float(np.mean(list(r["domain_acc"].values()))) for r in records]


def partition_heatmap(ax, counts: np.ndarray) -> None:
    """One partition as the papers draw it: clients on the x axis, classes on the y axis,
    training samples as colour, the counts written in where they fit. The one drawing of a
    partition: FedSSD Fig. 6's panels and `python -m shared.curves --partition`."""
    import seaborn as sns

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
    ax.set_xlabel("client")
    ax.set_ylabel("class")


def plot_partitions(
    cells: list[Cell],
    runs_dir: Path,
    out_stem: Path,
    title: str,
    table: Table | None = None,
    scale: str | None = None,
    **_,
):
    """FedSSD Fig. 6: each setting's partition (`partition_heatmap`), a colour bar on every panel."""
    plt = pyplot()
    titles = setting_titles(cells, table)
    fig, axes = plt.subplots(1, len(cells), figsize=(3.9 * len(cells), 3.6), squeeze=False)
    for ax, c in zip(axes[0], cells):
        partition_heatmap(ax, np.array(drawn_partition(runs_dir, c.run_id)))
        ax.set_title(panel_title(f"{titles[c.column.label]}\nsamples per client and class", 3.9), fontsize=9)
    warning = announce(same_runs(cells), out_stem, scale)
    finish(fig, out_stem, title, warning)
    plt.close(fig)
    return fig


def plot_sweep(
    cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, table: Table, scale: str | None = None, **_
):
    """FedSSD Fig. 9, FedCSD Figs. 3-4, FedGKD Fig. 3's lower half: the table's metric against a
    hyperparameter's value, mean and one std over seeds, one line per method; a column labelled
    "name=value" is the point (value) of the panel (name), "fixed name=value" that of the panel
    of `name` at `fixed` (`sweep_label`)."""
    plt = pyplot()

    def point(c):
        return sweep_label(c.column.label)[2]

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
                    values[point(c)].append(cell_value(read_at_scale(table.metric_for(c.column), table, c), m, None))
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
        records = read_history(runs_dir / c.run_id) or []
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
    "smoke": f"reduced scale: synthetic data, {SMOKE_ROUNDS} rounds of {SMOKE_LOCAL_EPOCHS} local epochs; "
    "not a paper result",
}


def figure_title(figure: Figure, scale: str) -> str:
    """ "FedSSD Fig. 9: <the paper's caption>" and, on a second line, the scale."""
    name = display_name(figure.paper)
    return f"{name} Fig. {figure.number}: {figure.caption}\nScale: {scale} ({SCALE_NOTES.get(scale, 'reduced scale')})"


def read_probe(figure: Figure, cell: Cell, runs_dir: str | Path):
    """The DataFrame the figure's probe saved for the cell's run (the workflow's rule probe)."""
    import pandas as pd

    path = probe_path(runs_dir, figure.paper, figure.name, cell.run_id, probe_code(figure))
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {figure.paper}/{figure.name}'s probe of run {cell.run_id} is not there")
    return pd.read_csv(path)


def build_figure(
    figure: Figure, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None
) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = figure.cells(scale, runtime)
    probed = {"probed": [read_probe(figure, cell, runs_dir) for cell in cells]} if figure.probe else {}
    draw(
        figure.kind,
        cells,
        Path(runs_dir),
        out / "figure",
        figure_title(figure, scale),
        table=figure.source,
        value=figure.value,
        accuracies=figure.accuracies,
        panels=figure.panels,
        lettered=figure.lettered,
        draw_with=figure.draw_with,
        scale=scale,
        **probed,
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
