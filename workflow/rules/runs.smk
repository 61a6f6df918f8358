import shlex

from shared.config import identity, to_dict


def run_config_json(wildcards):
    if wildcards.run_id not in RUNS:
        raise ValueError(f"run {wildcards.run_id} belongs to no table at scale={SCALE}")
    return json.dumps(to_dict(RUNS[wildcards.run_id]))


def minutes(cfg, attempt):
    """Requested wall time; doubled on each retry (SLURM kills a job at its limit)."""
    per_round = {"resnet50": 4.0, "resnet50_gn": 4.0, "alexnet_bn": 1.0}.get(cfg.model.name, 0.5)
    return int(10 + per_round * cfg.federation.rounds * cfg.local.epochs / 10 * 2 ** (attempt - 1))


def run_minutes(wildcards, attempt):
    return minutes(RUNS[wildcards.run_id], attempt)


def run_memory(cfg):
    return 32000 if cfg.model.name.startswith("resnet50") else 8000


def seed_groups(runs, size):
    """Run ids in groups of at most `size` seeds of one table cell (configs equal but for the
    seed), in seed order. A group depends on its cell alone, so adding a table never moves a
    finished run into a job with unfinished ones (Snakemake would delete its outputs)."""
    cells = {}
    for rid, cfg in runs.items():
        cell = json.dumps({k: v for k, v in identity(cfg).items() if k != "seed"}, sort_keys=True)
        cells.setdefault(cell, []).append(rid)
    groups = []
    for members in cells.values():
        members.sort(key=lambda rid: runs[rid].seed)
        groups += [members[i:i + size] for i in range(0, len(members), size)]
    return groups


RUNS_PER_JOB = config.get("runs_per_job", 1)

if RUNS_PER_JOB > 1:  # --config runs_per_job=N: one job (and one process, shared/multirun.py) per group

    for _group in seed_groups(RUNS, RUNS_PER_JOB):

        rule:
            name:
                f"runs_{_group[0]}"
            output:
                [f"results/runs/{rid}/metrics.json" for rid in _group],
            log:
                f"results/logs/runs/{_group[0]}-group.log",
            params:
                runs=" ".join(f"--json {shlex.quote(json.dumps(to_dict(RUNS[rid])))} --out results/runs/{rid}" for rid in _group),
            threads: 1 if SCALE == "smoke" else 4
            resources:
                gpu=0 if config["device"] == "cpu" else 1,
                mem_mb=sum(run_memory(RUNS[rid]) for rid in _group),
                runtime=lambda wildcards, attempt, group=_group: sum(minutes(RUNS[rid], attempt) for rid in group),
            shell:
                "OMP_NUM_THREADS={threads} {PYTHON:q} -m shared.run {params.runs} --record-failure --gpu auto > {log} 2>&1"

else:

    rule run:
        """One federated training run; resumes from its checkpoint if one exists."""
        output:
            "results/runs/{run_id}/metrics.json",
        log:
            "results/logs/runs/{run_id}.log",
        wildcard_constraints:
            run_id="[0-9a-f]{16}",
        params:
            config=run_config_json,
        threads: 1 if SCALE == "smoke" else 4
        resources:
            gpu=0 if config["device"] == "cpu" else 1,
            mem_mb=lambda w: run_memory(RUNS[w.run_id]),
            runtime=run_minutes,
        shell:
            "OMP_NUM_THREADS={threads} {PYTHON:q} -m shared.run --json {params.config:q} --out results/runs/{wildcards.run_id}"
            " --record-failure --gpu auto > {log} 2>&1"
