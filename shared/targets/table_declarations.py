"""Tables as data: a paper module declares each table once (its methods, settings, seeds,
metric and the paper's numbers); this module expands a table into fully resolved run configs
at a given scale (shared/targets/scales.py), and the workflow turns finished runs back into the table.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Callable

from shared.config.dotted import deep_merge, flatten, nested
from shared.config.schema import ConfigError, RunConfig, run_id
from shared.methods.registry import method_names
from shared.targets.papers import paper_names, paper_tables_module
from shared.targets.scales import SCALE_SEEDS, SCALES, check_scale

# The MOON / NIID-Bench protocol on CIFAR-10 that FedCAD and FedSSD both state: FedAvg-CNN,
# 10 clients, all participating, Dir(0.5), 100 rounds, E=10, B=64, SGD lr 0.01, momentum 0.9;
# the partition drawn as NIID-Bench's code draws it (partition.rng=niid_bench: seed s is its split s).
MOON_CIFAR10 = {
    "dataset": {"name": "cifar10"},
    "model": {"name": "fedavg_cnn"},
    "partition": {"kind": "dirichlet", "beta": 0.5, "clients": 10, "rng": "niid_bench"},
    "federation": {"rounds": 100, "participation": 1.0},
    "local": {"epochs": 10, "batch_size": 64, "lr": 0.01, "momentum": 0.9, "weight_decay": 0.0},
}


@dataclass(frozen=True)
class Reported:
    """A number as the paper prints it: mean and, where given, the spread over seeds."""

    mean: float | None
    std: float | None = None


@dataclass(frozen=True)
class Inconsistency:
    """A printed number the paper contradicts elsewhere (its own marks, averages, text or other
    tables). The table keeps the printed number; the comparison marks the cell with `note`;
    `implied` is what the other evidence gives, where it gives a number (claims are checked on
    the paper's numbers with it)."""

    row: str
    column: str
    note: str
    implied: float | None = None


@dataclass
class Row:
    """A method with the hyperparameters the paper states for it (per column where they vary)."""

    label: str
    method: dict
    config: dict = field(default_factory=dict)  # other overrides, e.g. MOON's projection head
    per_column: dict[str, dict] = field(default_factory=dict)  # column label -> overrides
    # A reading of row `reading_of`'s method that is not the paper's text (its equation read
    # another way, `reading` says how): shown beside that row and labelled so in every output,
    # never given a paper number, judged on that row's claims beside it
    reading_of: str | None = None
    reading: str = ""
    # An ablation's variant: which of the method's components (Table.components) it keeps, printed
    # as the paper's ticks and crosses; None: no variant of the method (FedAvg's "-")
    components: tuple[str, ...] | None = None
    latex: str | None = None  # label in table.tex, as the paper prints it (defaults to the label)

    @property
    def implemented(self) -> bool:
        # imported here, as load_config in `expand`: the method registry loads every method and
        # torch, and the workflow reads this module on every start (shared/targets/expansion_cache.py)

        return self.method["name"] in method_names()


# Each metric kind in a few words (table headers) and in full (figure axes)
METRIC_PHRASES = {
    "final_acc": ("final acc", "final global test accuracy"),
    "best_acc": ("best acc", "best global test accuracy"),
    "acc_at": ("accuracy at round {round}", "global test accuracy at round {round}"),
    "rounds_to": ("rounds to {target:g}%", "rounds to {target:g}% test accuracy"),
    "rounds_to_row": ("rounds to {reference}'s final accuracy", "rounds to {reference}'s final accuracy"),
    "domain_acc": ("accuracy on {domain}", "test accuracy on {domain}"),
    "domain_avg": ("domain avg", "mean test accuracy over domains"),
}


@dataclass(frozen=True)
class Metric:
    """What a cell reports, computed from each run's per-round curve.

    final_acc / best_acc: global test accuracy (%) at the last round / at its best round.
    rounds_to: the first round reaching `target` % (FedCAD's T(x%)).
    rounds_to_row: the first round reaching the final accuracy of row `reference` in the
        same column at the same seed (FedSSD's T); `reference`'s own is its rounds.
    acc_at: global accuracy at round `round` (FedGKD Table 6).
    domain_acc / domain_avg: the final global model's accuracy on one domain's test split /
        the mean over domains (FedCSD Table II, Office-Caltech-10).
    """

    kind: str = "final_acc"
    target: float | None = None
    reference: str | None = None
    round: int | None = None
    domain: str | None = None

    def __post_init__(self):
        required = {"rounds_to": "target", "rounds_to_row": "reference", "acc_at": "round", "domain_acc": "domain"}
        if self.kind not in METRIC_PHRASES:
            raise ValueError(f"metric kind {self.kind!r} is unknown")
        if self.kind in required and getattr(self, required[self.kind]) is None:
            raise ValueError(f"metric {self.kind} needs {required[self.kind]}=")

    @property
    def counts_rounds(self) -> bool:
        """A rounds-to-target metric: fewer is better, and a target may never be reached."""
        return self.kind.startswith("rounds_to")

    @property
    def higher_is_better(self) -> bool:
        return not self.counts_rounds

    @property
    def label(self) -> str:
        """A short name, for table headers."""
        return METRIC_PHRASES[self.kind][0].format(**vars(self))

    @property
    def axis_label(self) -> str:
        """The metric in words with its unit, for a figure's axis."""
        unit = "rounds" if self.counts_rounds else "%"
        return f"{METRIC_PHRASES[self.kind][1].format(**vars(self))} ({unit})"


@dataclass
class Column:
    """A setting: the config overrides that distinguish it, and what its cells report where
    that differs from the table's metric (FedCAD Table 1 puts acc and T(65%) side by side)."""

    label: str
    config: dict
    latex: str | None = None  # header in table.tex (defaults to the label)
    metric: Metric | None = None
    # Fewer seeds than the table's where only those are finished (a partial table of shipped
    # runs, shared/targets/copies.py); None: the table's
    seeds: tuple[int, ...] | None = None


@dataclass
class Table:
    paper: str
    name: str
    caption: str
    base: dict  # overrides shared by every cell
    rows: list[Row]
    columns: list[Column]
    reported: dict[str, list[Reported | None]]  # row label -> one entry per column
    metric: Metric = field(default_factory=Metric)
    seeds: tuple[int, ...] = (0, 1, 2)
    curves: bool = False  # the paper shows learning curves for this table's settings
    methods_as_columns: bool = False  # table.tex transposed, as FedGKD prints its tables
    notes: str = ""  # what differs from the paper's protocol, printed under the table
    inconsistencies: list[Inconsistency] = field(default_factory=list)  # printed cells the paper contradicts
    # The name the paper declares the table under, where its outputs name it otherwise (on a
    # copy: "table4-<the copy's slug>", shared.targets.copies.labelled); None: `name` is that name.
    renamed_from: str | None = None
    # What its runs train on, where a label names it (on a copy: "CIFAR-10, JPEG copy sha256
    # dfaab4e…", which only the copy's file tells); "": named from the runs' configs.
    data: str = ""
    # The paper's header over the label column, or one for each where a group's name stands beside
    # its rows (FedGKD Table 7's "DataSet", "Buffer Length"); () : "Method" ("Setting" where
    # methods are columns)
    corner: tuple[str, ...] = ()
    # Columns whose cells also print their mean's rise or fall against FedAvg's, "(0.87)↑", FedAvg's
    # "(base)", as FedCSD prints its Tables I and II
    rises: tuple[str, ...] = ()
    # The paper's header spanning all the value columns (FedCSD Table II's "Office-Caltech-10"),
    # in place of the words all labels share before their last (FedGKD Table 6's "round" of
    # "round 10"); "": spanning headers from the labels alone
    span: str = ""
    # A method's components, a column of ticks and crosses each beside the labels (FedCSD Table
    # III's δ̂, M and TMA: which of them each variant keeps, Row.components)
    components: tuple[str, ...] = ()
    # Rows whose runs a campaign trains first (seed 0 of every setting before any other row):
    # the runs that decide an open question soonest
    train_first: tuple[str, ...] = ()

    @property
    def declared_name(self) -> str:
        """The name papers/<paper>/tables.py gives the table, which its claims name."""
        return self.renamed_from or self.name

    def metric_for(self, column: Column) -> Metric:
        return column.metric or self.metric

    def __post_init__(self):
        labels = [c.label for c in self.columns]
        for row, values in self.reported.items():
            if row not in {r.label for r in self.rows}:
                raise ValueError(f"{self.paper}/{self.name}: reported numbers for unknown row {row!r}")
            if len(values) != len(labels):
                raise ValueError(
                    f"{self.paper}/{self.name}: row {row!r} reports {len(values)} numbers for {len(labels)} columns"
                )
        if not set(self.rises) <= set(labels):
            raise ValueError(f"{self.paper}/{self.name}: rises= names columns the table lacks: {self.rises}")
        if any(self.metric_for(c).counts_rounds for c in self.columns if c.label in self.rises):
            raise ValueError(f"{self.paper}/{self.name}: rises= goes with accuracy columns, not rounds")
        for mark in self.inconsistencies:
            if mark.row not in self.reported or mark.column not in labels:
                raise ValueError(
                    f"{self.paper}/{self.name}: an inconsistency names a cell the paper does not "
                    f"report: {mark.row!r} at {mark.column!r}"
                )
        rows = {r.label for r in self.rows}
        for row in self.rows:
            if row.reading_of is not None and (
                row.reading_of not in rows or not row.reading or row.label in self.reported
            ):
                raise ValueError(
                    f"{self.paper}/{self.name}: the reading {row.label!r} needs the row it reads "
                    f"({row.reading_of!r}), a description, and no paper number"
                )
        if set(self.train_first) - rows:
            raise ValueError(
                f"{self.paper}/{self.name}: train_first names unknown rows {sorted(set(self.train_first) - rows)}"
            )
        if (self.components or self.span) and self.methods_as_columns:
            raise ValueError(f"{self.paper}/{self.name}: components= and span= go with methods as rows")
        for row in self.rows:
            if self.components and not set(row.components or ()) <= set(self.components):
                raise ValueError(
                    f"{self.paper}/{self.name}: row {row.label!r} keeps components {list(row.components)} "
                    f"the table lacks: {list(self.components)}"
                )
            unknown = set(row.per_column) - set(labels)
            if unknown:
                raise ValueError(f"{self.paper}/{self.name}: row {row.label!r} names unknown columns {sorted(unknown)}")


def keep_rows(table: Table, rows: list[Row], **changes) -> Table:
    """The table with only `rows` (and `changes`): what names a row cut away goes with it (its
    printed numbers and inconsistencies, its place in `train_first`, and a reading of it, which
    is shown only beside it)."""
    labels = {r.label for r in rows}
    labels -= {r.label for r in rows if r.reading_of is not None and r.reading_of not in labels}
    return replace(
        table,
        rows=[r for r in rows if r.label in labels],
        reported={k: v for k, v in table.reported.items() if k in labels},
        inconsistencies=[m for m in table.inconsistencies if m.row in labels],
        train_first=tuple(r for r in table.train_first if r in labels),
        **changes,
    )


# --- expansion ----------------------------------------------------------------------------


@dataclass
class Cell:
    row: Row
    column: Column
    seed: int
    config: RunConfig
    trained_first: bool = False  # its row is one of its table's `train_first`

    @property
    def run_id(self) -> str:
        return run_id(self.config)


def scale_seeds(table: Table, scale: str, column: Column | None = None) -> tuple[int, ...]:
    """The table's seeds at `scale`; a column's own, where it holds fewer."""
    seeds = table.seeds[: SCALE_SEEDS.get(scale)]
    return tuple(s for s in seeds if column is None or column.seeds is None or s in column.seeds)


def seeds_text(table: Table, scale: str, label: Callable[[Column], str] = lambda column: column.label) -> str:
    """The table's seeds in words, "[0, 1, 2]"; where its columns hold different ones (a
    partial table), those of most columns, then the others' with their columns' `label`s:
    "[0] ([0, 1, 2] at δ=0.5)"."""
    by_seeds: dict[tuple[int, ...], list[str]] = {}
    for column in table.columns:
        by_seeds.setdefault(scale_seeds(table, scale, column), []).append(label(column))
    (most, _), *others = sorted(by_seeds.items(), key=lambda item: -len(item[1]))
    rest = "; ".join(f"{list(seeds)} at {', '.join(labels)}" for seeds, labels in others)
    return f"{list(most)}" + (f" ({rest})" if rest else "")


def cell_overrides(table: Table, row: Row, column: Column, seed: int) -> dict:
    values = deep_merge(table.base, column.config)
    values = deep_merge(values, row.config)
    values = deep_merge(values, {"method": row.method})
    values = deep_merge(values, row.per_column.get(column.label, {}))
    return deep_merge(values, {"seed": seed})


def expand(table: Table, scale: str, runtime: dict | None = None) -> list[Cell]:
    """Every (implemented method x setting x seed) of the table as a resolved config."""
    from shared.targets.configs import load_config

    check_scale(scale)
    cells = []
    for row in table.rows:
        if not row.implemented:
            continue
        for column in table.columns:
            for seed in scale_seeds(table, scale, column):
                values = SCALES[scale](cell_overrides(table, row, column, seed))
                try:
                    cfg = load_config(None, deep_merge(values, runtime or {}))
                except ConfigError as exc:
                    raise ConfigError(f"{table.paper}/{table.name}, {row.label} at {column.label}: {exc}") from exc
                cells.append(Cell(row, column, seed, cfg, row.label in table.train_first))
    return cells


# --- hyperparameter searches --------------------------------------------------------------


@dataclass
class Search:
    """A grid the paper tuned a method over: row `row` of table `table`, at each of the table's
    settings (or `columns`), run for every combination of `grid` (dotted config key -> values).
    The search reports every point's mean over seeds and the best point per setting; the
    tables themselves use the values the paper reports, so regenerating them needs no search."""

    paper: str
    name: str
    table: str
    row: str
    grid: dict[str, list]
    columns: list[str] | None = None
    description: str = ""
    # the points of the grid's product the paper could try (FedCAD's 0 <= beta <= gamma); None: all
    admissible: Callable[[dict], bool] | None = None

    def points(self) -> list[dict]:
        keys = list(self.grid)
        points = [dict(zip(keys, values)) for values in itertools.product(*(self.grid[k] for k in keys))]
        return [p for p in points if self.admissible is None or self.admissible(p)]

    def as_table(self) -> Table:
        source = get_table(self.paper, self.table)
        rows = {r.label: r for r in source.rows}
        if self.row not in rows:
            raise ConfigError(f"search {self.paper}/{self.name}: table {self.table} has no row {self.row!r}")
        base_row = rows[self.row]
        columns = [c for c in source.columns if self.columns is None or c.label in self.columns]
        grid_rows = []
        for point in self.points():
            values = nested(point)
            grid_rows.append(
                Row(
                    label=", ".join(
                        f"{k.rsplit('.', 1)[-1]}={v:g}" if isinstance(v, float) else f"{k.rsplit('.', 1)[-1]}={v}"
                        for k, v in point.items()
                    ),
                    method=deep_merge(base_row.method, values.get("method", {})),
                    config=deep_merge(base_row.config, {k: v for k, v in values.items() if k != "method"}),
                    per_column={
                        c: nested({k: v for k, v in flatten(o).items() if k not in point})
                        for c, o in base_row.per_column.items()
                        if c in {col.label for col in columns}
                    },
                )
            )
        return Table(
            paper=self.paper,
            name=self.name,
            caption=f"Search: {self.description or self.row}",
            base=source.base,
            rows=grid_rows,
            columns=columns,
            reported={},
            metric=source.metric,
            seeds=source.seeds,
        )


def paper_searches(paper: str) -> dict[str, Search]:
    return declared(paper, "SEARCHES")


def get_search(paper: str, name: str) -> Search:
    return declared_one(paper, "SEARCHES", "search", name)


def declared(paper: str, attribute: str) -> dict:
    """What papers/<paper>/tables.py lists under `attribute` (TABLES, FIGURES, SEARCHES), by name."""
    return {item.name: item for item in getattr(paper_tables_module(paper), attribute, [])}


def declared_one(paper: str, attribute: str, kind: str, name: str):
    items = declared(paper, attribute)
    if name not in items:
        raise ConfigError(f"{paper} has no {kind} {name!r}; valid: {sorted(items)}")
    return items[name]


def paper_tables(paper: str) -> dict[str, Table]:
    return declared(paper, "TABLES")


def get_table(paper: str, name: str) -> Table:
    return declared_one(paper, "TABLES", "table", name)


def all_tables() -> list[Table]:
    return [t for paper in paper_names() for t in paper_tables(paper).values()]
