"""python -m shared.workflow_job as the workflow's jobs call it: runs named by id and scale, exit codes
that let Snakemake retry transient failures, a failure recorded on the last attempt only, a
diverged run as a result, and finished runs of a group job put back after a sibling failed."""

import json
import os
import subprocess
import sys

import pytest

from shared.runs.files import KEPT, finished_at
from tests.workflow.test_workflow import make_project, paper_runs


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = make_project(tmp_path_factory.mktemp("runcli"), check_paper=True)
    ids = dict(zip(("FedAvg", "Flaky", "Broken", "Diverging"), paper_runs("wfcheck", "table1", root)))
    return root, ids


def run(root, *args):
    env = {**os.environ, "WFCHECK_DIR": str(root / "markers")}
    return subprocess.run(
        [sys.executable, "-m", "shared.workflow_job", "--scale", "smoke", *args, "trainer.device=cpu"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )


def test_a_raising_run_fails_its_job_until_the_last_attempt(project):
    root, ids = project
    out = root / "results" / "runs" / ids["Broken"]
    proc = run(root, "--runs", f"results/runs/{ids['Broken']}/metrics.json", "--attempt", "1", "--attempts", "2")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "RuntimeError: a bug" in proc.stderr and not (out / "metrics.json").exists()

    proc = run(root, "--runs", f"results/runs/{ids['Broken']}", "--attempt", "2", "--attempts", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "metrics.json").read_text())["status"].startswith("failed: RuntimeError: a bug")
    failure = json.loads((out / "failure.json").read_text())
    assert failure["attempt"] == 2 and "a bug" in failure["error"]


def test_only_runtime_overrides_are_taken(project):
    root, ids = project
    proc = run(root, "--runs", f"results/runs/{ids['FedAvg']}", "local.lr=0.5")
    assert proc.returncode == 2 and "only runtime overrides" in proc.stderr
    proc = run(root, "--runs", "results/runs/0123456789abcdef")
    assert proc.returncode == 2 and "belong to no table" in proc.stderr


def test_diverged_is_a_result_and_a_group_job_restores_finished_runs(project):
    root, ids = project
    group = [f"results/runs/{ids['FedAvg']}", f"results/runs/{ids['Diverging']}"]
    proc = run(root, "--runs", *group, "--attempt", "1", "--attempts", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = {
        rid: json.loads((root / "results" / "runs" / rid / "metrics.json").read_text())
        for rid in (ids["FedAvg"], ids["Diverging"])
    }
    assert metrics[ids["FedAvg"]]["status"] == "completed" and metrics[ids["Diverging"]]["status"].startswith(
        "diverged"
    )

    # Snakemake deleted the group's outputs because a sibling failed: the retry puts them back.
    for rid in (ids["FedAvg"], ids["Diverging"]):
        (root / "results" / "runs" / rid / "metrics.json").unlink()
    proc = run(root, "--runs", *group, "--attempt", "2", "--attempts", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count('"restored"') == 2, proc.stdout
    for rid, before in metrics.items():
        run_dir = root / "results" / "runs" / rid
        assert json.loads((run_dir / "metrics.json").read_text()) == before
        # put back byte for byte: the run counts as finished when it first finished, so that a
        # figure's probe of it stays current (shared.targets.probes `is_current`)
        assert (run_dir / "metrics.json").read_bytes() == (run_dir / KEPT).read_bytes()
        assert finished_at(run_dir) == (run_dir / KEPT).stat().st_mtime


def test_a_single_run_job_killed_after_its_run_finished_restores_it(project):
    """SLURM enforces a time limit every 30 s or so: a run may finish, then its job be killed
    and its metrics.json deleted by Snakemake. The retry puts the finished run back."""
    root, ids = project
    job = ["--runs", f"results/runs/{ids['FedAvg']}"]
    assert run(root, *job, "--attempt", "1", "--attempts", "3").returncode == 0
    metrics = root / "results" / "runs" / ids["FedAvg"] / "metrics.json"
    before = metrics.read_text()
    metrics.unlink()
    proc = run(root, *job, "--attempt", "2", "--attempts", "3")
    assert proc.returncode == 0 and '"restored"' in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert metrics.read_text() == before


def test_a_truncated_result_is_set_aside_and_put_back_from_its_kept_copy(project):
    """A metrics.json cut short (a full disk, a copy interrupted) is moved aside, not deleted,
    and the job's retry puts the finished run back instead of training it again."""
    root, ids = project
    job = ["--runs", f"results/runs/{ids['FedAvg']}"]
    assert run(root, *job, "--attempt", "1", "--attempts", "3").returncode == 0
    metrics = root / "results" / "runs" / ids["FedAvg"] / "metrics.json"
    before = metrics.read_text()
    metrics.write_text(before[:40])
    proc = run(root, *job, "--attempt", "2", "--attempts", "3")
    assert proc.returncode == 0 and '"restored"' in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "is not what a run writes" in proc.stderr and metrics.read_text() == before
    (aside,) = metrics.parent.glob("metrics.json.corrupt-*")
    assert aside.read_text() == before[:40]
