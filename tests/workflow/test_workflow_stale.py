"""A deleted run of a built table (the README's way to train a run again) is trained again and
the table rebuilt, by a real Snakemake invocation (issue 33): Snakemake alone answers "Nothing
to be done", taking a missing input for a removed temporary file and a recorded checksum for
an unchanged input; the name asked for lists the runs (common.smk `runs_to_finish`). A switch
to --sdm conda retrains nothing (the profile's rerun triggers leave out `software-env`)."""

import json
import os
import shutil
from pathlib import Path

from tests.workflow.test_workflow import job_counts, make_project, paper_runs, snakemake

# the smallest table that has two runs: FedAvg at two seeds (seed 0's run is table2's too)
TWO_RUNS = """    Table("wfcheck", "table5", "Two runs", BASE, [Row("FedAvg", {"name": "fedavg"})], ONE, {}, \
seeds=(0, 1)),
]
"""
ARGS = ["--cores", "2", "--config", "scale=smoke", "device=cpu", "--", "papers/wfcheck/table5"]


def stub_conda(folder: Path) -> Path:
    """A `conda` that answers what Snakemake asks of it before a dry run (its version, its info),
    so that --sdm conda is taken without conda: nothing is installed."""
    folder.mkdir(parents=True)
    info = {"conda_prefix": str(folder), "platform": "linux-64", "envs_dirs": [str(folder / "envs")]}
    answers = {
        "--version": "conda 25.1.1",
        "info --json": json.dumps({**info, "pkgs_dirs": [str(folder / "pkgs")]}),
        "config --get channel_priority --json": '{"get": {"channel_priority": "strict"}}',
    }
    cases = "".join(f"  {key!r}) echo {value!r};;\n" for key, value in answers.items())
    (folder / "conda").write_text(f'#!/bin/sh\ncase "$*" in\n{cases}  *) echo "{{}}";;\nesac\n')
    (folder / "conda").chmod(0o755)
    return folder


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
    # software is no part of a run's result: built without conda, the runs stand under --sdm conda
    env = {**os.environ, "PATH": f"{stub_conda(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"}
    assert job_counts(snakemake(project, "-n", "--sdm", "conda", *ARGS, env=env).stdout) == {}
    shutil.rmtree(runs[1])  # the same run gone again, after a rebuild: a new loss
    assert job_counts(snakemake(project, "-n", *ARGS).stdout) == {"run": 1, **table}


def test_a_built_figure_is_drawn_again_for_a_deleted_partition_or_an_edited_declaration(tmp_path):
    """FedGKD's Fig. 3 draws three partitions (rule partition, no run trained): one deleted after
    the build is computed again and the figure drawn again, as docs/workflow.md says; an edit to
    the paper's declarations or to the drawing code draws the figure again and computes nothing
    else (the rule's params), an edit to the trainer draws nothing."""
    project = make_project(tmp_path / "project")
    args = ["--cores", "2", "--config", "scale=smoke", "device=cpu", "--", "papers/fedgkd/fig3"]
    built = snakemake(project, *args)
    assert built.returncode == 0, built.stderr[-3000:]
    partitions = sorted((project / "results" / "partitions").glob("*.csv"))
    assert len(partitions) == 3 and job_counts(snakemake(project, "-n", *args).stdout) == {}
    for edited, drawn in (("shared/training/trainer.py", {}), ("papers/fedgkd/figures.py", {"figure": 1})):
        source = project / edited
        original = source.read_text()
        source.write_text(original + "\n# an edit\n")
        dry = snakemake(project, "-n", *args)
        assert job_counts(dry.stdout) == ({**drawn, "papers/fedgkd/fig3": 1} if drawn else {}), dry.stdout[-3000:]
        source.write_text(original)
    partitions[0].unlink()
    dry = snakemake(project, "-n", *args)
    assert job_counts(dry.stdout) == {"partition": 1, "figure": 1, "papers/fedgkd/fig3": 1}, dry.stdout[-3000:]
