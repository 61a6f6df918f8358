# Jobs that put a run's state in order before a table reads it, in place of training it (runs.smk):
# a shipped run restored, a failed or unreadable run marked to train again.


rule retry_run:
    """Marks a run to train again (runs.smk `retry_marker`): its metrics.json records a failure or
    cannot be read. The marker is an input of the run's job, so the job runs after it."""
    output:
        f"{RETRY_MARKERS}/{{run_id}}/{{stamp}}.json",
    wildcard_constraints:
        run_id="[0-9a-f]{16}",
        stamp="[0-9]+",
    log:
        "results/logs/retries/{run_id}-{stamp}.log",
    localrule: True
    run:
        mark_retry(wildcards.run_id, output[0], log[0])


if SHIPPED_RUNS:

    rule restore_shipped:
        """A shipped run copied into the runs folder (shared/runs/shipped.py): a finished run,
        never trained here. Its copy's time is no trigger: a result here is not replaced for it."""
        input:
            ancient(f"{SHIPPED}/runs/{{run_id}}/metrics.json"),
        output:
            f"{RUNS_DIR}/{{run_id}}/metrics.json",
        wildcard_constraints:
            run_id=SHIPPED_RUNS,
        log:
            "results/logs/restores/{run_id}.log",
        localrule: True
        run:
            restore_shipped_run(wildcards.run_id, log[0])
