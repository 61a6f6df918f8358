"""One run job per GPU: `snakemake --cores N --resources gpu=G` runs min(G, N) run jobs at once
at paper scale, each with its share of the cores as CPU threads (workflow/rules/runs.smk
`run_threads`), with no tracked file edited. The GPUs are a count given on the command line, so
a CPU machine plays a machine of G GPUs: `device=auto` asks each job for one and trains on the CPU.
A test paper's runs meet in their first round and record how many of them were in it at once."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.workflow.test_workflow import add_paper, make_project, snakemake

ROOT = Path(__file__).resolve().parents[2]
SEEDS = 6  # more runs than the GPUs of any case below, so the GPU count is what caps them

MEETING_INIT = '''"""A method whose runs meet: the workflow's GPU scheduling, seen from inside the runs."""
METHODS = {"meeting": ".methods:Meeting"}
'''
MEETING_METHODS = '''import json
import os
import time
from pathlib import Path

from shared.methods.fedavg import FedAvg


class Meeting(FedAvg):
    """In its first round, waits until $WFGPU_EXPECT runs are in their first round at once (at
    most 60 s, and not at all once some have met: the runs after them), stays 2 s more so that a
    run beyond those would be seen, and records the most it saw and its OMP_NUM_THREADS."""

    met = False

    def prepare_round(self, round, global_model):
        if not self.met:
            self.met = True
            folder = Path(os.environ["WFGPU_DIR"])
            mine = folder / f"in-{self.cfg.seed}"
            mine.touch()
            seen, deadline = 1, time.time() + 60
            expected = int(os.environ["WFGPU_EXPECT"])
            while time.time() < deadline and seen < expected and not any(folder.glob("saw-*")):
                seen = max(seen, len(list(folder.glob("in-*"))))
                time.sleep(0.1)
            for _ in range(20):
                seen = max(seen, len(list(folder.glob("in-*"))))
                time.sleep(0.1)
            mine.unlink()
            record = {"seen": seen, "threads": os.environ.get("OMP_NUM_THREADS")}
            (folder / f"saw-{self.cfg.seed}.json").write_text(json.dumps(record))
        super().prepare_round(round, global_model)
'''
MEETING_TABLES = f"""from shared.targets.table_declarations import Column, Row, Table

BASE = {{"dataset": {{"name": "synthetic", "synthetic": {{"train_per_class": 20, "test_per_class": 10}}}},
        "model": {{"name": "fedavg_cnn"}}, "partition": {{"kind": "dirichlet", "beta": 0.5, "clients": 2}},
        "federation": {{"rounds": 1}}, "local": {{"epochs": 1, "batch_size": 32}}}}
TABLES = [Table("wfgpu", "table1", "Runs that meet", BASE, [Row("Meeting", {{"name": "meeting"}})],
                [Column("Dir(0.5)", {{}})], {{}}, seeds=tuple(range({SEEDS})))]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("gpus"))
    add_paper(project, "wfgpu", MEETING_INIT, MEETING_METHODS, MEETING_TABLES)
    return project


@pytest.mark.parametrize(("cores", "gpus"), [(8, 4), (2, 3)])
def test_run_jobs_at_once_are_the_gpus_given_at_most_the_cores(project, tmp_path, cores, gpus):
    expected = min(gpus, cores)
    env = {**os.environ, "WFGPU_DIR": str(tmp_path), "WFGPU_EXPECT": str(expected)}
    shutil.rmtree(project / "results" / "runs", ignore_errors=True)  # each case trains every run
    args = ["--cores", str(cores), "--resources", f"gpu={gpus}", "--config", "device=auto"]
    proc = snakemake(project, *args, "--", "papers/wfgpu/table1", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in tmp_path.glob("saw-*.json")]
    assert len(records) == SEEDS
    assert max(r["seen"] for r in records) == expected, records
    assert {r["threads"] for r in records} == {str(max(1, min(4, cores // gpus)))}


def test_run_threads_set_on_the_command_line(project):
    dry = snakemake(project, "-n", "-p", "--cores", "8", "--config", "run_threads=3", "--", "papers/fedcad/table2")
    assert dry.returncode == 0, dry.stderr[-3000:]
    threads = set(re.findall(r"OMP_NUM_THREADS=(\d+) ", dry.stdout))
    assert threads == {"3"}, dry.stdout[-3000:]


def test_readme_gpu_recipe_gives_the_gpus_on_the_command_line():
    """The README's recipe edits no tracked file (a run records its commit as -dirty after one)."""
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^## Regenerate a table on your GPU machine\n(.*?)(?=^## )", text, re.M | re.S).group(1)
    commands = [line.split("#")[0] for line in section.splitlines() if line.startswith("    ")]
    assert not any(re.search(r"\bsed\b|>", command) for command in commands), commands
    assert any("snakemake" in c and "--resources gpu=$(nvidia-smi -L | wc -l)" in c for c in commands), commands
