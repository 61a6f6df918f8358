import contextlib
import csv
import json
from collections import Counter
import os
import shlex
import sys
import time
import traceback
from functools import wraps
from pathlib import Path

import pandas as pd

from shared.config import ConfigError, identity
from shared.experiments import all_tables, expand, get_search, get_table, paper_searches, paper_tables
from shared.figures import paper_figures
from shared.papers import paper_names
from shared.run import workflow_grids
from shared.run_directory import write_atomically

SCALE = config["scale"]
PYTHON = sys.executable  # the environment Snakemake runs in trains too (a venv need not be activated)

# Keys that do not change a run's result. They reach a run job on its command line, read from
# --config when the job starts, and never its params, inputs or rule code: switching any of them
# on a finished table is "Nothing to be done" (tests/test_workflow.py).
RUNTIME = {"data_root": os.environ.get("FEDREPRO_DATA", config["data_root"]),
           "trainer": {"device": config["device"], "clients_per_step": config.get("clients_per_step", 1),
                       "client_threads": config.get("client_threads", 1)}}
RUNTIME_ARGS = " ".join(shlex.quote(f"{key}={value}") for key, value in [
    ("data_root", RUNTIME["data_root"]), *((f"trainer.{k}", v) for k, v in RUNTIME["trainer"].items())])

# Where outputs land. The paper scale's at papers/<paper>/<target>/ (`snakemake papers/fedssd/table2`);
# a reduced scale's at results/<scale>/<paper>/<target>/, so that a smoke or small table is never
# found where the paper-scale one belongs (with or without Snakemake's metadata). Under
# --config scale=smoke the paper-scale names are aliases of the reduced outputs (below), so
# `snakemake --config scale=smoke -- papers/fedssd/table2` builds results/smoke/fedssd/table2/.
OUT = "papers" if SCALE == "paper" else f"results/{SCALE}"
RUNS_DIR = "results/runs"
LOGS = f"results/logs/{SCALE}"  # of the table, figure and search jobs (a run's log is keyed by its id)
INDEX = "results/index.csv"

# Every run any table, figure or search needs at this scale, by run id: a run two of them
# share is one job. CELLS keeps where each run is used (for the run index).
CELLS = [(paper, name, cell) for paper, name, grid in workflow_grids() for cell in expand(grid, SCALE, RUNTIME)]
RUNS = {cell.run_id: cell.config for _, _, cell in CELLS}


def write_if_changed(path, text):
    if not Path(path).exists() or Path(path).read_text() != text:
        write_atomically(Path(path), lambda tmp: tmp.write_text(text))


# The runs' configs (without the runtime keys) for the run jobs to read: a job names its runs by
# id and finds the config here (shared.run --runs --configs) instead of expanding every table
# again. Not an input of any rule: rewriting it triggers nothing.
CONFIGS = f"results/.configs/{SCALE}.json"
write_if_changed(CONFIGS, json.dumps({rid: identity(cfg) for rid, cfg in sorted(RUNS.items())}, sort_keys=True))


def target_path(paper, name):
    """Where target `name` (tableN, figN, search_*) of `paper` lands at this scale."""
    return f"{OUT}/{paper}/{name}"


def run_dirs(table):
    return [f"{RUNS_DIR}/{cell.run_id}" for cell in expand(table, SCALE, RUNTIME)]


def table_inputs(wildcards):
    try:
        table = get_table(wildcards.paper, wildcards.table)
    except ConfigError as exc:  # shown by Snakemake before any job starts
        raise ValueError(str(exc)) from None
    return [f"{d}/metrics.json" for d in run_dirs(table)]


def paper_targets(paper):
    """Every table and figure a paper module defines, where they land at this scale."""
    return [target_path(paper, name) for name in [*paper_tables(paper), *paper_figures(paper)]]


def search_targets(paper):
    """Every hyperparameter search a paper describes (not part of regenerating its tables)."""
    return [target_path(paper, name) for name in paper_searches(paper)]


def search_inputs(wildcards):
    try:
        search = get_search(wildcards.paper, wildcards.search)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return [f"{d}/metrics.json" for d in run_dirs(search.as_table())]


# --- what a table, figure or search job did: its log, and the run index --------------------

def run_status(run_id):
    """A run's status and final accuracy as its directory shows them."""
    path = Path(RUNS_DIR, run_id, "metrics.json")
    if path.exists():
        try:  # a damaged file (its run is scheduled again: runs.smk) must not fail the table's job
            metrics = json.loads(path.read_text())
            return str(metrics.get("status", "unknown")), metrics.get("final_acc")
        except (ValueError, AttributeError):
            return "unreadable metrics.json", None
    if Path(RUNS_DIR, run_id, "checkpoint.pt").exists():
        return "incomplete", None
    return "missing", None


INDEX_FIELDS = ["run_id", "paper", "table", "method", "row", "column", "seed", "scale", "status", "final_acc"]


def write_index(path=INDEX):
    """results/index.csv: one line per run of every table, figure and search at this scale whose
    directory exists (run id, paper, table, method, row, column, seed, scale, status, final
    accuracy); lines of other scales are kept as they are."""
    rows = []
    if Path(path).exists():
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("scale") != SCALE]
    for paper, name, cell in CELLS:
        if not Path(RUNS_DIR, cell.run_id).exists():
            continue
        status, final = run_status(cell.run_id)
        rows.append({"run_id": cell.run_id, "paper": paper, "table": name, "method": cell.row.method["name"],
                     "row": cell.row.label, "column": cell.column.label, "seed": cell.seed, "scale": SCALE,
                     "status": status, "final_acc": "" if final is None else final})
    rows.sort(key=lambda r: (r["scale"], r["paper"], r["table"], r["row"], r["column"], str(r["seed"])))
    write_atomically(Path(path), lambda tmp: pd.DataFrame(rows, columns=INDEX_FIELDS).to_csv(tmp, index=False))
    return len(rows)


class Tee:
    """A stream that writes to several: the job's stderr and its log."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self):
        for stream in self.streams:
            stream.flush()


def logged(build):
    """build_table / build_figure / build_search, writing what they did to the job's log
    (results/logs/<scale>/<kind>s/<paper>-<name>.log): the target, the scale, each run's status, the
    files written, the seconds taken, and a traceback if it raised; then the run index is
    rebuilt."""
    kind = build.__name__.removeprefix("build_")

    @wraps(build)
    def run(target, scale, runs_dir, out_dir, *args, **kwargs):
        log = Path(LOGS, {"search": "searches"}.get(kind, f"{kind}s"), f"{target.paper}-{target.name}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.time()
        if hasattr(target, "cells"):  # a figure
            cells = target.cells(scale, RUNTIME)
        else:  # a table, or a search's grid
            cells = expand(target.as_table() if hasattr(target, "as_table") else target, scale, RUNTIME)
        ids = list(dict.fromkeys(c.run_id for c in cells))
        statuses = {rid: run_status(rid)[0] for rid in ids}
        counts = Counter(status.split(":")[0] for status in statuses.values())
        with open(log, "w") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {kind} {target.paper}/{target.name} at scale={scale} "
                    f"-> {out_dir}\n")
            f.write(f"runs: {len(ids)} ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})\n")
            for rid, status in statuses.items():
                if status != "completed":
                    f.write(f"  {rid}: {status}\n")
            try:  # what the build says on stderr (a reduced scale's warnings) goes to the log too
                with contextlib.redirect_stderr(Tee(sys.stderr, f)):
                    build(target, scale, runs_dir, out_dir, *args, **kwargs)
            except Exception:
                f.write(traceback.format_exc())
                raise
            written = sorted(str(p.relative_to(out_dir)) for p in Path(out_dir).rglob("*") if p.is_file())
            f.write(f"wrote {len(written)} files in {time.time() - started:.1f} s: {', '.join(written)}\n")
            f.write(f"run index {INDEX}: {write_index()} runs\n")

    return run
