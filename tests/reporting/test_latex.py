"""Every paper table's table.tex compiles with pdflatex, in a one-column article and in a
two-column page with IEEE's dimensions, without an error, without an overfull box wider than
10 pt and scaled to no less than 80% (a wide table turns onto a landscape page instead): all 18
tables, built from fabricated run summaries at smoke scale (some runs diverged, some flagged
suspect, methods not implemented shown as n/i)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import shared.reporting.tables as tables_module
from shared.reporting.latex import LATEX_PACKAGES, MIN_SCALE
from shared.reporting.tables import build_table
from shared.targets.table_declarations import all_tables, expand

pytestmark = [pytest.mark.latex, pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not on PATH")]

PREAMBLE = r"\usepackage[T1]{fontenc}" + "\n" + rf"\usepackage{{{','.join(LATEX_PACKAGES)}}}"
CLASSES = {
    # LaTeX's default one-column article (345 pt of text)
    "article": r"\documentclass{article}",
    # IEEEtran's page: letter paper, 10 pt, two columns of 3.5 in on 7.16 in of text
    "ieee-twocolumn": "\n".join(
        [
            r"\documentclass[10pt,twocolumn]{article}",
            r"\usepackage[letterpaper,hmargin=0.67in,top=0.75in,bottom=1in,columnsep=0.17in]{geometry}",
        ]
    ),
}
MAX_OVERFULL_PT = 10.0
TABLE_COUNT = 18
DOMAINS = ("amazon", "caltech", "dslr", "webcam")


def unit(run_id: str, salt: str) -> float:
    """A number in [0, 1) fixed by the run id."""
    return int(hashlib.sha256(f"{run_id}/{salt}".encode()).hexdigest()[:12], 16) / 16**12


def fabricate(run_id: str) -> dict:
    """A run's metrics.json: a saturating curve over 100 rounds (so that every metric,
    rounds to a target and accuracy at round 100 included, has a value); one run in 15 diverged,
    one in 20 flagged suspect."""
    final = 20 + 75 * unit(run_id, "final")
    speed = 3 + 30 * unit(run_id, "speed")
    rounds = [*range(1, 10), *range(10, 101, 10)]  # every round to 10, then every tenth (as eval.every would)
    accs = [round(final * (1 - math.exp(-r / speed)), 2) for r in rounds]
    draw = unit(run_id, "status")
    status = (
        "diverged: loss is nan"
        if draw < 1 / 15
        else "suspect: accuracy at chance"
        if draw < 1 / 15 + 1 / 20
        else "completed"
    )
    return {
        "status": status,
        "run_id": run_id,
        "eval_rounds": rounds,
        "global_acc": accs,
        "local_acc": accs,
        "final_acc": accs[-1],
        "best_acc": max(accs),
        "wall_time_s": 60.0,
        "device": "cpu",
        "device_name": "cpu",
        "domain_acc": {d: round(100 * unit(run_id, d), 2) for d in DOMAINS},
    }


def overfull_boxes(log: str) -> list[float]:
    return [float(width) for width in re.findall(r"Overfull \\[hv]box \((\d+(?:\.\d+)?)pt too wide\)", log)]


def scale_factors(log: str) -> list[float]:
    """How far each tabular was scaled down to its line (table.tex says so on the terminal)."""
    unwrapped = log.replace("\n", "")  # TeX breaks its log lines at 79 characters
    return [
        float(line) / float(natural)
        for natural, line in re.findall(
            r"table\.tex: a tabular of (\d+(?:\.\d+)?)pt scaled to the line, (\d+(?:\.\d+)?)pt", unwrapped
        )
    ]


def compile_tex(table_tex: Path, document_class: str, workdir: Path) -> tuple[list[str], float, str]:
    """pdflatex on a document holding the table: (errors, widest overfull box in pt, log)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "doc.tex").write_text(
        "\n".join(
            [
                CLASSES[document_class],
                PREAMBLE,
                r"\begin{document}",
                r"Text before the table.",
                rf"\input{{{table_tex.resolve().as_posix()}}}",
                r"Text after the table.",
                r"\end{document}",
                "",
            ]
        )
    )
    result = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=workdir,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
        check=False,
    )
    log_path = workdir / "doc.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else result.stdout
    errors = [line for line in log.splitlines() if line.startswith("!")]
    errors += [line for line in log.splitlines() if "Float too large" in line]
    if result.returncode != 0 and not errors:
        errors.append(f"pdflatex exited with {result.returncode}")
    if not (workdir / "doc.pdf").exists():
        errors.append("no PDF written")
    return errors, max(overfull_boxes(log), default=0.0), log


@pytest.fixture(scope="module")
def built_tables(tmp_path_factory):
    """Every table built at smoke scale from fabricated runs: (table, its output folder)."""
    root = tmp_path_factory.mktemp("latex")
    runs_dir = root / "runs"
    tables = all_tables()
    written = set()
    for table in tables:
        for cell in expand(table, "smoke"):
            if cell.run_id not in written:
                (runs_dir / cell.run_id).mkdir(parents=True, exist_ok=True)
                (runs_dir / cell.run_id / "metrics.json").write_text(json.dumps(fabricate(cell.run_id)))
                written.add(cell.run_id)
    built = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tables_module, "draw", lambda *args, **kwargs: None)  # learning curves: not under test here
        for table in tables:
            out = root / "tables" / table.paper / table.name
            build_table(table, "smoke", runs_dir, out)
            built.append((table, out))
    return built


def test_all_tables_are_built(built_tables):
    assert len(built_tables) == TABLE_COUNT
    for table, out in built_tables:
        for name in ("table.tex", "table.csv", "comparison.csv", "comparison.md", "comparison.html", "comparison.png"):
            assert (out / name).stat().st_size > 0, f"{table.paper}/{table.name}: no {name}"


@pytest.mark.parametrize("document_class", list(CLASSES))
def test_every_table_compiles_and_fits(built_tables, document_class, tmp_path):
    problems = []
    for table, out in built_tables:
        errors, widest, log = compile_tex(out / "table.tex", document_class, tmp_path / f"{table.paper}-{table.name}")
        smallest = min(scale_factors(log), default=1.0)
        if errors or widest > MAX_OVERFULL_PT or smallest < MIN_SCALE:
            problems.append(
                f"{table.paper}/{table.name}: errors {errors}, widest overfull box {widest:.1f} pt, "
                f"scaled to {smallest:.0%}"
            )
    assert not problems, "\n".join(problems)


def test_text_fields_are_escaped(built_tables):
    """Captions with raw % and Greek letters (FedCSD's δ̂, FedGKD's α) come out as LaTeX."""
    for table, out in built_tables:
        tex = (out / "table.tex").read_text()
        assert tex.isascii(), f"{table.paper}/{table.name}: non-ASCII left in table.tex"
        caption = next(line for line in tex.splitlines() if line.startswith(r"\caption"))
        assert not re.search(r"(?<!\\)%", caption), f"{table.paper}/{table.name}: unescaped % in the caption"
    fedcsd3 = next(out for table, out in built_tables if (table.paper, table.name) == ("fedcsd", "table3"))
    assert r"$\hat{\delta}$" in (fedcsd3 / "table.tex").read_text()
