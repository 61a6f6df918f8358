"""Every target of the workflow (each paper's tables, figures and searches) expanded into its
runs at a scale, cached on disk.

Every Snakemake process needs this before it can define a rule: the main one, and on SLURM
every job's. Expanding all the papers' tables resolves thousands of configs and imports torch
(seconds); reading the cache takes milliseconds and imports neither torch nor a paper. The
cache is keyed by everything that decides the expansion: the source of shared/ and papers/,
the scale, the runtime keys and the copy of the data the runs train on, if any. Reading the
workflow only reads it (a changed file or setting expands again, in memory); the workflow saves
it when it starts jobs (`save_expansion`, atomically: concurrent processes read the old cache
or the new one), so that a dry run writes nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import pickle
from dataclasses import dataclass
from pathlib import Path

from shared.config.dotted import deep_merge
from shared.config.schema import ConfigError, RunConfig
from shared.runs.files import write_atomically
from shared.targets.copies import Copy, copy_part, copy_runtime, data_folder

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("shared", "papers")  # the code that declares tables and resolves configs
DRAWING = ("shared/reporting", "shared/targets")  # the code that draws a target from its runs (`drawing_code`)
KINDS = ("table", "figure", "search")


@dataclass(frozen=True)
class GridRun:
    """One run of a table's (or a figure's or search's own) grid: where it is used."""

    paper: str
    target: str
    run_id: str
    method: str
    row: str
    column: str
    seed: int


@dataclass
class Expansion:
    runs: dict[str, RunConfig]  # every run any target needs, by id (a run two targets share is one)
    grid_runs: list[GridRun]  # the runs of every grid, where each is used (the run index)
    targets: dict[str, dict[str, dict[str, list[str]]]]  # paper -> kind -> target name -> run ids
    probe_costs: dict[tuple[str, str], float]  # (paper, figure) -> Figure.probe_cost, of the figures with a probe
    probe_codes: dict[tuple[str, str], str]  # (paper, figure) -> its probe's code (shared/targets/probes.py)
    partition_figures: frozenset[tuple[str, str]]  # (paper, figure) of the figures that draw partitions alone
    key: str = ""  # the cache key of the code and settings it was expanded from (`expansion`)

    def papers(self) -> list[str]:
        return list(self.targets)

    def names(self, paper: str, *kinds: str) -> list[str]:
        """The paper's targets of these kinds (default: all), tables first."""
        return [name for kind in kinds or KINDS for name in self.targets[paper][kind]]

    def target_runs(self, paper: str, kind: str, name: str) -> list[str]:
        """The run ids of target `name`; an unknown paper or name raises the ConfigError that
        reading the paper's module raises."""
        runs = self.targets.get(paper, {}).get(kind, {}).get(name)
        if runs is None:
            from shared.targets.table_declarations import declared_one

            declared_one(paper, {"table": "TABLES", "figure": "FIGURES", "search": "SEARCHES"}[kind], kind, name)
            raise ConfigError(f"{paper}/{name} is not known to the workflow")
        return runs

    def used_by(self) -> dict[str, frozenset[str]]:
        """Each run's targets, as "paper/name" (those listing it, and the grids that use it); a
        figure of partitions uses none (it trains none)."""
        users: dict[str, set[str]] = {}
        listed = [
            (paper, name, ids)
            for paper, kinds in self.targets.items()
            for names in kinds.values()
            for name, ids in names.items()
            if (paper, name) not in self.partition_figures
        ]
        for paper, name, ids in [*listed, *((g.paper, g.target, [g.run_id]) for g in self.grid_runs)]:
            for rid in ids:
                users.setdefault(rid, set()).add(f"{paper}/{name}")
        return {rid: frozenset(names) for rid, names in users.items()}


def source_digest(folders=SOURCES) -> str:
    """A hash of every Python file under `folders` (names and contents): shared/ and papers/."""
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def drawing_code(paper: str) -> str:
    """The first 16 hex digits of a hash of what draws a paper's tables, figures and searches from
    their runs: its module (its declarations: rows, the numbers it reports, claims, captions),
    shared/reporting/ and shared/targets/. A workflow rule's params: a change to them draws the
    paper's targets again from the same runs, and trains none."""
    return source_digest((f"papers/{paper}", *DRAWING))[:16]


def cache_key(scale: str, runtime: dict, copy: Copy | None = None) -> str:
    settings = json.dumps(
        {"scale": scale, "runtime": runtime, **({"copy": copy.sha256} if copy else {})}, sort_keys=True, default=str
    )
    return hashlib.sha256(f"{source_digest()}\n{settings}".encode()).hexdigest()


def expand_all(scale: str, runtime: dict, copy: Copy | None = None, key: str = "") -> Expansion:
    """What the cache holds, computed: every grid's runs and every target's run ids. A table's
    or a search's runs are its grid's, expanded once; a figure picks its cells from its source.
    On a copy of a dataset (shared.campaign): each table's part on that dataset, the figures
    drawn from it alone, no search (the papers tuned on the official data). `key`: the cache
    key of the code and settings it expands, kept with it for `save_expansion`."""
    from shared.targets.figure_declarations import paper_figures
    from shared.targets.papers import paper_names
    from shared.targets.probes import probe_code
    from shared.targets.resolve import workflow_grids
    from shared.targets.table_declarations import expand, paper_searches, paper_tables

    runs, grid_runs, grid_ids = {}, [], {}
    runtime = deep_merge(runtime, copy_runtime(copy))
    for paper, name, grid in workflow_grids():
        if copy is not None and (name.startswith("search") or not (grid := copy_part(grid, scale, copy)).rows):
            continue
        for cell in expand(grid, scale, runtime):
            runs[cell.run_id] = cell.config
            grid_runs.append(
                GridRun(paper, name, cell.run_id, cell.row.method["name"], cell.row.label, cell.column.label, cell.seed)
            )
            grid_ids.setdefault((paper, name), {})[cell.run_id] = None  # an ordered set

    def kept(paper, names):
        return {
            name: list(grid_ids.get((paper, name), {})) for name in names if copy is None or (paper, name) in grid_ids
        }  # on a copy: its parts alone

    targets = {
        paper: {
            "table": kept(paper, paper_tables(paper)),
            "figure": figure_runs(paper, scale, runtime),
            "search": kept(paper, paper_searches(paper)),
        }
        for paper in paper_names()
    }
    probed = {
        (paper, name): figure
        for paper in paper_names()
        for name, figure in paper_figures(paper).items()
        if figure.probe is not None
    }
    probe_costs = {key: figure.probe_cost for key, figure in probed.items()}
    probe_codes = {name: probe_code(figure) for name, figure in probed.items()}
    partition_figures = frozenset(
        (paper, name)
        for paper in paper_names()
        for name, figure in paper_figures(paper).items()
        if not figure.needs_training
    )
    return Expansion(runs, grid_runs, targets, probe_costs, probe_codes, partition_figures, key)


def figure_runs(paper: str, scale: str, runtime: dict) -> dict[str, list[str]]:
    """Each figure's run ids; a figure with a run the runtime's data cannot train (a copy of
    another dataset) is left out."""
    from shared.targets.figure_declarations import paper_figures

    found = {}
    for name, figure in paper_figures(paper).items():
        try:
            found[name] = list(dict.fromkeys(c.run_id for c in figure.cells(scale, runtime)))
        except ConfigError:
            if not runtime.get("dataset", {}).get("copy"):
                raise
    return found


def cache_path(cache_dir: str | Path, scale: str, copy: Copy | None) -> Path:
    """`cache_dir`/<scale>.pickle, or <data folder>.pickle on a copy of the data."""
    return Path(cache_dir) / f"{scale if copy is None else data_folder(scale, copy)}.pickle"


def cached(path: Path, key: str) -> Expansion | None:
    """The expansion cached at `path` under `key`; None where it is absent, another key's, or
    written by code that no longer reads it."""
    try:
        with open(path, "rb") as f:
            cached_key, found = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ValueError, ImportError):
        return None
    return found if cached_key == key else None


def expansion(scale: str, runtime: dict, cache_dir: str | Path, copy: Copy | None = None) -> Expansion:
    """The workflow's expansion at `scale` (on `copy`), from the cache in `cache_dir` where that
    was written by the same code and settings, else computed (and not written: `save_expansion`)."""
    key = cache_key(scale, runtime, copy)  # before the expansion: a source edited meanwhile is not this one's
    found = cached(cache_path(cache_dir, scale, copy), key)
    return found if found is not None else expand_all(scale, runtime, copy, key)


def save_expansion(
    found: Expansion, scale: str, runtime: dict, cache_dir: str | Path, copy: Copy | None = None
) -> None:
    """Cache `found`, the expansion at `scale` (on `copy`), in `cache_dir`, unless it is cached there
    already, under the key of the code and settings it was expanded from (`found.key`): under
    today's, a source file edited since the workflow was read would be paired with an expansion
    of the one before."""
    path, key = cache_path(cache_dir, scale, copy), found.key or cache_key(scale, runtime, copy)
    if cached(path, key) is not None:
        return

    def write(tmp):
        with open(tmp, "wb") as f:
            pickle.dump((key, found), f, protocol=pickle.HIGHEST_PROTOCOL)

    write_atomically(path, write)
