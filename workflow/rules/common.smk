import json
import os
import sys

from shared.config import ConfigError
from shared.experiments import PAPERS, all_tables, expand, get_search, get_table, paper_searches, paper_tables
from shared.figures import paper_figures

SCALE = config["scale"]
PYTHON = sys.executable  # the environment Snakemake runs in trains too (a venv need not be activated)
# Keys that do not change a run's result, passed to every run.
RUNTIME = {"data_root": os.environ.get("FEDREPRO_DATA", config["data_root"]),
           "trainer": {"device": config["device"], "progress": False, "clients_per_step": config.get("clients_per_step", 1),
                       "client_threads": config.get("client_threads", 1)}}

# Every run any table, figure or search needs at this scale, by run id: a run two of them
# share is one job.
GRIDS = [*all_tables()]
for _paper in PAPERS:
    GRIDS += [f.table for f in paper_figures(_paper).values() if not isinstance(f.table, str)]
    GRIDS += [s.as_table() for s in paper_searches(_paper).values()]
RUNS = {}
for _grid in GRIDS:
    for _cell in expand(_grid, SCALE, RUNTIME):
        RUNS[_cell.run_id] = _cell.config


def run_dirs(table):
    return [f"results/runs/{cell.run_id}" for cell in expand(table, SCALE, RUNTIME)]


def table_inputs(wildcards):
    try:
        table = get_table(wildcards.paper, wildcards.table)
    except ConfigError as exc:  # shown by Snakemake before any job starts
        raise ValueError(str(exc)) from None
    return [f"{d}/metrics.json" for d in run_dirs(table)]


def paper_targets(paper):
    """Every table and figure a paper module defines."""
    return [f"papers/{paper}/{name}" for name in [*paper_tables(paper), *paper_figures(paper)]]


def search_targets(paper):
    """Every hyperparameter search a paper describes (not part of regenerating its tables)."""
    return [f"papers/{paper}/{name}" for name in paper_searches(paper)]


def search_inputs(wildcards):
    try:
        search = get_search(wildcards.paper, wildcards.search)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return [f"{d}/metrics.json" for d in run_dirs(search.as_table())]
