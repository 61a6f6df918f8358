from shared.config import to_dict


def run_config_json(wildcards):
    if wildcards.run_id not in RUNS:
        raise ValueError(f"run {wildcards.run_id} belongs to no table at scale={SCALE}")
    return json.dumps(to_dict(RUNS[wildcards.run_id]))


def run_minutes(wildcards, attempt):
    """Requested wall time; doubled on each retry (SLURM kills a job at its limit)."""
    cfg = RUNS[wildcards.run_id]
    per_round = {"resnet50": 4.0, "resnet50_gn": 4.0, "alexnet_bn": 1.0}.get(cfg.model.name, 0.5)
    return int(10 + per_round * cfg.federation.rounds * cfg.local.epochs / 10 * 2 ** (attempt - 1))


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
        mem_mb=lambda w: 32000 if RUNS[w.run_id].model.name.startswith("resnet50") else 8000,
        runtime=run_minutes,
    shell:
        "OMP_NUM_THREADS={threads} {PYTHON:q} -m shared.run --json {params.config:q} --out results/runs/{wildcards.run_id}"
        " --record-failure --gpu auto > {log} 2>&1"
