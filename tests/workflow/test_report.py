"""The Snakemake HTML report as a reviewer opens it, rendered in headless Chromium: a front page
saying what the package is, the scale built and how to read the marks; per table the comparison
with the paper inline and the CSV, LaTeX and provenance each under its own label; each figure
captioned with the paper's caption and the scale.

The runs are written by hand (no training): FedCAD's smoke tables (Table 2, the cheapest,
4 methods x 4 settings x 2 seeds, is the one opened; its claims summary reads them all), and
its Fig. 4."""

import base64
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from shared.targets.figure_declarations import get_figure
from shared.targets.table_declarations import expand, get_table, paper_tables
from tests.workflow import require_snakemake

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("Snakefile", "shared", "papers", "workflow", "config", "profiles")
TARGETS = ("papers/fedcad/table2", "papers/fedcad/fig4", "papers/fedcad/claims", "results/smoke/shared_runs")
CHROMIUM = next(
    (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=5000",
    "--window-size=1400,1800",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/install-chromium.sh)"),
]


def ignore(directory, names):
    return [
        n
        for n in names
        if n == "__pycache__" or (Path(directory, n).is_dir() and n.startswith(("table", "fig", "claims")))
    ]


def write_runs(project):
    """metrics.json (and partition.csv) of every run the targets need, as finished runs write them:
    FedCAD's tables (its claims summary reads them all) and Fig. 4, each near the paper's number."""
    table2 = get_table("fedcad", "table2")
    cells = [(table, c) for table in paper_tables("fedcad").values() for c in expand(table, "smoke")]
    cells += [(table2, c) for c in get_figure("fedcad", "fig4").cells("smoke")]
    for i, (table, cell) in enumerate(cells):
        out = project / "results" / "runs" / cell.run_id
        out.mkdir(parents=True, exist_ok=True)
        reported = table.reported[cell.row.label][[c.label for c in table.columns].index(cell.column.label)].mean
        reported = reported if table.metric_for(cell.column).higher_is_better else 60.0  # a count of rounds
        rounds = cell.config.federation.rounds
        accs = [float(reported * (r + 1) / rounds + np.random.default_rng(i).normal(0, 0.5)) for r in range(rounds)]
        (out / "metrics.json").write_text(
            json.dumps(
                {
                    "status": "completed",
                    "run_id": cell.run_id,
                    "rounds_completed": rounds,
                    "eval_rounds": list(range(1, rounds + 1)),
                    "global_acc": accs,
                    "local_acc": [a - 4 for a in accs],
                    "global_loss": [1.0] * rounds,
                    "final_acc": accs[-1],
                    "best_acc": max(accs),
                    "wall_time_s": 5.0,
                    "device": "cpu",
                    "device_name": "test",
                }
            )
        )


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    require_snakemake()
    project = tmp_path_factory.mktemp("report")
    for part in PARTS:
        src = ROOT / part
        (shutil.copytree(src, project / part, ignore=ignore) if src.is_dir() else shutil.copy(src, project / part))
    write_runs(project)
    snakemake = [sys.executable, "-m", "snakemake", "--config", "scale=smoke", "device=cpu"]
    build = subprocess.run([*snakemake, "--cores", "2", "--", *TARGETS], cwd=project, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    assert not re.search(r"^run\s+\d+$", build.stdout + build.stderr, re.M)  # no training: the runs are there
    made = subprocess.run(
        [*snakemake, "--report", "report.html", "--", *TARGETS], cwd=project, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr[-3000:]
    return project / "report.html"


def results_of(report_html: str) -> dict:
    """The report's `results` variable: path -> name, labels, caption, mime type, data URI."""
    match = re.search(r"var results = (\{.*?\});\s*</script>", report_html, re.S)
    return json.loads(match.group(1))


def chromium(page: Path, *args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def opened(report: Path, name: str, script: str) -> Path:
    """The report with `script` run once it has rendered: what clicking through it shows."""
    html = report.read_text()
    hook = (
        "<script>window.addEventListener('load', function () { setTimeout(function () {"
        + script
        + "}, 100); });</script>"
    )
    page = report.with_name(name)
    at = html.rindex("</body>")
    page.write_text(html[:at] + hook + html[at:])
    return page


def show(path_suffix: str, navbar: str, content: str) -> str:
    """JavaScript: the result whose path ends in `path_suffix` open, as its eye button opens it."""
    return (
        f"const path = Object.keys(results).find(p => p.endsWith('{path_suffix}'));"
        f"const [category, subcategory] = path.split('/').slice(-3, -1);"
        f"app.setView({{navbarMode: '{navbar}', category: category, subcategory: subcategory, "
        f"content: '{content}', contentPath: results[path].data_uri, resultPath: path}});"
    )


def test_report_files_labels_and_captions(report):
    results = results_of(report.read_text())
    table = {Path(p).name: r for p, r in results.items() if "/fedcad/table2/" in p}
    # every file of the table under its own label: none hides another
    assert {"comparison.html", "table.csv", "table.tex", "provenance.yaml"} <= set(table)
    assert len({json.dumps(r["labels"], sort_keys=True) for r in table.values()}) == len(table)
    assert table["comparison.html"]["mime_type"] == "text/html"  # shown inline
    # the claims first: the report orders a table's files by their labels, and the paper's entries by name
    assert min(table, key=lambda name: json.dumps(table[name]["labels"], sort_keys=True)) == "claims.html"
    claims = {Path(p).name: r for p, r in results.items() if "/fedcad/claims/" in p}
    assert "FedCAD: the paper's claims on our runs" in claims["claims.html"]["caption"]
    assert "smoke" in claims["claims.html"]["caption"]
    shared = next(r for p, r in results.items() if p.endswith("shared_runs/shared.html"))
    assert "One experiment, several papers" in shared["caption"]
    assert "The top-1 test accuracy with different levels of data heterogeneity" in table["table.csv"]["caption"]
    figure = {Path(p).name: r for p, r in results.items() if "/fedcad/fig4/" in p}
    caption = figure["figure.png"]["caption"]
    assert "FedCAD Fig. 4" in caption and "The learning curves on CIFAR-10" in caption and "smoke" in caption


def test_front_page(report):
    dom = chromium(report, "--dump-dom")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom.split('<div id="app">', 1)[-1]))
    assert "Distilling from the global model: FedCAD, FedSSD, FedCSD, FedGKD, reproduced" in text
    assert "Scale of this build: smoke" in text and "Not a paper result" in text
    assert "How to read the marks" in text
    assert text.index("Claims first") < text.index("What is here")
    for mark in ("bold", "underlined", "†", "suspect", "n/i", "✓", "✗", "Kendall τ"):
        assert mark in text, mark


def test_table_page_shows_the_comparison_inline(report, tmp_path):
    page = opened(report, "table_page.html", show("fedcad/table2/comparison.html", "subcategory", "html"))
    shot = tmp_path / "table_page.png"
    chromium(page, f"--screenshot={shot}")
    dom = chromium(page, "--dump-dom")
    for label in (
        "comparison with the paper (comparison.html)",
        "table as CSV (table.csv)",
        "table as LaTeX (table.tex)",
        "provenance (provenance.yaml)",
    ):
        assert label in dom, label  # listed in the navigation, each under its own name
    src = re.search(r'<iframe[^>]*src="(data:text/html[^"]*)"', dom)
    assert src, "the comparison is not shown inline"
    shown = base64.b64decode(src.group(1).split("base64,", 1)[1]).decode()
    assert "<table" in shown and "61.73" in shown  # FedAvg at δ=0.1, the paper's number
    assert "✓" in shown and "✗" in shown and "color:" in shown  # the verdicts, coloured

    from PIL import Image

    image = Image.open(shot).convert("L")
    assert image.size == (1400, 1800)
    right = image.crop((480, 0, 1400, 400))  # the comparison's part of the page
    assert sum(right.histogram()[:100]) > 500  # dark pixels: text is drawn there, not a blank frame


def test_figure_page_shows_the_papers_caption_and_the_scale(report):
    page = opened(report, "figure_page.html", show("fedcad/fig4/figure.png", "resultinfo", "img"))
    dom = chromium(page, "--dump-dom")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom.split('<div id="app">', 1)[-1]))
    assert "FedCAD Fig. 4" in text and "The learning curves on CIFAR-10 (Dir(0.5))" in text
    assert "Scale: smoke" in text
    assert re.search(r'<img src="data:image/png', dom)
