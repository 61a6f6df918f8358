import contextlib
import csv
import json
from collections import Counter
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

from snakemake_interface_executor_plugins.settings import DeploymentMethod

from shared.data.catalog import DataError
from shared.config.schema import ConfigError, identity
from shared.config.dotted import deep_merge
from shared.targets.expansion_cache import drawing_code, expansion, save_expansion
from shared.targets.probes import outlasts_its_runs_jobs, probe_path, probes_dir
from shared.runs.files import RunFilesError, read_summary, write_atomically
from shared.runs.partition_files import partition_path, partitions_dir
from shared.targets.copies import copy_part, copy_runtime, data_folder, label_outputs, labelled, located_copy

SCALE = config["scale"]

# Keys that do not change a run's result. They reach a run job on its command line, read from
# --config when the job starts, and never its params, inputs or its rule's code: switching any of them
# on a finished table is "Nothing to be done" (tests/workflow/test_workflow.py).
RUNTIME = {"data_root": os.environ.get("FEDREPRO_DATA", config["data_root"]),
           "trainer": {"device": config["device"], "clients_per_step": config.get("clients_per_step", 1),
                       "client_threads": config.get("client_threads", 1),
                       **({"tensorboard": True} if str(config.get("tensorboard")).lower() == "true" else {})}}
RUNTIME_ARGS = " ".join(shlex.quote(f"{key}={value}") for key, value in [
    ("data_root", RUNTIME["data_root"]), *((f"trainer.{k}", v) for k, v in RUNTIME["trainer"].items())])

# A copy of the official data (`--config copy=cifar10=<sha256>`, or =FILE; shared/targets/copies.py):
# every run of that dataset trains on it (dataset.copy: ids of their own), each table is cut to
# its part on it and labelled, and everything lands in a folder named as the shipped tables of
# that copy are (`data_folder`), never where the official tables belong.
try:
    COPY = located_copy(config.get("copy"), RUNTIME["data_root"])
except (ConfigError, DataError) as exc:  # said before any job starts
    raise ValueError(f"--config copy={config.get('copy')}: {exc}") from None
BUILD_RUNTIME = deep_merge(RUNTIME, copy_runtime(COPY))  # what a table, figure or search job expands with
DATA_KEY = SCALE if COPY is None else data_folder(SCALE, COPY)  # names the logs, the configs, the index's lines
PAPER_SUMMARIES = ["claims"] if COPY is None else []  # a paper's claims span its datasets: none on a copy

# Where outputs land. The paper scale's at papers/<paper>/<target>/ (`snakemake papers/fedssd/table2`);
# a reduced scale's at results/<scale>/<paper>/<target>/, so that a smoke or small table is never
# found where the paper-scale one belongs (with or without Snakemake's metadata); a copy's at
# results/<data folder>/<paper>/<target>/. Under a reduced scale or a copy the paper-scale names
# are aliases of these outputs (Snakefile), so `snakemake --config scale=smoke -- papers/fedssd/table2`
# builds results/smoke/fedssd/table2/.
OUT = "papers" if DATA_KEY == "paper" else f"results/{DATA_KEY}"
RUNS_DIR = "results/runs"
PROBES = probes_dir(RUNS_DIR)  # results/probes: figures' probes of runs (Figure.probe)
PARTITIONS = partitions_dir(RUNS_DIR)  # results/partitions: runs' partitions, computed without training
LOGS = f"results/logs/{DATA_KEY}"  # of the table, figure and search jobs (a run's log is keyed by its id)
INDEX = "results/index.csv"

# Every run any table, figure or search needs at this scale, by run id: a run two of them
# share is one job. Read from results/.expansion/<scale>.pickle where the code and settings
# that decide it are unchanged (shared/targets/expansion_cache.py), so that a process starts in about a second.
EXPANSION_CACHE = "results/.expansion"
EXPANSION = expansion(SCALE, RUNTIME, EXPANSION_CACHE, COPY)
RUNS = EXPANSION.runs

# The runs' configs (without the runtime keys) for the run jobs to read: a job names its runs by
# id and finds the config here (shared.workflow_job --runs --configs) instead of expanding every table
# again; where it lacks a run, the job expands (seconds). Written when the workflow starts jobs
# (`onstart`, below), never by reading it. Not an input of any rule: a new input of the run rule
# would retrain every finished run that Snakemake has metadata of ("Set of input files has
# changed"), and one that is missing would schedule them all, ancient() or not.
CONFIGS = f"results/.configs/{DATA_KEY}.json"


def write_if_changed(path, text):
    if not Path(path).exists() or Path(path).read_text() != text:
        write_atomically(path, lambda tmp: tmp.write_text(text))


onstart:
    # after the DAG is built and before any job runs, in the main process, never in a dry run:
    # what the run jobs read, and what makes the next start take a second
    write_if_changed(CONFIGS, json.dumps({rid: identity(cfg) for rid, cfg in sorted(RUNS.items())}, sort_keys=True))
    save_expansion(EXPANSION, SCALE, RUNTIME, EXPANSION_CACHE, COPY)

# A run job's command, composed once: the environment's interpreter (the conda environment's
# `python` under --software-deployment-method conda, else the one Snakemake runs in: a venv
# need not be activated), the scale and the runtime keys as they are when the job starts.
# It is no rerun trigger (profiles/default leaves out `code`), so none of these retrains a run.
PYTHON = "python" if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method else sys.executable
def job_command(module, args, gpu=True):
    """`python -m <module> <args>` as a job runs it: its threads, the scale, the configs, a free
    GPU (where it takes one), the runtime keys, its log."""
    return (f"OMP_NUM_THREADS={{threads}} {shlex.quote(PYTHON)} -m {module} --scale {SCALE} --configs {CONFIGS}"
            f" {args}{' --gpu auto' if gpu else ''} {RUNTIME_ARGS.replace('{', '{{').replace('}', '}}')} > {{log}} 2>&1")


RUN_COMMAND = job_command(
    "shared.workflow_job", f"--runs {{output}} --attempt {{resources.run_attempt}} --attempts {config['retries'] + 1}")
# A probe job's (Figure.probe on one finished run)
PROBE_COMMAND = job_command(
    "shared.probe_job", f"papers/{{wildcards.paper}}/{{wildcards.figure}} --run {RUNS_DIR}/{{wildcards.run_id}} --out {{output}}")
# A partition job's (a run's partition without training it, for a figure of partitions)
PARTITION_COMMAND = job_command(
    "shared.partition_job", f"--run {{wildcards.run_id}} --runs {RUNS_DIR} --out {{output}}", gpu=False)
ENVIRONMENT = "../envs/fedrepro.yaml"  # relative to workflow/rules/; the project's environment.yml


def target_path(paper, name):
    """Where target `name` (tableN, figN, search_*) of `paper` lands at this scale."""
    return f"{OUT}/{paper}/{name}"


def target_inputs(kind):
    """The input function of a table, figure or search: its runs' metrics.json (and a figure's
    probes of them, where it has one); a figure of partitions, their partitions alone (no run
    trains for it: rule partition)."""

    def inputs(wildcards):
        name = getattr(wildcards, kind)
        try:
            runs = EXPANSION.target_runs(wildcards.paper, kind, name)
        except ConfigError as exc:  # shown by Snakemake before any job starts
            raise ValueError(str(exc)) from None
        if draws_partitions(kind, wildcards.paper, name):
            return [str(partition_path(RUNS_DIR, rid)) for rid in runs]
        probes = [probe_of(wildcards.paper, name, rid) for rid in runs] if probed(kind, wildcards) else []
        return [f"{RUNS_DIR}/{rid}/metrics.json" for rid in runs] + [str(p) for p in probes]

    return inputs


def drawing_params(wildcards):
    """A table's, figure's or search's params: the hash of its paper's declarations and of the code
    that draws it (shared/targets/expansion_cache.py `drawing_code`, worked out once a paper)."""
    return drawing_code(wildcards.paper)


def draws_partitions(kind, paper, name):
    return kind == "figure" and (paper, name) in EXPANSION.partition_figures


def partition_input(wildcards):
    """Nothing (a partition needs no run), once the run id is known to be one of this scale's
    runs; another is refused while the workflow is read."""
    if wildcards.run_id not in RUNS:
        raise ValueError(f"run {wildcards.run_id} is none of the runs at scale={SCALE}: no partition of it")
    return []


def probed(kind, wildcards):
    """Whether the target is a figure with a probe (Figure.probe), as the expansion recorded it
    (reading the paper's module would load what its probe imports)."""
    return kind == "figure" and (wildcards.paper, wildcards.figure) in EXPANSION.probe_costs


def probe_of(paper, figure, run_id):
    """Where the figure's probe of the run is saved, named by today's code of the probe (as the
    expansion recorded it): a change to the probe's module or arguments names another file,
    computed again."""
    return probe_path(RUNS_DIR, paper, figure, run_id, EXPANSION.probe_codes[paper, figure])


def probe_input(wildcards):
    """A probe's run (its metrics.json, whose time is not compared where the probe outlasts any
    job of its run, `outlasts_its_runs_jobs`: a group job, `runs_per_job`, puts a finished run's
    metrics.json back as it was beside the runs it trains, and Snakemake touches it, which would
    compute hours of probe again); a target that names no figure's probe of a run at this scale,
    or another code's, is refused while the workflow is read."""
    if wildcards.run_id not in RUNS or not probed("figure", wildcards):
        raise ValueError(f"{wildcards.paper}/{wildcards.figure} has no probe of run {wildcards.run_id} at scale={SCALE}")
    if wildcards.code != EXPANSION.probe_codes[wildcards.paper, wildcards.figure]:
        raise ValueError(f"{wildcards.paper}/{wildcards.figure}'s probe code is not {wildcards.code}")
    run_dir = Path(RUNS_DIR) / wildcards.run_id
    probe = probe_of(wildcards.paper, wildcards.figure, wildcards.run_id)
    metrics = str(run_dir / "metrics.json")
    return [ancient(metrics) if outlasts_its_runs_jobs(probe, run_dir) else metrics]


def probe_minutes(wildcards, attempt):
    """A probe's wall time, as a run's (`minutes`) for the figure's probe_cost of its run."""
    return share_minutes(RUNS[wildcards.run_id], attempt, EXPANSION.probe_costs[wildcards.paper, wildcards.figure])


def requested_runs(paper, names):
    """The runs of a paper's targets `names` (tables, figures, searches; `claims`: its tables');
    a figure of partitions has none (it draws their partitions, computed without training)."""
    kinds = {"claims": "table", "fig": "figure", "search": "search", "table": "table"}
    found = {}
    for name in names:
        kind = next(kind for prefix, kind in kinds.items() if name.startswith(prefix))
        if draws_partitions(kind, paper, name):
            continue
        for target in EXPANSION.names(paper, "table") if name == "claims" else [name]:
            found.update(dict.fromkeys(EXPANSION.target_runs(paper, kind, target)))
    return list(found)


def runs_to_finish(paper, names):
    """The inputs that a target's name (`papers/<paper>/<name>`, a paper, its searches) has
    besides its outputs: its runs' metrics.json, and a marker of each run to train again
    (runs.smk `retry_marker`). Snakemake runs a target rule that has no output of its own where
    one of its inputs is missing, and with it what that input needs: so a table whose run was
    deleted, failed or cannot be read is built again, its run trained again, with or without
    Snakemake's metadata. (A job whose output is there is not run for a missing input alone.)
    A figure of partitions has its partitions: one deleted is computed again, the figure redrawn."""
    runs = requested_runs(paper, names)
    drawn = [
        rid
        for name in names
        if draws_partitions("figure", paper, name)
        for rid in EXPANSION.target_runs(paper, "figure", name)
    ]
    return (
        [f"{RUNS_DIR}/{rid}/metrics.json" for rid in runs]
        + [m for rid in runs if (m := retry_marker(rid))]
        + [str(partition_path(RUNS_DIR, rid)) for rid in dict.fromkeys(drawn)]
    )


def paper_targets(paper):
    """Every table and figure a paper module defines, and its claims, where they land at this scale
    (on a copy, its parts of the tables and figures: a paper's claims span its datasets)."""
    return [target_path(paper, name) for name in [*EXPANSION.names(paper, "table", "figure"), *PAPER_SUMMARIES]]


def paper_caption(kind, paper, name):
    """The paper's own caption of a table or figure, for the report (workflow/report/*.rst);
    imported when the report is written, since a start that plans or trains never needs it."""
    from shared.targets.table_declarations import get_table
    from shared.targets.figure_declarations import get_figure

    return {"table": get_table, "figure": get_figure}[kind](paper, name).caption


def paper_figure_number(paper, name):
    """A figure as the paper numbers it ("3 (bottom)"), for the report, as paper_caption."""
    from shared.targets.figure_declarations import get_figure

    return get_figure(paper, name).number


def search_targets(paper):
    """Every hyperparameter search a paper describes (not part of regenerating its tables)."""
    return [target_path(paper, name) for name in EXPANSION.names(paper, "search")]


def list_targets(log):
    """What `snakemake` with no target prints (and writes to `log`): every target, where it lands
    at this scale and how many runs it needs."""
    lines = [f"Nothing is built without a target. Targets at scale={SCALE} (runs), landing in {OUT}/<paper>/<target>/:"]
    for paper in EXPANSION.papers():
        lines.append(f"  {paper} (every table and figure), {paper}_searches, or one of:")
        for name in [*EXPANSION.names(paper), *PAPER_SUMMARIES]:
            count = len(requested_runs(paper, [name]))  # a figure's own runs and those it draws from tables
            lines.append(f"    papers/{paper}/{name}" + (f" ({count})" if count else ""))
    lines.append("  shared_runs (the runs tables of several papers share, from those finished)")
    lines.append("e.g. snakemake --cores 2 --config scale=smoke device=cpu -- papers/fedssd/table2")
    print("\n".join(lines))
    Path(log).write_text("\n".join(lines) + "\n")  # a log, not a result: no atomic write


# --- what a table, figure or search job did: its log, and the run index --------------------

def run_status(run_id):
    """A run's status and final accuracy as its directory shows them."""
    path = Path(RUNS_DIR, run_id, "metrics.json")
    if path.exists():
        try:  # a damaged file (its run is scheduled again: runs.smk) must not fail the table's job
            metrics = read_summary(path.parent)
            return str(metrics.get("status", "unknown")), metrics.get("final_acc")
        except (RunFilesError, OSError):
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
            rows = [r for r in csv.DictReader(f) if r.get("scale") != DATA_KEY]
    for run in EXPANSION.grid_runs:
        if not Path(RUNS_DIR, run.run_id).exists():
            continue
        status, final = run_status(run.run_id)
        rows.append({"run_id": run.run_id, "paper": run.paper, "table": run.target, "method": run.method,
                     "row": run.row, "column": run.column, "seed": run.seed, "scale": DATA_KEY,
                     "status": status, "final_acc": "" if final is None else final})
    rows.sort(key=lambda r: (r["scale"], r["paper"], r["table"], r["row"], r["column"], str(r["seed"])))
    import pandas as pd  # here: a workflow that builds no table never needs it

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


def build(kind, paper, name, out_dir, log):
    """Build target `name` (a table, figure or search) of `paper` into `out_dir`, writing what
    it did to `log`: the target, the scale, each run's status, the files written, the seconds
    taken, and a traceback if it raised; then rebuild the run index."""
    from shared.targets.table_declarations import get_search, get_table
    from shared.targets.figure_declarations import get_figure
    from shared.reporting.figures import build_figure  # here: the builders import torch and matplotlib,
    from shared.reporting.tables import build_search, build_table  # which a start that only plans or trains never needs

    builder, getter = {"table": (build_table, get_table), "figure": (build_figure, get_figure),
                       "search": (build_search, get_search)}[kind]
    started = time.time()
    ids = EXPANSION.target_runs(paper, kind, name)
    partitions = draws_partitions(kind, paper, name)  # no run's status matters to it
    statuses = {} if partitions else {rid: run_status(rid)[0] for rid in ids}
    counts = Counter(status.split(":")[0] for status in statuses.values())
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {kind} {paper}/{name} at scale={SCALE} -> {out_dir}\n")
        if partitions:
            f.write(f"partitions of {len(ids)} runs, computed without training them ({PARTITIONS}/)\n")
        else:
            f.write(f"runs: {len(ids)} ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})\n")
        for rid, status in statuses.items():
            if status != "completed":
                f.write(f"  {rid}: {status}\n")
        try:  # what the build says on stderr (a reduced scale's warnings) goes to the log too
            with contextlib.redirect_stderr(Tee(sys.stderr, f)):
                builder(on_data(kind, getter(paper, name)), SCALE, RUNS_DIR, out_dir, BUILD_RUNTIME)
            if COPY is not None:
                label_outputs(Path(out_dir), COPY)
        except Exception:
            f.write(traceback.format_exc())
            raise
        written = sorted(str(p.relative_to(out_dir)) for p in Path(out_dir).rglob("*") if p.is_file())
        f.write(f"wrote {len(written)} files in {time.time() - started:.1f} s: {', '.join(written)}\n")
        f.write(f"run index {INDEX}: {write_index()} runs\n")


def on_data(kind, target):
    """The table or figure as built on this invocation's data: on a copy, its part there, labelled."""
    if COPY is None:
        return target
    return labelled(copy_part(target, SCALE, COPY) if kind == "table" else target, COPY)


def finished_table_runs(wildcards):
    """The metrics.json of the tables' runs that have finished: a listing of what is measured so
    far, which never asks for a run to be trained."""
    paths = {f"{RUNS_DIR}/{rid}/metrics.json" for paper in EXPANSION.papers()
             for name in EXPANSION.names(paper, "table") for rid in EXPANSION.target_runs(paper, "table", name)}
    return sorted(p for p in paths if Path(p).exists())


def build_summary(kind, out_dir, log, *args):
    """Build a summary over built tables (`claims` of a paper, or `shared_runs` across papers)
    into `out_dir`, then say in the job's log what it wrote."""
    from shared.reporting.shared_runs import write_shared_runs  # here: the builders import torch and pandas
    from shared.reporting.tables import build_paper_claims

    builder = {"claims": build_paper_claims, "shared_runs": write_shared_runs}[kind]
    builder(*args, SCALE, RUNS_DIR, out_dir=out_dir, runtime=BUILD_RUNTIME)
    written = ", ".join(sorted(p.name for p in Path(out_dir).iterdir()))
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {kind} at scale={SCALE} -> {out_dir}: {written}\n")
