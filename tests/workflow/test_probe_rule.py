"""A figure's probe (FedCSD's Fig. 1: hours of a GPU on one finished run) as the workflow
schedules it: computed again when its run's result is new, not when a job of the run puts a
finished run's metrics.json back from its kept copy as it was (a group job, `--config
runs_per_job=n`, does so beside the runs it trains; so does a job forced again, `-R`), and
Snakemake touches it. Where there is such a copy, a job of the run puts it back rather than
train the run (tests/commands/test_run_cli.py)."""

from __future__ import annotations

import os
import shutil

from shared.runs.files import KEPT
from shared.targets.figure_declarations import paper_figures
from shared.targets.probes import probe_code
from tests.workflow.test_readme_commands import write_finished_runs
from tests.workflow.test_workflow import job_counts, make_project, snakemake

FIG1 = "papers/fedcsd/fig1"


def probed_run(tmp_path):
    """A project holding Fig. 1's run, finished with its kept copy as a run job leaves it, and
    its probe computed after it; the run's folder and the probe."""
    project = make_project(tmp_path / "project")
    figure = paper_figures("fedcsd")["fig1"]
    (cell,) = figure.cells("paper")
    write_finished_runs(project, [cell.run_id])
    run_dir = project / "results" / "runs" / cell.run_id
    shutil.copy2(run_dir / "metrics.json", run_dir / KEPT)
    probe = project / "results" / "probes" / f"fedcsd-fig1-{cell.run_id}-{probe_code(figure)}.csv"
    probe.parent.mkdir(parents=True)
    probe.write_text("computed after its run\n")
    before = probe.stat().st_mtime - 60
    for kept in (run_dir / "metrics.json", run_dir / KEPT):
        os.utime(kept, (before, before))
    return project, run_dir


def test_a_probe_is_not_computed_again_when_its_run_is_put_back_as_it_was(tmp_path):
    """metrics.json put back from the kept copy and touched: the figure is drawn again, its
    probe is not; a result other than the kept copy's (trained again), or none kept, computes
    the probe again."""
    project, run_dir = probed_run(tmp_path)
    later = (run_dir / KEPT).stat().st_mtime + 120
    os.utime(run_dir / "metrics.json", (later, later))
    for kept, expected in (("as it was", {}), ("of another result", {"probe": 1}), (None, {"probe": 1})):
        if kept == "of another result":  # the same size, other bytes
            text = (run_dir / "metrics.json").read_text()
            (run_dir / KEPT).write_text(text.replace('"completed"', '"completeD"'))
        elif kept is None:
            (run_dir / KEPT).unlink()
        proc = snakemake(project, "-n", "--", FIG1)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert job_counts(proc.stdout) == {**expected, "figure": 1, FIG1: 1}, (kept, proc.stdout)
