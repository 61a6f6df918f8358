"""One experiment, several papers: every resolved config (any seed) that tables of more than
one paper need, with each paper's printed number and ours, as shared.md/.csv/.html
(`python -m shared.plan --shared`, and the workflow's report). Imports pandas only where a
listing is made."""

from __future__ import annotations

import html
import math
import statistics
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from shared.config.schema import run_id
from shared.reporting.summary import cell_value
from shared.runs.files import read_summary
from shared.targets.table_declarations import Cell, Reported, all_tables, expand

if TYPE_CHECKING:  # imported where a listing is made: a module that imports this one never pays for pandas
    import pandas as pd


def experiment_id(cell: Cell) -> str:
    """The run id of a cell's config at seed 0: the same experiment whatever the seed."""
    return run_id(replace(cell.config, seed=0))


def ours(cells: list[Cell], metric, runs_dir: Path) -> str:
    """Our mean ± std over the finished seeds, for the metrics a run gives alone (a count of rounds
    to another row's accuracy needs that row: '-'), with the seeds left out of it and why (a target
    never reached, a run that diverged, ended suspect or failed, no value at the round asked)."""
    values, left_out = [], Counter()
    for cell in cells:
        if metric.kind != "rounds_to_row" and (runs_dir / cell.run_id / "metrics.json").exists():
            metrics = read_summary(runs_dir / cell.run_id)
            status = str(metrics.get("status")).split(":")[0]
            if status != "completed":
                left_out[status] += 1
            elif math.isnan(value := cell_value(metric, metrics, None)):
                left_out["never reached" if metric.counts_rounds else "no value"] += 1
            else:
                values.append(value)
    why = "".join(f"; {n} {reason}" for reason, n in sorted(left_out.items()))
    if not values:
        return f"- ({why[2:]})" if why else "-"
    seeds = f"{len(values)} seed{'s' if len(values) != 1 else ''}"
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f} ({seeds}{why})"


def paper_number(reported: Reported | None, note: str) -> str:
    """The paper's printed number (± its std where printed), marked § where the paper contradicts
    it; '-' where the paper prints none."""
    if reported is None or reported.mean is None:
        return "-"
    return f"{reported.mean:g}" + ("" if reported.std is None else f" ± {reported.std:g}") + (" §" if note else "")


# The listing's columns, one row per table cell that uses a shared experiment
COLUMNS = [
    "experiment",
    "method",
    "dataset",
    "paper",
    "table",
    "row",
    "column",
    "metric",
    "paper_number",
    "paper_note",
    "ours",
    "runs",
    "scale",
]


def shared_runs(
    scale: str = "paper", runs_dir: str | Path = "results/runs", runtime: dict | None = None
) -> pd.DataFrame:
    """Every experiment (one resolved config, any seed) that tables of more than one paper need:
    one row per table cell using it, with the paper's number and ours."""
    import pandas as pd

    from shared.reporting.claims import data_label

    uses: dict[str, list] = {}
    for table in all_tables():
        for cell in expand(table, scale, runtime):
            uses.setdefault(experiment_id(cell), []).append((table, cell))
    records = []
    for experiment, used in uses.items():
        if len({table.paper for table, _ in used}) < 2:
            continue
        by_cell: dict[tuple, list[Cell]] = {}
        for table, cell in used:
            by_cell.setdefault((table.paper, table.name, cell.row.label, cell.column.label), []).append(cell)
        for (paper, name, row, column), cells in by_cell.items():
            table = next(t for t, _ in used if (t.paper, t.name) == (paper, name))
            col = next(c for c in table.columns if c.label == column)
            reported = table.reported.get(row, [None] * len(table.columns))[table.columns.index(col)]
            metric = table.metric_for(col)
            note = next((i.note for i in table.inconsistencies if (i.row, i.column) == (row, column)), "")
            records.append(
                dict(
                    experiment=experiment,
                    method=cells[0].config.method["name"],
                    dataset=data_label(table, cells),
                    paper=paper,
                    table=name,
                    row=row,
                    column=column,
                    metric=metric.label,
                    paper_number=paper_number(reported, note),
                    paper_note=note,
                    ours=ours(cells, metric, Path(runs_dir)),
                    runs=";".join(c.run_id for c in cells),
                    scale=scale,
                )
            )
    return pd.DataFrame.from_records(records, columns=COLUMNS)


def shared_markdown(df: pd.DataFrame, scale: str) -> str:
    lines = [
        f"# One experiment, several papers (scale: {scale})",
        "",
        "Each experiment is one resolved config (its runs are shared: trained once); every table cell "
        "that uses it, with the paper's printed number and ours (mean ± std over our finished seeds).",
        "",
    ]
    for experiment, rows in df.groupby("experiment", sort=False):
        first = rows.iloc[0]
        lines += [
            f"## {first.method} on {first.dataset} (experiment {experiment})",
            "",
            "| paper | table | row | column | metric | paper's number | ours |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.paper} | {r.table} | {r.row} | {r.column} | {r.metric} | {r.paper_number} | {r.ours} |"
            for r in rows.itertuples()
        ]
        lines += [
            f"- § {r.paper} {r.table}, {r.row} at {r.column}: {r.paper_note}" for r in rows.itertuples() if r.paper_note
        ]
        lines.append("")
    return "\n".join(lines)


def write_shared_runs(scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> None:
    """shared.md, shared.csv and shared.html (for the report)."""
    write_shared_files(shared_runs(scale, runs_dir, runtime), scale, Path(out_dir))


def write_shared_files(df: pd.DataFrame, scale: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = shared_markdown(df, scale)
    (out / "shared.md").write_text(text)
    df.to_csv(out / "shared.csv", index=False)
    table = df.drop(columns=["runs"]).to_html(index=False, border=0, escape=True)
    (out / "shared.html").write_text(
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>'
        f"One experiment, several papers</title></head><body><h2>One experiment, several "
        f"papers (scale: {html.escape(scale)})</h2>{table}</body></html>\n"
    )
