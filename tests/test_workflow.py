"""The Snakemake workflow, run in a copy of the project so the checkout stays clean."""
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from shared.experiments import PAPERS, SCALES, all_tables, expand, get_table, paper_searches
from shared.figures import paper_figures

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("Snakefile", "shared", "papers", "workflow", "config", "profiles")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    copy = tmp_path_factory.mktemp("project")
    for part in PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, copy / part, ignore=skip_generated)
        else:
            shutil.copy(src, copy / part)
    return copy


def skip_generated(directory, names):
    """Leave out generated table and figure directories and byte code."""
    return [n for n in names if n == "__pycache__" or (Path(directory, n).is_dir() and n.startswith(("table", "fig")))]


def snakemake(project, *args):
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=project, capture_output=True, text=True)


FIGURES = [f for paper in PAPERS for f in paper_figures(paper).values()]
SEARCHES = [s for paper in PAPERS for s in paper_searches(paper).values()]
TARGETS = [f"papers/{t.paper}/{t.name}" for t in [*all_tables(), *FIGURES, *SEARCHES]]


@pytest.mark.parametrize("scale", sorted(SCALES))
def test_every_table_figure_and_search_dry_runs(project, scale):
    proc = snakemake(project, "-n", "--config", f"scale={scale}", "--", *TARGETS)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    expected_runs = {c.run_id for t in all_tables() for c in expand(t, scale)}
    expected_runs |= {c.run_id for f in FIGURES for c in f.cells(scale)}
    expected_runs |= {c.run_id for s in SEARCHES for c in expand(s.as_table(), scale)}
    assert f"run{' ' * 12}{len(expected_runs)}" in proc.stdout or f"run {len(expected_runs)}" in " ".join(proc.stdout.split())


def test_unknown_table_lists_valid_names(project):
    proc = snakemake(project, "-n", "--", "papers/fedssd/table9")
    assert proc.returncode != 0
    assert "fedssd has no table 'table9'; valid: ['table1', 'table2', 'table3']" in proc.stdout + proc.stderr


def test_unknown_scale_is_rejected_by_the_schema(project):
    proc = snakemake(project, "-n", "--config", "scale=huge", "--", "papers/fedssd/table2")
    assert proc.returncode != 0
    assert "huge" in proc.stdout + proc.stderr and "paper" in proc.stdout + proc.stderr


def test_smoke_table_end_to_end_then_only_missing_runs_rerun(project):
    target, figure = "papers/fedcad/table2", "papers/fedcad/fig4"  # Fig. 4: curves from Table 2's runs
    proc = snakemake(project, "--cores", "2", "--config", "scale=smoke", "device=cpu", "--", target, figure)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = project / target
    table = pd.read_csv(out / "table.csv")
    fedavg = table[table.row == "FedAvg"]
    assert len(fedavg) == 4 and (fedavg.n == 2).all() and (fedavg.status == "ok").all()  # smoke: 2 seeds
    definition = get_table("fedcad", "table2")
    for row in definition.rows:
        assert (table[table.row == row.label].status == ("ok" if row.implemented else "not implemented")).all()
    assert set(table.scale) == {"smoke"}
    tex = (out / "table.tex").read_text()
    assert r"\toprule" in tex and "Scale: smoke; not a paper result" in tex and r"\textbf{" in tex
    comparison = pd.read_csv(out / "comparison.csv")
    assert comparison.loc[comparison.row == "FedAvg", "paper_mean"].tolist() == [61.73, 71.29, 71.56, 72.98]
    provenance = yaml.safe_load((out / "provenance.yaml").read_text())
    assert provenance["scale"] == "smoke" and provenance["runs"] == 4 * 2 * sum(r.implemented for r in definition.rows) and provenance["packages"]["torch"]
    assert (project / figure / "figure.png").stat().st_size > 0 and (project / figure / "figure.pdf").stat().st_size > 0

    # Interrupted work: one run lost, another half done. Only those are recomputed.
    runs = sorted((project / "results" / "runs").iterdir())
    shutil.rmtree(runs[0])
    (runs[1] / "metrics.json").unlink()
    shutil.rmtree(out)
    dry = snakemake(project, "-n", "--config", "scale=smoke", "device=cpu", "--", target)
    assert "run 2" in " ".join(dry.stdout.split()), dry.stdout
    proc = snakemake(project, "--cores", "2", "--config", "scale=smoke", "device=cpu", "--", target)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert pd.read_csv(out / "table.csv").equals(table)

    report = snakemake(project, "--config", "scale=smoke", "device=cpu", "--report", "report.html", "--", target)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (project / "report.html").stat().st_size > 10_000
