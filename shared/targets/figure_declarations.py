"""A paper's figures as data: what each draws (its kind) and from which runs (a table's, or a
grid of its own), beside the tables and searches of shared/targets/table_declarations.py.

Planning (the workflow's start-up, shared.plan, shared.archive) needs a figure's runs, never
its drawing: shared/reporting/figures.py draws them, and this module imports neither it nor
matplotlib or pandas."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from shared.targets.table_declarations import Cell, Table, declared, declared_one, expand, get_table

# What shared/reporting/figures.py can draw (its DRAW; tests/reporting/test_figures.py checks that the two agree)
FIGURE_KINDS = frozenset({"curves", "partitions", "sweep", "round_metric", "custom"})
# What a curves figure can draw per round (CURVE_METRICS there; tests/reporting/test_figures.py checks them too)
CURVE_ACCURACIES = ("global_acc", "local_acc")


@dataclass
class Figure:
    """A paper's figure, drawn from the runs of one of its tables (`table` names it) or of a
    grid that only the figure uses (`table` is a Table that the paper does not list).

    kind:
      curves      global test accuracy (on test data of several domains, their mean) and local
                  average accuracy per round (`accuracies`: which), mean with a band of one std
                  over seeds, one panel per setting (`panels`: the settings in rows, as the paper
                  lays them out, `lettered` as its text cites them; default one row);
      partitions  client-by-class sample counts (seed 0), one heatmap per setting;
      sweep       the grid's metric against a hyperparameter, one line per method; a column
                  labelled "name=value" is the point (value) of the panel (name), one labelled
                  "fixed name=value" (α=0.1 C=0.3) that of the panel of `name` at `fixed`;
      round_metric  a number the method logs each round (`value`, e.g. mask_filter_rate);
      custom      `draw_with(cells, runs_dir, out_stem, title, table=...)`, a paper's own
                  protocol on top of the runs (FedCAD's per-class forgetting probe).

    A custom figure whose protocol is too costly for the drawing job declares it as `probe`:
    `probe(cfg, run_dir, scale)` returns a DataFrame from a cell's finished run (its model.pt),
    computed by a GPU job of its own per cell (the workflow's rule probe, shared/probe_job.py,
    its time limit `probe_cost` times the run's), saved as shared/targets/probes.py names it,
    with `probe_columns` (name -> "text" or "number": a probe from another machine, an
    archive's, is checked against them); draw_with gets the frames, in the order of the cells,
    as `probed=`.
    """

    paper: str
    name: str
    caption: str
    kind: str
    table: str | Table
    columns: list[str] | None = None  # the table's settings to draw (default: all)
    rows: list[str] | None = None  # the table's methods to draw (default: all)
    value: str | None = None  # round_metric: the per-round key in metrics.jsonl
    accuracies: tuple[str, ...] = CURVE_ACCURACIES  # curves: what the settings' panels draw, one block of rows each
    panels: list[list[str]] | None = None  # curves: the settings in rows of panels (they are its `columns`)
    lettered: bool = False  # curves: panels lettered (a), (b), ... in `panels`' order, as the paper's text cites them
    draw_with: Callable | None = None  # custom
    probe: Callable | None = None  # custom: a GPU job's computation on each cell's finished run
    probe_cost: float = 0.0  # a probe's GPU time, in runs of its cell
    probe_columns: dict[str, str] | None = None  # a probe's CSV: column -> "text" | "number"
    # custom: its drawing takes any part of its runs (fewer settings, seeds), so that a shipped
    # figure is drawn from what is finished, as a shipped table is; curves, sweeps and round
    # metrics always do (a partition heatmap draws one run per setting: whole, or it waits)
    draws_part: bool = False

    def __post_init__(self):
        if self.kind not in FIGURE_KINDS:
            raise ValueError(
                f"{self.paper}/{self.name}: unknown figure kind {self.kind!r}; valid: {sorted(FIGURE_KINDS)}"
            )
        self.check_panels()
        if self.kind == "round_metric" and not self.value:
            raise ValueError(f"{self.paper}/{self.name}: a round_metric figure needs value=")
        if (self.kind == "custom") != (self.draw_with is not None):
            raise ValueError(f"{self.paper}/{self.name}: draw_with= goes with kind='custom' and only with it")
        probed = self.probe is not None
        if probed != (self.probe_cost > 0) or probed != bool(self.probe_columns) or (probed and self.kind != "custom"):
            raise ValueError(f"{self.paper}/{self.name}: probe= goes with probe_cost > 0, probe_columns, kind='custom'")
        if probed and not set(self.probe_columns.values()) <= {"text", "number"}:
            raise ValueError(f"{self.paper}/{self.name}: probe_columns map each column to 'text' or 'number'")

    def check_panels(self) -> None:
        """`panels` lay out the settings a curves figure draws, each once; its `columns` follow."""
        if not self.accuracies or not set(self.accuracies) <= set(CURVE_ACCURACIES):
            raise ValueError(
                f"{self.paper}/{self.name}: accuracies= takes some of {list(CURVE_ACCURACIES)}, "
                f"got {list(self.accuracies)}"
            )
        if self.kind != "curves" and self.accuracies != CURVE_ACCURACIES:
            raise ValueError(f"{self.paper}/{self.name}: accuracies= goes with a curves figure")
        if self.lettered and (self.kind != "curves" or self.panels is None):
            raise ValueError(f"{self.paper}/{self.name}: lettered= goes with a curves figure's panels=")
        if self.panels is None:
            return
        placed = [label for row in self.panels for label in row]
        if self.kind != "curves" or not placed or len(set(placed)) != len(placed):
            raise ValueError(f"{self.paper}/{self.name}: panels= lays out a curves figure's settings, each once")
        if self.columns is not None and set(self.columns) != set(placed):
            raise ValueError(f"{self.paper}/{self.name}: panels= and columns= name different settings")
        self.columns = placed

    @property
    def number(self) -> str:
        """The figure as the paper numbers it: "9" of fig9, "3 (bottom)" of fig3_bottom."""
        number, _, part = self.name.removeprefix("fig").partition("_")
        return f"{number} ({part})" if part else number

    @property
    def needs_training(self) -> bool:
        """False for a figure of partitions: it draws its runs' partitions, which the workflow's
        partition job computes without training them (shared/partition_job.py)."""
        return self.kind != "partitions"

    @property
    def draws_partial(self) -> bool:
        """Drawn from the finished part of its runs while some are missing (a probe never is)."""
        return self.probe is None and self.kind != "partitions" and (self.kind != "custom" or self.draws_part)

    @property
    def source(self) -> Table:
        return self.table if isinstance(self.table, Table) else get_table(self.paper, self.table)

    def cells(self, scale: str, runtime: dict | None = None) -> list[Cell]:
        table = self.source
        cells = [
            c
            for c in expand(table, scale, runtime)
            if (self.columns is None or c.column.label in self.columns)
            and (self.rows is None or c.row.label in self.rows)
        ]
        if self.kind == "partitions":  # the partition depends on the setting and seed only
            first_row = cells[0].row.label if cells else None
            cells = [c for c in cells if c.row.label == first_row and c.seed == table.seeds[0]]
        return cells


def paper_figures(paper: str) -> dict[str, Figure]:
    return declared(paper, "FIGURES")


def get_figure(paper: str, name: str) -> Figure:
    return declared_one(paper, "FIGURES", "figure", name)
