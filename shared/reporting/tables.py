"""Finished runs -> a paper's table: table.csv, table.tex (shared/reporting/latex.py),
comparison.csv/.md/.html/.png (shared/reporting/comparison.py), claims.csv/.md/.html
(shared/reporting/claims.py), provenance.yaml and, where the paper shows them, learning curves
(curves.pdf/.png); also a search's search.csv and best.yaml, and a paper's claims on all its runs.

Reporting only: what a cell reports comes from shared/reporting/summary.py and the provenance
header from shared/runs/provenance.py; nothing here imports the training loop."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import yaml

from shared.reporting.claims import data_label, verdicts
from shared.reporting.claims_pages import write_claims
from shared.reporting.comparison import comparison, comparison_figure, comparison_html, comparison_markdown
from shared.reporting.figure_settings import announce, same_runs
from shared.reporting.figures import draw
from shared.reporting.latex import latex_table
from shared.reporting.summary import COMPLETED, collect, is_suspect, summarize_cells
from shared.runs.provenance import commits_of, provenance_header
from shared.targets.table_declarations import Search, Table, expand, paper_tables, scale_seeds


def provenance(table: Table, runs: pd.DataFrame, scale: str, merged: list[list[str]] | None = None) -> dict:
    gpu = runs[runs.device.str.startswith("cuda")] if len(runs) else runs
    header = provenance_header(scale)
    return {
        "table": f"{table.paper}/{table.name}",
        "scale": scale,
        "git_commit": header["git_commit"],
        "seeds": list(scale_seeds(table, scale)),
        # a partial table's columns finished on fewer seeds (shared/targets/copies.py)
        **({"column_seeds": own} if (own := column_seeds(table, scale)) else {}),
        "metric": {c.label: table.metric_for(c).label for c in table.columns},
        "runs": int(len(runs)),
        "runs_failed": int((runs.status != COMPLETED).sum()) if len(runs) else 0,
        "runs_suspect": int(runs.status.map(is_suspect).sum()) if len(runs) else 0,
        "methods_not_implemented": [r.label for r in table.rows if not r.implemented],
        "same_runs": merged or [],  # columns that are one experiment at this scale (it caps what they vary)
        "devices": sorted(set(runs.device)) if len(runs) else [],
        "device_names": sorted(set(runs.device_name)) if len(runs) else [],
        "gpu_hours": float(gpu.wall_time_s.sum() / 3600) if len(gpu) else 0.0,
        "compute_hours": float(runs.wall_time_s.sum() / 3600) if len(runs) else 0.0,
        # the code each run ran: a table whose runs come from several commits says so
        **commits_of(list(runs.environment) if len(runs) else []),
        **{k: v for k, v in header.items() if k not in ("scale", "git_commit")},
    }


def column_seeds(table: Table, scale: str) -> dict[str, list[int]]:
    """The seeds of each column that holds fewer than the table's."""
    seeds = scale_seeds(table, scale)
    return {c.label: list(own) for c in table.columns if (own := scale_seeds(table, scale, c)) != seeds}


def build_table(
    table: Table, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None
) -> None:
    runs_dir, out = Path(runs_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = expand(table, scale, runtime)
    runs = collect(table, cells, runs_dir)
    summary = summarize_cells(table, runs)
    merged = same_runs(cells)
    warning = announce(merged, out / "table", scale)
    (out / "table.tex").write_text(latex_table(table, summary, scale))
    comp = comparison(table, summary, scale)
    (out / "comparison.md").write_text(comparison_markdown(table, comp, scale, warning))
    (out / "comparison.html").write_text(comparison_html(table, comp, scale, warning))
    comparison_figure(table, comp, scale, out / "comparison.png")
    summary.insert(0, "scale", scale)
    summary.to_csv(out / "table.csv", index=False)
    comp.insert(0, "scale", scale)
    comp.to_csv(out / "comparison.csv", index=False)
    (out / "provenance.yaml").write_text(yaml.safe_dump(provenance(table, runs, scale, merged), sort_keys=False))
    write_claims(
        verdicts(table, every_finished_seed(table, scale, runs_dir, runtime, runs)),
        f"{table.paper} {table.name}: the paper's claims on our runs",
        scale,
        data_label(table, cells),
        out,
    )
    if table.curves and cells:
        draw("curves", cells, runs_dir, out / "curves", f"{table.paper} {table.name} learning curves (scale: {scale})")


def every_finished_seed(
    table: Table, scale: str, runs_dir: Path, runtime: dict | None, runs: pd.DataFrame
) -> pd.DataFrame:
    """The finished runs of the table's cells at every seed its paper's table has at `scale` (a
    table that keeps every seed: its `runs`, collected already). A partial table keeps the seeds
    all of a column's rows have (shared/targets/copies.py), while the cells a claim compares may
    have more: each claim is judged on the seeds its own cells share, as the claims page says
    (FedSSD's Table I: FedSSD against FedAvg at Dir(0.5) on three seeds, where FedProx, finished
    on one, cuts the table to seed 0)."""
    declared = paper_tables(table.paper).get(table.declared_name, table)
    if table.seeds == declared.seeds and all(c.seeds is None for c in table.columns):
        return runs
    whole = dataclasses.replace(
        table, seeds=declared.seeds, columns=[dataclasses.replace(c, seeds=None) for c in table.columns]
    )
    finished = [c for c in expand(whole, scale, runtime) if (runs_dir / c.run_id / "metrics.json").exists()]
    return collect(whole, finished, runs_dir)


def build_search(
    search: Search, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None
) -> None:
    """search.csv (every grid point's mean and std per setting), best.yaml (the best point per
    setting among those whose every seed completed, the values to put in the paper's table; the
    best of the others where none did, with its status) and provenance.yaml."""
    runs_dir, out = Path(runs_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    grid = search.as_table()
    runs = collect(grid, expand(grid, scale, runtime), runs_dir)
    summary = summarize_cells(grid, runs)
    points = {row.label: point for row, point in zip(grid.rows, search.points())}
    summary.insert(0, "scale", scale)
    summary.to_csv(out / "search.csv", index=False)
    best = {}
    for column in grid.columns:
        col = summary[(summary.column == column.label) & summary["mean"].notna()]
        whole = col[(col.status == "ok") & (col.never == 0)]  # a point's lucky seeds never beat whole points
        col = whole if len(whole) else col
        if len(col):
            top = col.sort_values("mean", ascending=not grid.metric_for(column).higher_is_better).iloc[0]
            best[column.label] = {
                "point": dict(points[top.row]),  # a copy: no YAML alias when two settings agree
                "mean": float(top["mean"]),
                "std": float(top["std"]),
                "seeds": int(top["n"]),
                "status": top["status"],
            }
    (out / "best.yaml").write_text(
        yaml.safe_dump(
            {"search": f"{search.paper}/{search.name}", "method": search.row, "grid": search.grid, "best": best},
            sort_keys=False,
            allow_unicode=True,
        )
    )
    (out / "provenance.yaml").write_text(yaml.safe_dump(provenance(grid, runs, scale), sort_keys=False))


def build_paper_claims(
    paper: str, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None
) -> None:
    """claims.md / .csv / .html: every claim of `paper` on the runs finished so far (a claim
    whose cells have no finished run yet is not yet measured)."""
    runs_dir, out = Path(runs_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frames, datasets = [], []
    for table in paper_tables(paper).values():
        expanded = expand(table, scale, runtime)
        finished = [c for c in expanded if (runs_dir / c.run_id / "metrics.json").exists()]
        frames.append(
            verdicts(
                table,
                collect(table, finished, runs_dir)
                if finished
                else pd.DataFrame(columns=["row", "column", "seed", "status", "value"]),
            )
        )
        datasets += data_label(table, expanded).split(", ")
    write_claims(
        pd.concat(frames, ignore_index=True),
        f"{paper}: the paper's claims on our runs",
        scale,
        ", ".join(sorted(set(datasets))),
        out,
    )
