"""The Snakemake workflow, run in a copy of the project so the checkout stays clean."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from shared.targets.figure_declarations import paper_figures
from shared.targets.papers import paper_names
from shared.targets.probes import probe_code
from shared.targets.scales import SCALES
from shared.targets.table_declarations import all_tables, expand, get_table, paper_searches
from tests.workflow import require_snakemake

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("Snakefile", "shared", "papers", "workflow", "config", "profiles")

# A paper for the workflow's own tests, dropped into a copy of the project (papers register
# themselves): methods that fail once, always fail, diverge or take their time.
CHECK_PAPER_INIT = '''"""Methods and tables that exercise the workflow's failure handling and SLURM."""
METHODS = {"flaky": ".methods:Flaky", "broken": ".methods:Broken", "diverging": ".methods:Diverging",
           "stalling": ".methods:Stalling"}
'''
CHECK_PAPER_METHODS = '''import os
import time
from pathlib import Path

import torch.nn.functional as F

from shared.methods.fedavg import FedAvg


class Flaky(FedAvg):
    """Raises in its first round the first time a seed runs: a transient failure."""

    def prepare_round(self, round, global_model):
        marker = Path(os.environ["WFCHECK_DIR"]) / f"flaky-{self.cfg.seed}"
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            raise RuntimeError("a transient failure")
        super().prepare_round(round, global_model)


class Broken(FedAvg):
    def prepare_round(self, round, global_model):
        raise RuntimeError("a bug")


class Diverging(FedAvg):
    def local_loss(self, model, x, y, client):
        return F.cross_entropy(model(x), y) * float("inf")


class Stalling(FedAvg):
    """Hangs in its second round the first time a seed runs, after its first round's
    checkpoint: a job that overruns its time limit, whenever the scheduler gets to killing it."""

    def prepare_round(self, round, global_model):
        marker = Path(os.environ["WFCHECK_DIR"]) / f"stalled-{self.cfg.seed}"
        if round == 1 and not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            time.sleep(3600)
        super().prepare_round(round, global_model)
'''
CHECK_PAPER_TABLES = """from shared.targets.table_declarations import Column, Row, Table

BASE = {"dataset": {"name": "cifar10"}, "model": {"name": "fedavg_cnn"},
        "partition": {"kind": "dirichlet", "beta": 0.5, "clients": 4}, "federation": {"rounds": 3}}
ONE = [Column("Dir(0.5)", {})]
TABLES = [
    Table("wfcheck", "table1", "Failures", BASE, [Row("FedAvg", {"name": "fedavg"}), Row("Flaky", {"name": "flaky"}),
          Row("Broken", {"name": "broken"}), Row("Diverging", {"name": "diverging"})], ONE, {}, seeds=(0,)),
    Table("wfcheck", "table2", "Fast runs", BASE, [Row("FedAvg", {"name": "fedavg"}), \
Row("FedProx", {"name": "fedprox"})],
          ONE, {}, seeds=(0, 1)),
    Table("wfcheck", "table3", "A run that overruns its time limit once", BASE, [Row("Stalling", {"name": "stalling"})],
          ONE, {}, seeds=(0,)),
    # the smoke scale trains its own local epochs whatever E says: both columns are table1's FedAvg run
    Table("wfcheck", "table4", "Local epochs", BASE, [Row("FedAvg", {"name": "fedavg"})],
          [Column(f"E={e}", {"local": {"epochs": e}}) for e in (1, 5)], {}, seeds=(0,)),
]
"""


def make_project(copy: Path, check_paper: bool = False) -> Path:
    """A copy of the workflow's parts (no generated outputs), with the test paper if asked."""
    copy.mkdir(parents=True, exist_ok=True)
    for part in PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, copy / part, ignore=skip_generated)
        else:
            shutil.copy(src, copy / part)
    if check_paper:
        add_paper(copy, "wfcheck", CHECK_PAPER_INIT, CHECK_PAPER_METHODS, CHECK_PAPER_TABLES)
    return copy


def add_paper(project: Path, name: str, init: str, methods: str, tables: str) -> None:
    """A paper package of the test's own in the project's papers/."""
    paper = project / "papers" / name
    paper.mkdir()
    (paper / "__init__.py").write_text(init)
    (paper / "methods.py").write_text(methods)
    (paper / "tables.py").write_text(tables)


def paper_runs(paper: str, table: str, project: Path, scale: str = "smoke") -> list[str]:
    """Run ids of a table as the project copy expands it (the test paper is only there)."""
    code = (
        "import json; from shared.targets.table_declarations import expand, get_table; "
        f"print(json.dumps([c.run_id for c in expand(get_table({paper!r}, {table!r}), {scale!r})]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("project"))


def skip_generated(directory, names):
    """Leave out generated table and figure directories and byte code."""
    return [n for n in names if n == "__pycache__" or (Path(directory, n).is_dir() and n.startswith(("table", "fig")))]


def snakemake(project, *args, env=None):
    require_snakemake()
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=project, capture_output=True, text=True, env=env
    )


def job_counts(stdout: str) -> dict[str, int]:
    """The dry run's job stats: rule -> jobs ({} for "Nothing to be done")."""
    counts, inside = {}, False
    for line in stdout.splitlines():
        if line.startswith("job ") and line.rstrip().endswith("count"):
            inside = True
        elif inside and line.strip() and not line.startswith("---"):
            name, _, count = line.strip().rpartition(" ")
            if name.strip() == "total":
                break
            counts[name.strip()] = int(count)
    return counts


FIGURES = [f for paper in paper_names() for f in paper_figures(paper).values()]
SEARCHES = [s for paper in paper_names() for s in paper_searches(paper).values()]
TARGETS = [f"papers/{t.paper}/{t.name}" for t in [*all_tables(), *FIGURES, *SEARCHES]]


@pytest.mark.parametrize("scale", sorted(SCALES))
def test_every_table_figure_and_search_dry_runs(project, scale):
    proc = snakemake(project, "-n", "--config", f"scale={scale}", "--", *TARGETS)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    expected_runs = {c.run_id for t in all_tables() for c in expand(t, scale)}
    expected_runs |= {c.run_id for f in FIGURES for c in f.cells(scale)}
    expected_runs |= {c.run_id for s in SEARCHES for c in expand(s.as_table(), scale)}
    assert job_counts(proc.stdout)["run"] == len(expected_runs)


def test_a_figures_probe_is_a_gpu_job_of_its_own_between_its_run_and_the_drawing(project):
    """FedCSD's Fig. 1 (Figure.probe): its run, one probe job that asks for a GPU and a time
    limit from the figure's probe_cost of the run, then the figure, which reads the probe."""
    import math

    from shared.targets.cost import gpu_hours

    figure = paper_figures("fedcsd")["fig1"]
    (cell,) = figure.cells("paper")
    proc = snakemake(project, "-n", "--config", "device=cuda", "--", "papers/fedcsd/fig1")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert job_counts(proc.stdout) == {"run": 1, "probe": 1, "figure": 1, "papers/fedcsd/fig1": 1}, proc.stdout
    job = proc.stdout.split("rule probe:")[1].split("rule ")[0]
    minutes = 10 + math.ceil(2 * 60 * figure.probe_cost * gpu_hours(cell.config))
    probe = f"results/probes/fedcsd-fig1-{cell.run_id}-{probe_code(figure)}.csv"  # named by its code too
    assert f"output: {probe}" in job
    assert "gpu=1" in job and f"runtime={minutes}," in job, job
    figure_job = proc.stdout.split("rule figure:")[1].split("rule ")[0]
    assert probe in figure_job


def test_a_figure_of_partitions_trains_no_run(project):
    """FedSSD's Fig. 6 draws the partitions of three runs (two of them ResNet-50's, hours on a
    GPU each): a CPU job per partition (rule partition, no GPU asked), then the figure, which
    reads them; no run trains. The paper's figure beside its tables shares nothing to train."""
    runs = [c.run_id for c in paper_figures("fedssd")["fig6"].cells("paper")]
    proc = snakemake(project, "-n", "--config", "device=cuda", "--", "papers/fedssd/fig6")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert job_counts(proc.stdout) == {"partition": 3, "figure": 1, "papers/fedssd/fig6": 1}, proc.stdout
    jobs = proc.stdout.split("rule partition:")[1:]
    assert all("gpu=" not in job.split("rule ")[0] for job in jobs)
    figure_job = proc.stdout.split("rule figure:")[1].split("rule ")[0]
    assert all(f"results/partitions/{rid}.csv" in figure_job for rid in runs)


def test_unknown_table_lists_valid_names(project):
    proc = snakemake(project, "-n", "--", "papers/fedssd/table9")
    assert proc.returncode != 0
    assert "fedssd has no table 'table9'; valid: ['table1', 'table2', 'table3']" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "given, said",
    [
        ("scale=huge", "--config scale: 'huge' is not one of ['paper', 'small', 'smoke']"),
        ("runs_per_job=0", "--config runs_per_job: 0 is less than the minimum of 1"),
        ("foo=1", "--config: Additional properties are not allowed ('foo' was unexpected)"),
    ],
)
def test_a_config_value_the_schema_refuses_is_said_in_a_line_naming_its_key(project, given, said):
    proc = snakemake(project, "-n", "--config", given, "--", "papers/fedssd/table2")
    said_back = proc.stdout + proc.stderr
    assert proc.returncode != 0 and said in said_back.splitlines(), said_back[-2000:]
    assert "Failed validating" not in said_back  # not the schema's text


def test_smoke_table_end_to_end_then_only_missing_runs_rerun(project):
    target, figure = "papers/fedcad/table2", "papers/fedcad/fig4"  # Fig. 4: curves from Table 2's runs
    proc = snakemake(project, "--cores", "2", "--config", "scale=smoke", "device=cpu", "--", target, figure)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = project / "results" / "smoke" / "fedcad" / "table2"  # reduced scales land under results/<scale>/
    assert not (project / target).exists()
    table = pd.read_csv(out / "table.csv")
    fedavg = table[table.row == "FedAvg"]
    assert len(fedavg) == 4 and (fedavg.n == 2).all() and (fedavg.status == "ok").all()  # smoke: 2 seeds
    definition = get_table("fedcad", "table2")
    for row in definition.rows:
        assert (table[table.row == row.label].status == ("ok" if row.implemented else "not implemented")).all()
    assert set(table.scale) == {"smoke"}
    tex = (out / "table.tex").read_text()
    assert r"\toprule" in tex and "Scale: smoke; not a paper result" in tex and r"\textbf{" in tex
    comparison = pd.read_csv(out / "comparison.csv")
    assert comparison.loc[comparison.row == "FedAvg", "paper_mean"].tolist() == [61.73, 71.29, 71.56, 72.98]
    provenance = yaml.safe_load((out / "provenance.yaml").read_text())
    assert (
        provenance["scale"] == "smoke"
        and provenance["runs"] == 4 * 2 * sum(r.implemented for r in definition.rows)
        and provenance["packages"]["torch"]
    )
    fig = project / "results" / "smoke" / "fedcad" / "fig4"
    assert (fig / "figure.png").stat().st_size > 0 and (fig / "figure.pdf").stat().st_size > 0

    # Every run job wrote a benchmark file; the table and figure jobs' logs say what they did;
    # the run index lists every run of the table.
    run_ids = [c.run_id for c in expand(definition, "smoke")]
    for rid in run_ids:
        assert (project / "results" / "benchmarks" / "runs" / f"{rid}.tsv").read_text().startswith("s\t")
    log = (project / "results" / "logs" / "smoke" / "tables" / "fedcad-table2.log").read_text()
    assert f"runs: {len(run_ids)} ({len(run_ids)} completed)" in log and "table.csv" in log and "run index" in log, log
    assert "figure.png" in (project / "results" / "logs" / "smoke" / "figures" / "fedcad-fig4.log").read_text()
    with open(project / "results" / "index.csv", newline="") as f:
        index = list(csv.DictReader(f))
    assert list(index[0]) == [
        "run_id",
        "paper",
        "table",
        "method",
        "row",
        "column",
        "seed",
        "scale",
        "status",
        "final_acc",
    ]
    mine = [r for r in index if r["table"] == "table2" and r["paper"] == "fedcad"]
    assert sorted(r["run_id"] for r in mine) == sorted(run_ids)
    assert all(r["scale"] == "smoke" and r["status"] == "completed" and float(r["final_acc"]) >= 0 for r in mine)

    # Interrupted work: one run lost, another half done. Only those are recomputed.
    runs = sorted((project / "results" / "runs").iterdir())
    shutil.rmtree(runs[0])
    (runs[1] / "metrics.json").unlink()
    shutil.rmtree(out)
    dry = snakemake(project, "-n", "--config", "scale=smoke", "device=cpu", "--", target)
    assert job_counts(dry.stdout).get("run") == 2, dry.stdout
    proc = snakemake(project, "--cores", "2", "--config", "scale=smoke", "device=cpu", "--", target)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert pd.read_csv(out / "table.csv").equals(table)

    report = snakemake(project, "--config", "scale=smoke", "device=cpu", "--report", "report.html", "--", target)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (project / "report.html").stat().st_size > 10_000


def test_speed_switches_on_a_finished_table_retrain_nothing(project):
    """Runtime keys are no part of a run job's params, inputs or code: switching any of them on
    the finished smoke table of the test above schedules nothing (it used to retrain every run)."""
    require_snakemake()  # before the precondition: the build above was skipped too
    target = "papers/fedcad/table2"
    base = ["--config", "scale=smoke", "device=cpu"]
    assert (project / "results" / "smoke" / "fedcad" / "table2" / "table.csv").exists(), (
        "runs after the end-to-end test"
    )
    for switch in (
        ["client_threads=2"],
        ["clients_per_step=2"],
        ["runs_per_job=2"],
        ["runs_per_job=3"],
        ["data_root=elsewhere"],
        ["device=auto"],
    ):
        dry = snakemake(project, "-n", *base, *switch, "--", target)
        assert dry.returncode == 0, dry.stderr[-2000:]
        assert job_counts(dry.stdout) == {} and "Nothing to be done" in dry.stdout + dry.stderr, (
            switch,
            dry.stdout[-3000:],
        )
    dry = snakemake(project, "-n", *base, "--", target, env={**os.environ, "FEDREPRO_DATA": "/somewhere/else"})
    assert job_counts(dry.stdout) == {} and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


def test_runs_in_groups_train_the_targets_runs_and_no_others(project):
    """`--config runs_per_job=n`: a group job trains every run of its group, so a group holds
    only runs that the same targets use; FedSSD's Table II trains its 120 runs (it was 241, its
    groups filled up with runs of Fig. 9 and the searches)."""
    require_snakemake()
    dry = snakemake(project, "-n", "--config", "runs_per_job=4", "--", "papers/fedssd/table2")
    assert dry.returncode == 0, dry.stderr[-2000:]
    outputs = [line for line in dry.stdout.splitlines() if line.strip().startswith("output:")]
    trained = set(re.findall(r"results/runs/([0-9a-f]{16})/metrics\.json", "\n".join(outputs)))
    assert trained == {c.run_id for c in expand(get_table("fedssd", "table2"), "paper")}


def test_a_run_jobs_time_limit_stays_within_max_runtime_minutes(project):
    """FedCAD's FEMNIST runs (ResNet-50) ask SLURM for about 2,400 minutes, their retries for
    twice and four times that; --config max_runtime_minutes caps every attempt (a partition's
    MaxTime)."""
    require_snakemake()
    limits = {}
    for cap in (None, 1440):
        extra = ["--config", f"max_runtime_minutes={cap}"] if cap else []
        dry = snakemake(project, "-n", *extra, "--", "papers/fedcad/table1")
        assert dry.returncode == 0, dry.stderr[-2000:]
        limits[cap] = max(map(int, re.findall(r"runtime=(\d+)", dry.stdout)))
    assert limits[None] > 1440 and limits[1440] == 1440, limits


def test_paper_scale_after_a_smoke_build_schedules_the_paper_runs(project):
    """A smoke table never sits where the paper-scale one belongs: after the smoke build above,
    asking for the paper-scale table schedules its runs, with Snakemake's metadata, with mtime
    triggers only, and without any metadata (a copied results tree)."""
    require_snakemake()  # before the precondition: the build above was skipped too
    target = "papers/fedcad/table2"
    paper_runs_count = len({c.run_id for c in expand(get_table("fedcad", "table2"), "paper")})
    assert (project / "results" / "smoke" / "fedcad" / "table2").exists()
    planned = {"run": paper_runs_count, "table": 1, target: 1}  # the target's name is a rule at every scale
    for extra in ([], ["--rerun-triggers", "mtime"]):
        dry = snakemake(project, "-n", *extra, "--", target)
        assert dry.returncode == 0, dry.stderr[-2000:]
        assert job_counts(dry.stdout) == planned, dry.stdout[-3000:]
    copy = project.parent / "copied-results"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns(".snakemake"))
    dry = snakemake(copy, "-n", "--", target)
    assert job_counts(dry.stdout) == planned, dry.stdout[-3000:]
    # while the smoke table is still up to date under its own scale
    dry = snakemake(copy, "-n", "--config", "scale=smoke", "device=cpu", "--", target)
    assert "run" not in job_counts(dry.stdout) and "table" not in job_counts(dry.stdout), dry.stdout[-3000:]


def test_slurm_profile_does_not_inherit_the_workstation_gpu_cap():
    """profiles/default is loaded on top of any --profile; its GPU count must be a per-machine
    (local) resource, so that on SLURM it caps nothing, and no rule is forced to ask for a GPU."""
    require_snakemake()
    from snakemake.cli import parse_args
    from snakemake.resources import ResourceScopes

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        _, slurm = parse_args(["-n", "--profile", "profiles/slurm", "papers/fedssd/table2"])
        _, local = parse_args(["-n", "--cores", "8", "papers/fedssd/table2"])
    finally:
        os.chdir(cwd)
    scopes = ResourceScopes.defaults()
    scopes.update(slurm.set_resource_scopes or {})
    assert "gpu" not in (slurm.resources or {}) or scopes.is_local("gpu")  # no cap across SLURM jobs
    assert not any("gpu" in res for res in (slurm.set_resources or {}).values())  # device=cpu asks for no GPU
    assert slurm.executor == "slurm" and slurm.jobs >= 2
    assert "gpu" in (local.resources or {})  # one workstation: each job holds one of its GPUs


def test_default_target_lists_the_targets_and_builds_nothing(project):
    proc = snakemake(project, "--cores", "1", "--config", "scale=smoke")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Nothing is built without a target" in proc.stdout and "papers/fedssd/table2 (80)" in proc.stdout
    # a figure drawn from a table's runs counts them; a paper's claims and shared_runs are targets too
    assert "papers/fedssd/fig7 (48)" in proc.stdout and "papers/fedssd/claims (" in proc.stdout
    assert "  shared_runs " in proc.stdout
    assert job_counts(proc.stdout) == {} or set(job_counts(proc.stdout)) == {"all"}


@pytest.fixture(scope="module")
def check_project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("check"), check_paper=True)


def test_failures_retry_then_mark_the_cell_and_divergence_is_a_result(check_project, tmp_path):
    """A run that raises fails its job (no metrics.json), so Snakemake retries it: a transient
    failure then completes. One that raises on every attempt is recorded on the last (the table
    builds, under keep-going, with its cell marked failed) and is tried again by the next
    invocation. A diverged run is a permanent result on its first attempt."""
    project = check_project
    env = {**os.environ, "WFCHECK_DIR": str(tmp_path / "markers")}
    args = [
        "--cores",
        "2",
        "--keep-going",
        "--config",
        "scale=smoke",
        "device=cpu",
        "retries=1",
        "--",
        "papers/wfcheck/table1",
    ]
    proc = snakemake(project, *args, "papers/wfcheck/table4", env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # a reduced scale that makes columns one experiment says so in the table job's log
    log = (project / "results" / "logs" / "smoke" / "tables" / "wfcheck-table4.log").read_text()
    assert "warning: " in log and "E=1, E=5 are the same runs" in log, log
    ids = {
        row: [rid]
        for row, rid in zip(("FedAvg", "Flaky", "Broken", "Diverging"), paper_runs("wfcheck", "table1", project))
    }
    runs, logs = project / "results" / "runs", project / "results" / "logs" / "runs"

    def status(rid):
        return json.loads((runs / rid / "metrics.json").read_text())["status"]

    assert all(status(r) == "completed" for r in ids["FedAvg"] + ids["Flaky"])
    for rid in ids["Flaky"]:  # failed once, retried, completed
        assert "attempt 2 of 2" in (logs / f"{rid}.log").read_text() and not (runs / rid / "failure.json").exists()
    for rid in ids["Broken"]:  # failed on both attempts: recorded on the last
        assert status(rid).startswith("failed: RuntimeError: a bug")
        assert json.loads((runs / rid / "failure.json").read_text())["attempt"] == 2
    for rid in ids["Diverging"]:  # a result at once
        assert status(rid).startswith("diverged") and not (runs / rid / "failure.json").exists()
        assert "attempt 1 of 2" in (logs / f"{rid}.log").read_text()
    table = pd.read_csv(project / "results" / "smoke" / "wfcheck" / "table1" / "table.csv").set_index("row")
    assert table.loc["FedAvg", "status"] == "ok" and table.loc["Flaky", "status"] == "ok"
    assert table.loc["Broken", "status"] == "failed" and table.loc["Broken", "failed"] == 1
    assert table.loc["Diverging", "status"] == "failed" and table.loc["Diverging", "failed"] == 1
    index = pd.read_csv(project / "results" / "index.csv")
    assert set(index[index.run_id.isin(ids["Broken"])].status.str.split(":").str[0]) == {"failed"}

    # The next invocation tries the failed runs again (not the diverged ones), with or without
    # Snakemake's metadata, after marking each (rule retry_run).
    expected = {"retry_run": 1, "run": 1, "table": 1, "papers/wfcheck/table1": 1}
    for extra in ([], ["--rerun-triggers", "mtime"]):
        dry = snakemake(project, "-n", *extra, *args, env=env)
        assert job_counts(dry.stdout) == expected, dry.stdout[-3000:]
    shutil.rmtree(project / ".snakemake")
    dry = snakemake(project, "-n", *args, env=env)
    assert job_counts(dry.stdout) == expected, dry.stdout[-3000:]


def test_runs_that_disappear_or_change_under_a_built_table_are_scheduled(tmp_path):
    """A built table is out of date once a run it cites is deleted (the README's way to train a
    run again) or its metrics.json changes; a truncated or tampered metrics.json is said in one
    line at planning time, even by a dry run, and its run trained again."""
    project = make_project(tmp_path / "project", check_paper=True)
    args = ["--cores", "2", "--config", "scale=smoke", "device=cpu", "--", "papers/wfcheck/table2"]
    proc = snakemake(project, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [project / "results" / "runs" / rid for rid in paper_runs("wfcheck", "table2", project)]
    table = {"table": 1, "papers/wfcheck/table2": 1}

    metrics = runs[0] / "metrics.json"
    changed = {**json.loads(metrics.read_text()), "wall_time_s": 1.0}  # a content Snakemake has no checksum of
    metrics.write_text(json.dumps(changed))
    assert job_counts(snakemake(project, "-n", *args).stdout) == table

    shutil.rmtree(runs[1])
    for extra in ([], ["--rerun-triggers", "mtime"]):
        dry = snakemake(project, "-n", *extra, *args)
        assert job_counts(dry.stdout) == {"run": 1, **table}, dry.stdout[-3000:]

    (runs[2] / "metrics.json").write_text('{"status": "compl')  # a truncated write beside a failure
    (runs[2] / "failure.json").write_text("{}")
    (runs[3] / "metrics.json").write_text('{"status": 3}')  # tampered, no failure.json
    dry = snakemake(project, "-n", *args)
    assert dry.returncode == 0 and "Traceback" not in dry.stderr, dry.stderr[-3000:]
    assert job_counts(dry.stdout) == {"retry_run": 2, "run": 3, **table}, dry.stdout[-3000:]
    assert f"warning: results/runs/{runs[2].name}/metrics.json is not what a run writes (" in dry.stderr
    assert f"warning: results/runs/{runs[3].name}/metrics.json is not a run's summary" in dry.stderr

    proc = snakemake(project, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all(json.loads((run / "metrics.json").read_text())["status"] == "completed" for run in runs)
    assert job_counts(snakemake(project, "-n", *args).stdout) == {}


# --- start-up and lint (issue 26) -------------------------------------------------------------

RUNTIME = {"data_root": "data", "trainer": {"device": "cpu", "clients_per_step": 1, "client_threads": 1}}


def test_expansion_cache_is_read_back_and_keyed_by_code_and_settings(tmp_path, monkeypatch):
    from shared.targets import expansion_cache as module

    first = module.expansion("smoke", RUNTIME, tmp_path)
    assert not (tmp_path / "smoke.pickle").exists()  # reading the workflow writes nothing
    module.save_expansion(first, "smoke", RUNTIME, tmp_path)  # its onstart handler does
    assert (tmp_path / "smoke.pickle").exists()
    table = get_table("fedssd", "table2")
    assert first.target_runs("fedssd", "table", "table2") == list(
        dict.fromkeys(c.run_id for c in expand(table, "smoke"))
    )
    search = next(iter(paper_searches("fedssd").values()))  # a table's and a search's runs are their grid's
    assert first.target_runs("fedssd", "search", search.name) == list(
        dict.fromkeys(c.run_id for c in expand(search.as_table(), "smoke"))
    )
    assert first.probe_costs == {("fedcsd", "fig1"): paper_figures("fedcsd")["fig1"].probe_cost}  # Figure.probe's
    assert first.probe_codes == {("fedcsd", "fig1"): probe_code(paper_figures("fedcsd")["fig1"])}

    # a source edited after the workflow was read: the expansion is saved under the key it was made from
    edited = tmp_path / "edited"
    keys = iter(["read", "edited"])
    monkeypatch.setattr(module, "cache_key", lambda *args: next(keys))
    module.save_expansion(module.expansion("smoke", RUNTIME, edited), "smoke", RUNTIME, edited)
    assert module.cached(edited / "smoke.pickle", "read") is not None
    assert module.cached(edited / "smoke.pickle", "edited") is None
    monkeypatch.undo()

    def must_not_expand(*args):
        raise AssertionError("expanded again although the code and settings are the same")

    with monkeypatch.context() as patch:
        patch.setattr(module, "expand_all", must_not_expand)
        again = module.expansion("smoke", RUNTIME, tmp_path)
    assert again.runs.keys() == first.runs.keys() and again.grid_runs == first.grid_runs
    calls = []
    monkeypatch.setattr(module, "expand_all", lambda scale, runtime, copy, key: calls.append(runtime) or first)
    module.expansion("smoke", {**RUNTIME, "data_root": "elsewhere"}, tmp_path)  # another setting
    monkeypatch.setattr(module, "source_digest", lambda: "edited code")
    module.expansion("smoke", RUNTIME, tmp_path)  # another source
    assert len(calls) == 2
    with pytest.raises(module.ConfigError, match="fedssd has no table 'table99'"):
        first.target_runs("fedssd", "table", "table99")


def test_a_cache_naming_a_module_since_moved_is_expanded_again(tmp_path, monkeypatch):
    """A cache pickled before a class moved to another module names a module that is gone."""
    from shared.targets import expansion_cache as module

    (tmp_path / "smoke.pickle").write_bytes(b"cshared.targets.gone\nExpansion\n.")
    monkeypatch.setattr(module, "expand_all", lambda scale, runtime, copy, key: "expanded again")
    assert module.expansion("smoke", RUNTIME, tmp_path) == "expanded again"


def test_a_cached_start_imports_neither_torch_nor_a_paper(tmp_path):
    code = (
        "import sys; from shared.targets.expansion_cache import expansion, save_expansion; "
        f"e = expansion('smoke', {RUNTIME!r}, {str(tmp_path)!r}); "
        f"save_expansion(e, 'smoke', {RUNTIME!r}, {str(tmp_path)!r}); "
        "print(len(e.runs), 'torch' in sys.modules, any(m.startswith('papers.') for m in sys.modules))"
    )
    fill, cached = (
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True) for _ in range(2)
    )
    assert fill.returncode == 0 and cached.returncode == 0, fill.stderr + cached.stderr
    assert fill.stdout.split()[0] == cached.stdout.split()[0]
    assert cached.stdout.split()[1:] == ["False", "False"]


def test_lint_is_clean(project):
    proc = snakemake(project, "--lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr


def test_a_copy_of_the_data_gets_its_own_runs_folder_and_labels(tmp_path):
    """`--config copy=cifar10=<sha256>`: the table's part on CIFAR-10 trained on the copy (the
    campaign's run ids), built into the folder the campaign names, labelled; the official
    paper-scale table untouched. Runs stood in for by a metrics.json (all a table reads)."""
    from shared.data.catalog import file_digest
    from shared.data.datasets import CIFAR
    from shared.targets.copies import Copy, campaign_runs
    from tests.campaign.test_campaign import finish_for_table, write_copy

    project = make_project(tmp_path / "project")
    (project / "data" / "copies").mkdir(parents=True)
    sha = file_digest(write_copy(project / "data" / "copies" / "mine.zip", CIFAR["cifar10"]["classes"]), "sha256")
    args = ["--config", "scale=paper", "device=cpu", f"copy=cifar10={sha}", "--", "papers/fedcad/table4"]
    runs = campaign_runs(["papers/fedcad/table4"], "paper", Copy("cifar10", sha))[0]
    planned = snakemake(project, "-n", *args)
    assert job_counts(planned.stdout) == {"run": len(runs), "table": 1, "papers/fedcad/table4": 1}, planned.stderr[
        -2000:
    ]
    for rid in runs:
        finish_for_table(project / "results" / "runs", rid, 60.0)
    built = snakemake(project, "--cores", "1", *args)
    assert built.returncode == 0, built.stderr[-3000:]
    out = project / "results" / f"cifar10-png-copy-{sha[:7]}" / "fedcad" / "table4"
    label = f"CIFAR-10, PNG copy sha256 {sha[:7]}"
    for name in ("table.tex", "comparison.md", "claims.md", "claims.html"):
        assert label in (out / name).read_text(), name
    assert set(pd.read_csv(out / "table.csv").data) == {label + "…"} == set(pd.read_csv(out / "comparison.csv").data)
    assert yaml.safe_load((out / "provenance.yaml").read_text())["data"] == label + "…"
    assert not (project / "papers" / "fedcad" / "table4").exists()
    for summary in ("shared_runs", "fedcad/claims"):  # they span the official data: none is built on a copy
        planned = snakemake(project, "-n", *args[:-1], f"results/cifar10-png-copy-{sha[:7]}/{summary}")
        assert planned.returncode != 0 and "No rule to produce" in planned.stdout + planned.stderr, summary
    bad = snakemake(
        project, "-n", "--config", "scale=paper", "device=cpu", f"copy=cifar10={'0' * 64}", "--", "papers/fedcad/table4"
    )
    assert bad.returncode != 0 and "no file with that SHA-256" in bad.stdout + bad.stderr
