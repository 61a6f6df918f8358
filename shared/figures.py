"""Figures drawn from a table's runs: learning curves and partition heatmaps (PDF and PNG)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from shared.experiments import Cell, expand, get_table, load_metrics, paper_module


@dataclass
class Figure:
    """A paper's figure, drawn from the runs of one of its tables.

    kind: "curves" (global test accuracy and local average accuracy per round, mean with a
    band of one std over seeds) or "partitions" (client-by-class sample counts, seed 0).
    """

    paper: str
    name: str
    caption: str
    kind: str
    table: str
    columns: list[str] | None = None  # the table's settings to draw (default: all)
    rows: list[str] | None = None  # the table's methods to draw (default: all)

    def __post_init__(self):
        if self.kind not in ("curves", "partitions"):
            raise ValueError(f"{self.paper}/{self.name}: unknown figure kind {self.kind!r}")

    def cells(self, scale: str, runtime: dict | None = None) -> list[Cell]:
        table = get_table(self.paper, self.table)
        cells = [c for c in expand(table, scale, runtime)
                 if (self.columns is None or c.column.label in self.columns)
                 and (self.rows is None or c.row.label in self.rows)]
        if self.kind == "partitions":  # the partition depends on the setting and seed only
            first_row = cells[0].row.label if cells else None
            cells = [c for c in cells if c.row.label == first_row and c.seed == table.seeds[0]]
        return cells


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str) -> None:
    import seaborn as sns

    plt = _pyplot()
    records = []
    for c in cells:
        m = load_metrics(runs_dir, c.run_id)
        if m["status"] != "completed":
            continue
        for r, g, l in zip(m["eval_rounds"], m["global_acc"], m["local_acc"]):
            records.append(dict(method=c.row.label, setting=c.column.label, seed=c.seed, round=r,
                                **{"global test accuracy": g, "local average accuracy": l}))
    frame = pd.DataFrame.from_records(records).melt(
        id_vars=["method", "setting", "seed", "round"], var_name="metric", value_name="accuracy (%)")
    grid = sns.relplot(data=frame, x="round", y="accuracy (%)", hue="method", row="metric", col="setting",
                       kind="line", errorbar="sd", height=2.6, aspect=1.2, facet_kws={"sharey": False})
    grid.set_titles("{col_name} | {row_name}")
    grid.figure.suptitle(title, y=1.02)
    for suffix in ("pdf", "png"):
        grid.savefig(f"{out_stem}.{suffix}", dpi=150, bbox_inches="tight")
    plt.close(grid.figure)


def plot_partitions(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str) -> None:
    """FedSSD Fig. 6: clients on the x axis, classes on the y axis, counts as colour."""
    import seaborn as sns

    plt = _pyplot()
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
    for suffix in ("pdf", "png"):
        fig.savefig(f"{out_stem}.{suffix}", dpi=150)
    plt.close(fig)


def draw(kind: str, cells: list[Cell], runs_dir: Path, out_stem: Path, title: str) -> None:
    {"curves": plot_curves, "partitions": plot_partitions}[kind](cells, runs_dir, out_stem, title)


def build_figure(figure: Figure, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> None:
    from shared.tables import provenance_header

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = figure.cells(scale, runtime)
    draw(figure.kind, cells, Path(runs_dir), out / "figure", f"{figure.paper} {figure.name} (scale: {scale})")
    info = {"figure": f"{figure.paper}/{figure.name}", "caption": figure.caption, "from_table": figure.table,
            "runs": sorted({c.run_id for c in cells}), **provenance_header(scale)}
    (out / "provenance.yaml").write_text(yaml.safe_dump(info, sort_keys=False))


def paper_figures(paper: str) -> dict[str, Figure]:
    return {f.name: f for f in getattr(paper_module(paper), "FIGURES", [])}


def get_figure(paper: str, name: str) -> Figure:
    from shared.config import ConfigError

    figures = paper_figures(paper)
    if name not in figures:
        raise ConfigError(f"{paper} has no figure {name!r}; valid: {sorted(figures)}")
    return figures[name]
