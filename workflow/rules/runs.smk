
# A run job's command names its runs by output directory and scale; shared.run looks their
# configs up itself and takes the runtime keys (RUNTIME_ARGS) from --config as they are when
# the job starts. So a job has no params, and its inputs are at most failure.json files:
# Snakemake's rerun triggers see the run ids and nothing else, and a finished run is never
# scheduled again because a speed switch, the data root or runs_per_job changed.
import math

from shared.runs.shipped import restore_shipped
from shared.targets.cost import gpu_hours
from shared.runs.files import is_final, summary_problem

# Shipped runs (results/shipped/runs/, tracked; shared/runs/shipped.py) are finished runs: copied
# into the runs folder before the DAG is built, so their jobs are never scheduled.
restore_shipped(RUNS, RUNS_DIR)

RUNS_PER_JOB = config.get("runs_per_job", 1)
RETRIES = config["retries"]  # attempts after the first, for every run job (see below)
RUNTIME_MINUTES = config.get("runtime_minutes")  # first attempt's SLURM time limit, if set


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
    the retry continues from the run's last checkpoint)."""
    first = RUNTIME_MINUTES or 10 + math.ceil(2 * 60 * gpu_hours(cfg))
    return int(first * 2 ** (attempt - 1))


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
    return sum(minutes(RUNS[rid], attempt) for rid in members)


def summary_state(metrics, rid):
    """What a run's metrics.json says at planning time: "final", "failed", "missing", or a
    problem (unreadable, not a summary, another run's) that shared.run deals with."""
    try:
        summary = json.loads(metrics.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError) as exc:
        return f"is unreadable ({type(exc).__name__})"
    if problem := summary_problem(summary):
        return f"is not a run's summary ({problem})"
    if summary["run_id"] != rid:
        return "belongs to another run"
    return "final" if is_final(summary["status"]) else "failed"


def failure_inputs(members):
    """failure.json of the runs whose last attempt raised, as inputs, so that the next
    invocation runs them again: while a run's metrics.json records the failure, its failure.json
    is made newer than it (Snakemake touches a job's outputs when it ends), which reruns it
    under any rerun triggers, with or without metadata; once the run completes, its
    failure.json stays an older input, which triggers nothing. A metrics.json that cannot be
    read (a truncated file, a tampered one) is said in one line and reruns its run the same
    way, through failure.json or, where there is none, a `.rerun` marker (Snakemake removes a
    job's outputs before it runs; shared.run, run by hand, moves such a file aside)."""

    def inputs(wildcards):
        found = []
        for rid in members(wildcards):
            run_dir = Path(RUNS_DIR, rid)
            metrics = run_dir / "metrics.json"
            state = summary_state(metrics, rid)
            damaged = state not in ("final", "failed", "missing")
            if damaged:
                print(f"warning: {metrics} {state}; the run is trained again",
                      file=sys.stderr)
            trigger = run_dir / "failure.json"
            if not trigger.exists():
                trigger = run_dir / ".rerun"
                if damaged:
                    trigger.touch()
            if not trigger.exists():
                continue
            found.append(str(trigger))
            if damaged or state == "failed":
                later = max(time.time(), metrics.stat().st_mtime + 1)
                os.utime(trigger, (later, later))
        return found

    return inputs


def mark_stale_targets():
    """A built table, figure or search whose runs have gone (a run directory deleted to train it
    again) gets a marker input that is newer than it, so that Snakemake builds it again, and so
    trains the runs it lacks. Snakemake itself does neither: it does not rerun a job whose output
    is there for an input that is missing alone (it takes it for a removed temporary file), and
    making the output older does not help, as it takes an input whose checksum it recorded for
    unchanged however old the output. The marker names the runs gone and when the target was
    built, so each new loss is a new content, and a marker a build has seen triggers nothing."""
    cited = {(paper, name): set(EXPANSION.target_runs(paper, kind, name))
             for paper in EXPANSION.papers() for kind in ("table", "figure", "search")
             for name in EXPANSION.names(paper, kind)}
    for (paper, name), run_ids in cited.items():
        target = Path(target_path(paper, name))
        if not target.is_dir():
            continue
        gone = sorted(rid for rid in run_ids if not Path(RUNS_DIR, rid, "metrics.json").exists())
        if gone:
            stamp = target / ".snakemake_timestamp"
            built = (stamp if stamp.exists() else target).stat().st_mtime
            write_if_changed(stale_marker(paper, name), json.dumps({"built": built, "gone": gone}) + "\n")


mark_stale_targets()


def define_run_rule(name, output, log, benchmark, members, constraints=None):
    """The run rule, written once: one per run (a wildcard rule) or one per group of runs
    (--config runs_per_job=N, a rule per group). `members(wildcards)` lists its run ids."""

    rule:
        name:
            name
        output:
            output,
        input:
            failure_inputs(members),
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


if RUNS_PER_JOB == 1:
    define_run_rule("run", f"{RUNS_DIR}/{{run_id}}/metrics.json", "results/logs/runs/{run_id}.log",
                    "results/benchmarks/runs/{run_id}.tsv", known_run, {"run_id": "[0-9a-f]{16}"})
else:  # one job per group of runs that train in one batched step (shared/targets/run_groups.py), at most
    # runs_per_job of them. Groups depend on the scale's runs alone, never on what is finished, so
    # every process (the main one, a SLURM job's) defines the same rules. A group of finished and
    # unfinished runs runs again as a whole (Snakemake deletes its outputs first); shared.run
    # restores the finished ones from their kept metrics.json and trains only the others.
    from shared.targets.run_groups import form_groups

    for _group in form_groups(RUNS, RUNS_PER_JOB):
        define_run_rule(f"runs_{_group[0]}", [f"{RUNS_DIR}/{rid}/metrics.json" for rid in _group],
                        f"results/logs/runs/{_group[0]}-group.log", f"results/benchmarks/runs/{_group[0]}-group.tsv",
                        lambda wildcards, group=_group: group)
