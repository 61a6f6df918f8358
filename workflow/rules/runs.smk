
# A run job's command names its runs by output directory and scale; shared.workflow_job looks their
# configs up itself and takes the runtime keys (RUNTIME_ARGS) from --config as they are when
# the job starts. So a job has no params, and its inputs are at most markers of a failure:
# Snakemake's rerun triggers see the run ids and nothing else, and a finished run is never
# scheduled again because a speed switch, the data root or runs_per_job changed.
import functools
import math

from shared.campaign.shipped_reading import shipped_run_problem
from shared.runs.shipped import SHIPPED, restore_shipped
from shared.targets.cost import gpu_hours
from shared.runs.files import RunFilesError, holds_result, is_final, printable, read_summary, summary_problem

# Shipped runs (results/shipped/runs/, tracked; shared/runs/shipped.py) are finished runs: each is
# restored into the runs folder by a job of its own (rule restore_shipped), never trained.
SHIPPED_RUNS = "|".join(sorted(rid for rid in RUNS if holds_result(SHIPPED / "runs" / rid)))
RETRY_MARKERS = "results/.retries"  # of runs to train again (`retry_marker`)

RUNS_PER_JOB = config.get("runs_per_job", 1)
RETRIES = config["retries"]  # attempts after the first, for every run job (see below)
RUNTIME_MINUTES = config.get("runtime_minutes")  # first attempt's SLURM time limit, if set
MAX_RUNTIME_MINUTES = config.get("max_runtime_minutes")  # no attempt asks for more (a partition's MaxTime)


def run_threads():
    """A run job's CPU threads (its OMP_NUM_THREADS; SLURM's --cpus-per-task), so that the cores
    given (--cores N) and the GPUs given (--resources gpu=G) run min(G, N) run jobs at once: the
    cores shared out among the GPUs, at most 4 (what every run job took before; nothing measured
    says a run gains from more), at least 1. Smoke runs take 1: they train in seconds on a CPU.
    `--config run_threads=K` sets it; under device=cpu no GPU is asked for, and a job takes
    min(4, N) threads."""
    if "run_threads" in config:
        return config["run_threads"]
    if SCALE == "smoke":
        return 1
    cores = workflow.resource_settings.cores or 1  # --cores, or the profile's
    gpus = 1 if config["device"] == "cpu" else workflow.global_resources.get("gpu").value or 1
    return max(1, min(4, cores // gpus))


def minutes(cfg, attempt):
    """Requested wall time of a run: twice the planner's estimate (shared/targets/cost.py, the one cost
    model) plus 10 minutes of start-up, doubled on each retry (SLURM kills a job at its limit;
    the retry continues from the run's last checkpoint), at most max_runtime_minutes (`capped`)."""
    return share_minutes(cfg, attempt, 1.0)


def share_minutes(cfg, attempt, share):
    """`minutes` of a job that does `share` of the run's work (a figure's probe: Figure.probe_cost)."""
    first = RUNTIME_MINUTES or 10 + math.ceil(2 * 60 * share * gpu_hours(cfg))
    return capped(int(first * 2 ** (attempt - 1)))


def capped(limit):
    """A time limit within --config max_runtime_minutes: SLURM leaves a job that asks for more than
    its partition's MaxTime pending for good, where one at the cap trains until it and its retry
    continues from its checkpoint."""
    return min(limit, MAX_RUNTIME_MINUTES) if MAX_RUNTIME_MINUTES else limit


def run_memory(cfg):
    return 32000 if cfg.model.name.startswith("resnet50") else 8000


def group_memory(members):
    """A group's host memory: its largest run's, and 1 GB for each further run (its own copy of
    the training pool, its models and its method's state; the dataset is loaded once)."""
    return max(run_memory(RUNS[rid]) for rid in members) + 1000 * (len(members) - 1)


def group_minutes(members, attempt):
    """A group's wall time: the sum of its runs' (`minutes`). A group's time is far less than
    the sum where its runs share a batched step on a GPU, but the plan has no measured group
    factor yet, and an overestimate only waits longer in SLURM's queue, where an underestimate
    gets the job killed (its retry then continues from the runs' checkpoints)."""
    return capped(sum(minutes(RUNS[rid], attempt) for rid in members))


def summary_state(metrics, rid):
    """What a run's metrics.json says at planning time: "final", "failed", "missing", or a
    problem (unreadable, not a summary, another run's) that shared.workflow_job deals with."""
    try:
        summary = read_summary(metrics.parent)
    except FileNotFoundError:
        return "missing"
    except RunFilesError as exc:
        return exc.reason
    except OSError as exc:
        return f"is unreadable ({type(exc).__name__})"
    if problem := summary_problem(summary):
        return f"is not a run's summary ({problem})"
    if summary["run_id"] != rid:
        return "belongs to another run"
    return "final" if is_final(summary["status"]) else "failed"


@functools.cache  # read once a process: the run rule and the targets ask for the same runs
def retry_marker(rid):
    """The marker of a run to train again, named by its metrics.json's time: a run whose
    metrics.json records a failure, or cannot be read (a truncated file, a tampered one: said in
    one line); None for a finished or a missing run. The marker is missing until rule
    retry_run writes it, and an input of the run's job and of the target asked for (common.smk
    `runs_to_finish`), so Snakemake trains the run again; each new failure is a new marker."""
    metrics = Path(RUNS_DIR, rid, "metrics.json")
    state = summary_state(metrics, rid)
    if state in ("final", "missing"):
        return None
    if state != "failed":
        print(f"warning: {metrics} {state}; the run is trained again", file=sys.stderr)
    return f"{RETRY_MARKERS}/{rid}/{metrics.stat().st_mtime_ns}.json"


def rerun_inputs(members):
    """The run job's inputs: the markers of its runs' failures, past ones (older than the
    outputs of the job that trained them again: they trigger nothing) and the current one.
    failure.json and `.rerun`, the markers of the workflow before them, stay inputs where they
    are, so that the set of inputs Snakemake recorded for a finished run is unchanged."""

    def inputs(wildcards):
        found = []
        for rid in members(wildcards):
            found += [str(p) for p in (Path(RUNS_DIR, rid, "failure.json"), Path(RUNS_DIR, rid, ".rerun")) if p.exists()]
            found += sorted(str(p) for p in Path(RETRY_MARKERS, rid).glob("*.json"))
            if (marker := retry_marker(rid)) and marker not in found:
                found.append(marker)
        return found

    return inputs


def mark_retry(rid, marker, log):
    """Rule retry_run: the marker of a run to train again, and its log."""
    state = summary_state(Path(RUNS_DIR, rid, "metrics.json"), rid)
    write_atomically(Path(marker), lambda tmp: tmp.write_text(json.dumps({"metrics.json": state}) + "\n"))
    Path(log).write_text(f"run {rid}: metrics.json {state}; trained again\n")  # a log: no atomic write


def restore_shipped_run(rid, log):
    """Rule restore_shipped: the shipped run into the runs folder, what it did in its log (a
    note where another process holds the run: then nothing is copied, and the job fails). A
    shipped run that fails the checks `campaign import` makes (shared/campaign/shipped_reading.py)
    is not restored, and the job fails saying why: the tracked tree may have been edited by hand."""
    problem = shipped_run_problem(SHIPPED / "runs" / rid)
    if problem:
        message = (
            f"shipped run {rid} cannot be read ({printable(problem)}); not restored: remove it with "
            f"git rm -r {SHIPPED / 'runs' / rid}, and the workflow trains it"
        )
        Path(log).write_text(f"{message}\n")
        raise ValueError(message)
    with open(log, "w") as f, contextlib.redirect_stderr(f):
        copied = restore_shipped([rid], RUNS_DIR)
        print(f"run {rid}: " + ("restored from the shipped runs" if copied else "not restored"), file=f)


def define_run_rule(name, output, log, benchmark, members, constraints=None):
    """The run rule, written once: one per run (a wildcard rule) or one per group of runs
    (--config runs_per_job=N, a rule per group). `members(wildcards)` lists its run ids."""

    rule:
        name:
            name
        output:
            output,
        input:
            rerun_inputs(members),
        log:
            log,
        benchmark:
            benchmark
        wildcard_constraints:
            **(constraints or {}),
        retries: RETRIES
        conda:
            ENVIRONMENT
        threads: run_threads()
        resources:
            gpu=0 if config["device"] == "cpu" else 1,  # no GPU is asked of SLURM under device=cpu
            mem_mb=lambda wildcards: group_memory(members(wildcards)),
            runtime=lambda wildcards, attempt: group_minutes(members(wildcards), attempt),
            run_attempt=lambda wildcards, attempt: attempt,
        shell:
            RUN_COMMAND


def known_run(wildcards):
    if wildcards.run_id not in RUNS:
        raise ValueError(f"run {wildcards.run_id} belongs to no table at scale={SCALE}")
    return [wildcards.run_id]


TRAINED = f"(?!{SHIPPED_RUNS})[0-9a-f]{{16}}" if SHIPPED_RUNS else "[0-9a-f]{16}"  # the run ids not shipped
if RUNS_PER_JOB == 1:
    define_run_rule("run", f"{RUNS_DIR}/{{run_id}}/metrics.json", "results/logs/runs/{run_id}.log",
                    "results/benchmarks/runs/{run_id}.tsv", known_run, {"run_id": TRAINED})
else:  # one job per group of runs that train in one batched step (shared/targets/run_groups.py), at most
    # runs_per_job of them, each of runs that the same targets use (so that a job trains no run a
    # target asked for does not need). Groups depend on the scale's runs alone, never on what is
    # finished, so every process (the main one, a SLURM job's) defines the same rules. A group of finished and
    # unfinished runs runs again as a whole (Snakemake deletes its outputs first); shared.workflow_job
    # restores the finished ones from their kept metrics.json and trains only the others.
    from shared.targets.run_groups import form_groups

    _trained = {rid: cfg for rid, cfg in RUNS.items() if rid not in SHIPPED_RUNS.split("|")}
    for _group in form_groups(_trained, RUNS_PER_JOB, EXPANSION.used_by()):
        define_run_rule(f"runs_{_group[0]}", [f"{RUNS_DIR}/{rid}/metrics.json" for rid in _group],
                        f"results/logs/runs/{_group[0]}-group.log", f"results/benchmarks/runs/{_group[0]}-group.tsv",
                        lambda wildcards, group=_group: group)
