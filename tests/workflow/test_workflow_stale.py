"""A deleted run of a built table (the README's way to train a run again) is trained again and
the table rebuilt, by a real Snakemake invocation (issue 33): Snakemake alone answers "Nothing
to be done", taking a missing input for a removed temporary file and a recorded checksum for
an unchanged input; the name asked for lists the runs (common.smk `runs_to_finish`)."""

import shutil

from tests.workflow.test_workflow import job_counts, make_project, paper_runs, snakemake

# the smallest table that has two runs: FedAvg at two seeds (seed 0's run is table2's too)
TWO_RUNS = """    Table("wfcheck", "table5", "Two runs", BASE, [Row("FedAvg", {"name": "fedavg"})], ONE, {}, \
seeds=(0, 1)),
]
"""
ARGS = ["--cores", "2", "--config", "scale=smoke", "device=cpu", "--", "papers/wfcheck/table5"]


def test_a_deleted_run_of_a_built_table_is_trained_again_and_the_table_rebuilt(tmp_path):
    project = make_project(tmp_path / "project", check_paper=True)
    tables = project / "papers" / "wfcheck" / "tables.py"
    tables.write_text(tables.read_text().rstrip().removesuffix("]") + TWO_RUNS)
    built = snakemake(project, *ARGS)
    assert built.returncode == 0, built.stderr[-3000:]
    runs = [project / "results" / "runs" / rid for rid in paper_runs("wfcheck", "table5", project)]
    assert len(runs) == 2 and job_counts(snakemake(project, "-n", *ARGS).stdout) == {}

    table = {"table": 1, "papers/wfcheck/table5": 1}
    shutil.rmtree(runs[0])
    for extra in ([], ["--rerun-triggers", "mtime"]):
        dry = snakemake(project, "-n", *extra, *ARGS)
        assert job_counts(dry.stdout) == {"run": 1, **table}, dry.stdout[-3000:]
    shutil.rmtree(runs[1])  # every run it cites
    dry = snakemake(project, "-n", *ARGS)
    assert job_counts(dry.stdout) == {"run": 2, **table}, dry.stdout[-3000:]

    rebuilt = snakemake(project, *ARGS)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert all((run / "metrics.json").is_file() for run in runs)
    for extra in ([], ["--rerun-triggers", "mtime"]):  # the marker a build has seen triggers nothing
        assert job_counts(snakemake(project, "-n", *extra, *ARGS).stdout) == {}
    shutil.rmtree(runs[1])  # the same run gone again, after a rebuild: a new loss
    assert job_counts(snakemake(project, "-n", *ARGS).stdout) == {"run": 1, **table}
