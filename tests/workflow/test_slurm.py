"""profiles/slurm on a real SLURM (one node on loopback: scripts/slurm-local.sh, which CI's
.ci/install-slurm.sh runs): a smoke table builds, several run jobs are queued at once, and a job
killed at its time limit is retried with twice the time and continues from its checkpoint."""

import os
import re
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

from shared.targets.scales import SMOKE_ROUNDS
from tests.workflow.test_workflow import make_project, paper_runs


def slurm_answers() -> bool:
    try:
        return all(
            subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0
            for cmd in (["sinfo", "-h"], ["sbatch", "--version"], ["squeue", "-h"])
        )
    except (OSError, subprocess.SubprocessError):
        return False


pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(not slurm_answers(), reason="no SLURM answers here (sudo scripts/slurm-local.sh starts one)"),
]


def queue(name: str) -> list[dict]:
    """This workflow's SLURM jobs (squeue keeps finished ones for MinJobAge)."""
    out = subprocess.run(
        ["squeue", "--states=all", "--noheader", "--name", name, "-o", "%i|%T|%l|%k"], capture_output=True, text=True
    ).stdout
    return [dict(zip(("id", "state", "limit", "comment"), line.split("|", 3))) for line in out.splitlines() if line]


def test_smoke_tables_through_the_slurm_profile(tmp_path):
    project = make_project(tmp_path / "project", check_paper=True)
    # the `stalling` run hangs in its second round on its first attempt, whenever SLURM (which
    # enforces time limits every 30 s or so) kills it; its retry resumes after round 1
    env = {**os.environ, "WFCHECK_DIR": str(tmp_path / "markers")}
    targets = ["papers/wfcheck/table2", "papers/wfcheck/table3"]
    fast, stalling = paper_runs("wfcheck", "table2", project), paper_runs("wfcheck", "table3", project)
    started = time.time()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--profile",
            "profiles/slurm",
            "--slurm-status-command",
            "squeue",
            "--slurm-init-seconds-before-status-checks",
            "5",
            "--slurm-keep-successful-logs",
            "--latency-wait",
            "5",
            "--config",
            "scale=smoke",
            "device=cpu",
            "runtime_minutes=1",
            "--",
            *targets,
        ],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()

    uuid, in_flight = None, 0
    while proc.poll() is None and time.time() - started < 540:
        text = "".join(output)
        if uuid is None and (m := re.search(r"SLURM run ID: ([0-9a-f-]{36})", text)):
            uuid = m.group(1)
        if uuid:
            jobs = queue(uuid)
            in_flight = max(in_flight, sum(j["state"] in ("PENDING", "RUNNING", "CONFIGURING") for j in jobs))
        time.sleep(1)
    if proc.poll() is None:
        proc.kill()
    reader.join(10)
    text = "".join(output)
    wall = time.time() - started
    print(f"SLURM smoke tables: {wall:.0f} s, at most {in_flight} run jobs in flight at once")
    assert proc.returncode == 0, text[-5000:]

    # It built, from runs that all completed.
    for target in targets:
        table = pd.read_csv(project / "results" / "smoke" / "wfcheck" / target.split("/")[-1] / "table.csv")
        assert (table.status == "ok").all(), table
    # Several run jobs were queued at once (the workstation profile's gpu=1 is no cap here).
    assert in_flight >= 2, text[-3000:]
    # No GPU was asked for under device=cpu, and the stalling run was killed at its 1-minute limit,
    # then retried with 2 minutes, continuing from its checkpoint.
    jobs = queue(uuid)
    assert len(jobs) == len(fast) + len(stalling) + 1, jobs
    for job in jobs:
        details = subprocess.run(["scontrol", "show", "job", job["id"]], capture_output=True, text=True).stdout
        assert "gpu" not in details.split("TresPerNode")[-1].split("\n")[0] if "TresPerNode" in details else True
        assert "gres/gpu" not in details, details
    (rid,) = stalling
    attempts = sorted((j for j in jobs if rid in j["comment"]), key=lambda j: int(j["id"]))
    assert [(j["state"], j["limit"]) for j in attempts] == [("TIMEOUT", "1:00"), ("COMPLETED", "2:00")], attempts
    log = (project / "results" / "logs" / "runs" / f"{rid}.log").read_text()
    last = SMOKE_ROUNDS
    assert "attempt 2 of 3" in log and f"round {last}/{last}" in log and f"round 1/{last}" not in log, log  # resumed
