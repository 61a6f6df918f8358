"""Several runs in one process (shared.run with several --json) and the workflow's runs_per_job."""

import json
import re

from shared.config.schema import to_dict
from shared.run import main
from shared.targets.run_groups import group_key
from shared.targets.table_declarations import expand, get_table
from tests.workflow.test_workflow import project, snakemake  # noqa: F401  (project is a fixture)


def test_several_runs_in_one_process_give_what_each_gives_alone(tiny_cfg, tmp_path):
    small = ["federation.rounds=1", "dataset.synthetic.image_size=16"]
    configs = [tiny_cfg(*small, "seed=1"), tiny_cfg(*small, "seed=2", "method=fedprox")]
    args = []
    for i, cfg in enumerate(configs):
        args += ["--json", json.dumps(to_dict(cfg)), "--out", str(tmp_path / f"together{i}")]
    assert main(args) == 0
    assert main(["--json", json.dumps(to_dict(configs[1])), "--out", str(tmp_path / "alone")]) == 0
    together = json.loads((tmp_path / "together1" / "metrics.json").read_text())
    alone = json.loads((tmp_path / "alone" / "metrics.json").read_text())
    assert together["status"] == "completed" and together["run_id"] == alone["run_id"]
    assert together["global_acc"] == alone["global_acc"] and together["local_acc"] == alone["local_acc"]
    assert json.loads((tmp_path / "together0" / "metrics.json").read_text())["status"] == "completed"


def test_runs_per_job_makes_one_job_of_each_group(project):  # noqa: F811
    """The workflow groups every run of the scale (shared/targets/run_groups.py), so a table's run may
    share its job with another table's run of the same row; a job is one group."""
    proc = snakemake(project, "-n", "-p", "--config", "scale=smoke", "runs_per_job=4", "--", "papers/fedssd/table2")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    runs = {c.run_id: c.config for c in expand(get_table("fedssd", "table2"), "smoke")}
    commands = [line for line in proc.stdout.splitlines() if "-m shared.workflow_job" in line]
    jobs = [re.findall(r"([0-9a-f]{16})/metrics\.json", line) for line in commands]
    assert all(1 <= len(job) <= 4 for job in jobs)
    assert sorted(rid for job in jobs for rid in job if rid in runs) == sorted(runs)
    for job in jobs:
        assert len({group_key(runs[rid]) for rid in job if rid in runs}) == 1
    settings = [
        {json.dumps(to_dict(runs[rid].partition), sort_keys=True) for rid in job if rid in runs} for job in jobs
    ]
    assert max(map(len, settings)) > 1  # a row's settings share a job, not only one cell's seeds
