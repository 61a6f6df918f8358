"""What a figure's panels show, read off their runs' configs: a setting's title (dataset,
partition, clients), the config key a sweep varies, and the settings that a reduced scale makes
the very same runs, with the warning that says so (figures and tables alike)."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Callable

from shared.config.dotted import flatten
from shared.data.catalog import DATASETS
from shared.targets.table_declarations import Cell, Table, cell_overrides

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


def swept_setting(cells: list[Cell], table: Table, name: str) -> str:
    """The setting a sweep panel varies, in words and by the paper's symbol (`name`, "μ" of
    "μ=0.1"): "loss weight μ"; the symbol alone where no config key, or several, vary."""
    swept = swept_key(cells, table)
    return f"{SWEPT.get(swept, swept)} {name}" if swept else name


def sweep_titles(cells: list[Cell], table: Table) -> dict[tuple[str, str, str], str]:
    """Each sweep panel's title: its metric against the setting it varies, after the settings
    it holds fixed where its labels name some ("α=0.1: ..."), so that panels of one figure
    (FedCSD Fig. 3's μ and τ, FedGKD Fig. 3's α) are told apart and each says what it sweeps."""
    panel = sweep_panel(table)
    panels = dict.fromkeys(panel(c) for c in cells)
    return {
        key: (f"{key[2]}: " if key[2] else "")
        + f"{key[1]} against {swept_setting([c for c in cells if panel(c) == key], table, key[0])}"
        for key in panels
    }


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


def sweep_label(label: str) -> tuple[str, str, str]:
    """A sweep's column label read as (what it holds fixed, the parameter it varies, the point):
    its last word "name=value" is the point on the panel of `name`; the words before it, the
    setting the panel holds ("α=0.1 C=0.3" -> ("α=0.1", "C", "0.3"); "E=5" -> ("", "E", "5"))."""
    label = " ".join(label.split())  # "α=0.1  C=0.3" is the same panel and point
    fixed, _, swept = label.rpartition(" ") if "=" in label.rpartition(" ")[2] else ("", "", label)
    name, _, point = swept.partition("=")
    return (fixed, name, point) if point else ("", "setting", label)


def sweep_panel(table: Table) -> Callable[[Cell], tuple[str, str, str]]:
    """A sweep's panel of a cell: the parameter its column varies ("E" of "E=5"), its metric, and
    the setting it holds fixed ("α=0.1" of "α=0.1 C=0.3"; "" where the label names none)."""

    def panel(c: Cell) -> tuple[str, str, str]:
        fixed, name, _ = sweep_label(c.column.label)
        return name, table.metric_for(c.column).label, fixed

    return panel


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
