"""A paper's figures, drawn from the runs of one of its tables or of a grid of their own (PDF
and PNG): learning curves, partition heatmaps, a metric against a hyperparameter, and a
method's own per-round metric (FedCSD's mask filter rate)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from shared.experiments import Cell, Table, declared, declared_one, expand, get_table, load_metrics


@dataclass
class Figure:
    """A paper's figure, drawn from the runs of one of its tables (`table` names it) or of a
    grid that only the figure uses (`table` is a Table that the paper does not list).

    kind:
      curves      global test accuracy and local average accuracy per round, mean with a
                  band of one std over seeds, one panel per setting;
      partitions  client-by-class sample counts (seed 0), one heatmap per setting;
      sweep       the grid's metric against a hyperparameter, one line per method; a column
                  labelled "name=value" is the point (value) of the panel (name);
      round_metric  a number the method logs each round (`value`, e.g. mask_filter_rate);
      custom      `draw_with(cells, runs_dir, out_stem, title, table=...)`, a paper's own
                  protocol on top of the runs (FedCAD's per-class forgetting probe).
    """

    paper: str
    name: str
    caption: str
    kind: str
    table: str | Table
    columns: list[str] | None = None  # the table's settings to draw (default: all)
    rows: list[str] | None = None  # the table's methods to draw (default: all)
    value: str | None = None  # round_metric: the per-round key in metrics.jsonl
    draw_with: Callable | None = None  # custom

    def __post_init__(self):
        if self.kind not in DRAW:
            raise ValueError(f"{self.paper}/{self.name}: unknown figure kind {self.kind!r}; valid: {sorted(DRAW)}")
        if self.kind == "round_metric" and not self.value:
            raise ValueError(f"{self.paper}/{self.name}: a round_metric figure needs value=")
        if (self.kind == "custom") != (self.draw_with is not None):
            raise ValueError(f"{self.paper}/{self.name}: draw_with= goes with kind='custom' and only with it")

    @property
    def source(self) -> Table:
        return self.table if isinstance(self.table, Table) else get_table(self.paper, self.table)

    def cells(self, scale: str, runtime: dict | None = None) -> list[Cell]:
        table = self.source
        cells = [c for c in expand(table, scale, runtime)
                 if (self.columns is None or c.column.label in self.columns)
                 and (self.rows is None or c.row.label in self.rows)]
        if self.kind == "partitions":  # the partition depends on the setting and seed only
            first_row = cells[0].row.label if cells else None
            cells = [c for c in cells if c.row.label == first_row and c.seed == table.seeds[0]]
        return cells


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


def plot_curves(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str) -> None:
    import seaborn as sns

    plt = pyplot()
    records = []
    for c, m in completed(cells, runs_dir):
        for r, g, l in zip(m["eval_rounds"], m["global_acc"], m["local_acc"]):
            records.append(dict(method=c.row.label, setting=c.column.label, seed=c.seed, round=r,
                                **{"global test accuracy": g, "local average accuracy": l}))
    frame = pd.DataFrame.from_records(records).melt(
        id_vars=["method", "setting", "seed", "round"], var_name="metric", value_name="accuracy (%)")
    grid = sns.relplot(data=frame, x="round", y="accuracy (%)", hue="method", row="metric", col="setting",
                       kind="line", errorbar="sd", height=2.6, aspect=1.2, facet_kws={"sharey": False})
    grid.set_titles("{col_name} | {row_name}")
    grid.figure.suptitle(title, y=1.02)
    save(grid.figure, out_stem)
    plt.close(grid.figure)


def plot_partitions(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str) -> None:
    """FedSSD Fig. 6: clients on the x axis, classes on the y axis, counts as colour."""
    import seaborn as sns

    plt = pyplot()
    fig, axes = plt.subplots(1, len(cells), figsize=(3.2 * len(cells), 3.2), squeeze=False)
    for ax, c in zip(axes[0], cells):
        counts = pd.read_csv(runs_dir / c.run_id / "partition.csv", index_col="client").to_numpy()
        sns.heatmap(counts.T, ax=ax, cmap="Blues", cbar=False, annot=counts.size <= 200, fmt="d",
                    annot_kws={"size": 5})
        ax.set_title(c.column.label)
        ax.set_xlabel("client")
        ax.set_ylabel("class")
    fig.suptitle(title)
    fig.tight_layout()
    save(fig, out_stem)
    plt.close(fig)


def plot_sweep(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, table: Table, **_) -> None:
    """FedSSD Fig. 9, FedCSD Figs. 3-4: final accuracy against a hyperparameter's value."""
    import seaborn as sns

    from shared.tables import cell_value

    plt = pyplot()
    records = []
    for c, m in completed(cells, runs_dir):
        parameter, _, value = c.column.label.partition("=")
        records.append(dict(method=c.row.label, parameter=parameter, value=value, seed=c.seed,
                            **{table.metric_for(c.column).label: cell_value(table.metric_for(c.column), m, None)}))
    frame = pd.DataFrame.from_records(records)
    y = frame.columns[-1]
    dodge = 0.2 if frame["method"].nunique() > 1 else False  # seaborn divides by (methods - 1)
    grid = sns.catplot(data=frame, x="value", y=y, hue="method", col="parameter", kind="point", errorbar="sd",
                       height=3, aspect=1.2, sharex=False, sharey=False, markers="o", dodge=dodge)
    grid.set_titles("{col_name}")
    grid.figure.suptitle(title, y=1.04)
    save(grid.figure, out_stem)
    plt.close(grid.figure)


def plot_round_metric(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, value: str, **_) -> None:
    """FedCSD Fig. 5: a method's own per-round number (metrics.jsonl) against the round."""
    import seaborn as sns

    plt = pyplot()
    records = []
    for c, _m in completed(cells, runs_dir):
        for line in (runs_dir / c.run_id / "metrics.jsonl").read_text().splitlines():
            record = json.loads(line)
            records.append(dict(method=c.row.label, setting=c.column.label, seed=c.seed, round=record["round"],
                                **{value: record[value]}))
    frame = pd.DataFrame.from_records(records)
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    sns.lineplot(data=frame, x="round", y=value, hue="setting", style="method", errorbar="sd", ax=ax)
    ax.set_title(title)
    save(fig, out_stem)
    plt.close(fig)


DRAW = {"curves": lambda cells, runs_dir, out_stem, title, **_: plot_curves(cells, runs_dir, out_stem, title),
        "partitions": lambda cells, runs_dir, out_stem, title, **_: plot_partitions(cells, runs_dir, out_stem, title),
        "sweep": plot_sweep, "round_metric": plot_round_metric,
        "custom": lambda cells, runs_dir, out_stem, title, draw_with, **options: draw_with(
            cells, runs_dir, out_stem, title, **options)}


def draw(kind: str, cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, **options) -> None:
    DRAW[kind](cells, Path(runs_dir), out_stem, title, **options)


def build_figure(figure: Figure, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> None:
    from shared.tables import provenance_header

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = figure.cells(scale, runtime)
    draw(figure.kind, cells, Path(runs_dir), out / "figure", f"{figure.paper} {figure.name} (scale: {scale})",
         table=figure.source, value=figure.value, draw_with=figure.draw_with)
    info = {"figure": f"{figure.paper}/{figure.name}", "caption": figure.caption, "from_table": figure.source.name,
            "runs": sorted({c.run_id for c in cells}), **provenance_header(scale)}
    (out / "provenance.yaml").write_text(yaml.safe_dump(info, sort_keys=False))


def paper_figures(paper: str) -> dict[str, Figure]:
    return declared(paper, "FIGURES")


def get_figure(paper: str, name: str) -> Figure:
    return declared_one(paper, "FIGURES", "figure", name)
