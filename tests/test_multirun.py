"""Several runs in one process (shared.run with several --json) and the workflow's runs_per_job."""
import json
import re

import torch

from shared.config import to_dict
from shared.config_loading import load_config
from shared.experiments import expand, get_table
from shared.multirun import side_by_side_reason
from shared.run import main
from tests.test_workflow import project, snakemake  # noqa: F401  (project is a fixture)


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


def test_runs_in_threads_of_one_process_give_what_each_gives_alone(tiny_cfg, tmp_path):
    """What runs side by side on a GPU rely on: the trainer's use of torch's global generator
    (initial weights, per-round reseed) is safe across threads."""
    from concurrent.futures import ThreadPoolExecutor

    from shared.trainer import run

    small = ["federation.rounds=2", "dataset.synthetic.image_size=16", "partition.clients=2"]
    configs = [tiny_cfg(*small, "seed=3"), tiny_cfg(*small, "seed=4", "method=fedssd", "aux.per_class=5")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        together = list(pool.map(lambda i: run(configs[i], tmp_path / f"together{i}"), range(2)))
    for i, cfg in enumerate(configs):
        alone = run(cfg, tmp_path / f"alone{i}")
        assert together[i]["global_acc"] == alone["global_acc"] and together[i]["local_acc"] == alone["local_acc"]
        assert torch.equal(torch.load(tmp_path / f"together{i}" / "model.pt")["classifier.weight"],
                           torch.load(tmp_path / f"alone{i}" / "model.pt")["classifier.weight"])


def test_runs_share_a_gpu_side_by_side_only_when_nothing_else_draws_from_the_global_generator():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    fedssd = load_config(None, ["method=fedssd", "aux.per_class=64"])
    assert side_by_side_reason([fedssd, load_config(None, ["method=fedgkd"])], cuda) is None
    assert "cores" in side_by_side_reason([fedssd], cpu)
    assert "global random generator" in side_by_side_reason([fedssd, load_config(None, ["method=fedgen"])], cuda)
    assert "thread-safe" in side_by_side_reason([load_config(None, ["trainer.compile=true"])], cuda)


def test_runs_per_job_groups_the_seeds_of_a_cell_into_one_job(project):  # noqa: F811
    proc = snakemake(project, "-n", "-p", "--config", "scale=smoke", "runs_per_job=2", "--", "papers/fedssd/table2")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    cells = {json.dumps({**to_dict(c.config), "seed": None}, sort_keys=True)
             for c in expand(get_table("fedssd", "table2"), "smoke")}
    jobs = set(re.findall(r"^(runs_[0-9a-f]{16})\s+1$", proc.stdout, re.M))
    assert len(jobs) == len(cells)  # smoke: 2 seeds per cell, one job each
    commands = [line for line in proc.stdout.splitlines() if "-m shared.run" in line]
    assert commands and all("--runs" in line and line.count("metrics.json") == 2 for line in commands)
