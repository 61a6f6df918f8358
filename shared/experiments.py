"""Tables as data: a paper module declares each table once (its methods, settings, seeds,
metric and the paper's numbers); this module expands a table into fully resolved run configs
at a given scale, and the workflow turns finished runs back into the table.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from shared.config import ConfigError, RunConfig, deep_merge, load_config, run_id
from shared.methods import METHODS

PAPERS = ("fedcad", "fedssd", "fedcsd", "fedgkd")

# The MOON / NIID-Bench protocol on CIFAR-10 that FedCAD and FedSSD both state: FedAvg-CNN,
# 10 clients, all participating, Dir(0.5), 100 rounds, E=10, B=64, SGD lr 0.01, momentum 0.9.
MOON_CIFAR10 = {
    "dataset": {"name": "cifar10"},
    "model": {"name": "fedavg_cnn"},
    "partition": {"kind": "dirichlet", "beta": 0.5, "clients": 10},
    "federation": {"rounds": 100, "participation": 1.0},
    "local": {"epochs": 10, "batch_size": 64, "lr": 0.01, "momentum": 0.9, "weight_decay": 0.0},
}


@dataclass(frozen=True)
class Reported:
    """A number as the paper prints it: mean and, where given, the spread over seeds."""

    mean: float | None
    std: float | None = None


@dataclass
class Row:
    """A method with the hyperparameters the paper states for it (per column where they vary)."""

    label: str
    method: dict
    config: dict = field(default_factory=dict)  # other overrides, e.g. MOON's projection head
    per_column: dict[str, dict] = field(default_factory=dict)  # column label -> overrides

    @property
    def implemented(self) -> bool:
        return self.method["name"] in METHODS


@dataclass
class Column:
    """A setting: the config overrides that distinguish it."""

    label: str
    config: dict
    latex: str | None = None  # header in table.tex (defaults to the label)


@dataclass(frozen=True)
class Metric:
    """What a cell reports, computed from each run's per-round curve.

    final_acc / best_acc: global test accuracy (%) at the last round / at its best round.
    rounds_to: the first round reaching `target` % (FedCAD's T(x%)).
    rounds_to_row: the first round reaching the final accuracy of row `reference` in the
        same column, averaged over its seeds (FedSSD's T).
    acc_at: global accuracy at round `round` (FedGKD Table 6).
    """

    kind: str = "final_acc"
    target: float | None = None
    reference: str | None = None
    round: int | None = None

    @property
    def higher_is_better(self) -> bool:
        return not self.kind.startswith("rounds_to")


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

    def __post_init__(self):
        labels = [c.label for c in self.columns]
        for row, values in self.reported.items():
            if row not in {r.label for r in self.rows}:
                raise ValueError(f"{self.paper}/{self.name}: reported numbers for unknown row {row!r}")
            if len(values) != len(labels):
                raise ValueError(f"{self.paper}/{self.name}: row {row!r} reports {len(values)} numbers for {len(labels)} columns")
        for row in self.rows:
            unknown = set(row.per_column) - set(labels)
            if unknown:
                raise ValueError(f"{self.paper}/{self.name}: row {row.label!r} names unknown columns {sorted(unknown)}")


# --- scales -------------------------------------------------------------------------------

DATASET_SHAPES = {"cifar10": (10, 3, 32), "cifar100": (100, 3, 32)}  # classes, channels, side


def smoke_scale(values: dict) -> dict:
    """Minutes on a CPU: synthetic images shaped like the dataset (about 100 per client),
    3 rounds of 2 epochs at batch size 16 (enough steps for the methods to differ), and
    ResNet-50 replaced by ResNet-8. Everything else (partition, method, clients, learning
    rate) is kept, so every code path of the paper setting runs."""
    name = values.get("dataset", {}).get("name", "cifar10")
    classes, channels, side = DATASET_SHAPES.get(name, (10, 3, 32))
    model = values.get("model", {}).get("name", "fedavg_cnn")
    clients = values.get("partition", {}).get("clients", 10)
    per_class = max(20, 100 * clients // classes)
    aux = values.get("aux", {}).get("per_class", 0)
    return deep_merge(values, {
        "aux": {"per_class": min(aux, per_class // 2)},
        "dataset": {"name": "synthetic", "synthetic": {
            "num_classes": classes, "channels": channels, "image_size": side,
            "train_per_class": per_class, "test_per_class": 10}},
        "model": {"name": "resnet8" if model == "resnet50" else model},
        "federation": {"rounds": 3},
        "local": {"epochs": 2, "batch_size": 16},
        "eval": {"batch_size": 500},
    })


def small_scale(values: dict) -> dict:
    """Real data, a tenth of the rounds (at least 5) and at most 2 local epochs: a CPU-sized
    check that the numbers head the right way."""
    rounds = values.get("federation", {}).get("rounds", RunConfig().federation.rounds)
    epochs = values.get("local", {}).get("epochs", RunConfig().local.epochs)
    return deep_merge(values, {"federation": {"rounds": max(5, rounds // 10)}, "local": {"epochs": min(2, epochs)}})


SCALES: dict[str, Callable[[dict], dict]] = {"paper": lambda v: v, "small": small_scale, "smoke": smoke_scale}
SCALE_SEEDS = {"smoke": 2}  # at most this many of a table's seeds (still a mean and a spread)


def check_scale(scale: str) -> None:
    if scale not in SCALES:
        raise ConfigError(f"scale={scale!r} is unknown; valid: {sorted(SCALES)}")


# --- expansion ----------------------------------------------------------------------------

@dataclass
class Cell:
    row: Row
    column: Column
    seed: int
    config: RunConfig

    @property
    def run_id(self) -> str:
        return run_id(self.config)


def scale_seeds(table: Table, scale: str) -> tuple[int, ...]:
    return table.seeds[: SCALE_SEEDS.get(scale)]


def cell_overrides(table: Table, row: Row, column: Column, seed: int) -> dict:
    values = deep_merge(table.base, column.config)
    values = deep_merge(values, row.config)
    values = deep_merge(values, {"method": row.method})
    values = deep_merge(values, row.per_column.get(column.label, {}))
    return deep_merge(values, {"seed": seed})


def expand(table: Table, scale: str, runtime: dict | None = None) -> list[Cell]:
    """Every (implemented method x setting x seed) of the table as a resolved config."""
    check_scale(scale)
    cells = []
    for row in table.rows:
        if not row.implemented:
            continue
        for column in table.columns:
            for seed in scale_seeds(table, scale):
                values = SCALES[scale](cell_overrides(table, row, column, seed))
                try:
                    cfg = load_config(None, deep_merge(values, runtime or {}))
                except ConfigError as exc:
                    raise ConfigError(f"{table.paper}/{table.name}, {row.label} at {column.label}: {exc}") from exc
                cells.append(Cell(row, column, seed, cfg))
    return cells


def load_metrics(runs_dir, run_id: str) -> dict:
    return json.loads((Path(runs_dir) / run_id / "metrics.json").read_text())


def paper_module(paper: str):
    """papers/<paper>/tables.py, which declares TABLES and FIGURES."""
    if paper not in PAPERS:
        raise ConfigError(f"paper {paper!r} is unknown; valid: {list(PAPERS)}")
    return importlib.import_module(f"papers.{paper}.tables")


def paper_tables(paper: str) -> dict[str, Table]:
    return {t.name: t for t in paper_module(paper).TABLES}


def get_table(paper: str, name: str) -> Table:
    tables = paper_tables(paper)
    if name not in tables:
        raise ConfigError(f"{paper} has no table {name!r}; valid: {sorted(tables)}")
    return tables[name]


def all_tables() -> list[Table]:
    return [t for paper in PAPERS for t in paper_tables(paper).values()]
