"""Finished runs -> a paper's table: table.csv, table.tex, comparison.csv/.md, provenance.yaml
and, where the paper shows them, learning curves (curves.pdf/.png)."""
from __future__ import annotations

import math
import platform
import subprocess
from collections import defaultdict
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from shared.experiments import Cell, Metric, Search, Table, expand, load_metrics, scale_seeds
from shared.figures import draw
from shared.trainer import rounds_to_target

FAILED = "failed"


def first_round_reaching(metrics: dict, target: float) -> float:
    """`rounds_to_target` on a run's curve; NaN (shown as '-') if never reached."""
    reached = rounds_to_target(metrics["eval_rounds"], metrics["global_acc"], target)
    return math.nan if reached is None else float(reached)


def cell_value(metric: Metric, metrics: dict, reference_final: float | None) -> float:
    if metric.kind == "final_acc":
        return metrics["final_acc"]
    if metric.kind == "best_acc":
        return metrics["best_acc"]
    if metric.kind == "rounds_to":
        return first_round_reaching(metrics, metric.target)
    if metric.kind == "rounds_to_row":
        return math.nan if reference_final is None else first_round_reaching(metrics, reference_final)
    if metric.kind == "acc_at":
        return dict(zip(metrics["eval_rounds"], metrics["global_acc"])).get(metric.round, math.nan)
    if metric.kind == "domain_acc":
        return metrics["domain_acc"][metric.domain]
    if metric.kind == "domain_avg":
        return float(np.mean(list(metrics["domain_acc"].values())))
    raise ValueError(f"unknown metric {metric.kind!r}")


def collect(table: Table, cells: list[Cell], runs_dir: Path) -> pd.DataFrame:
    """One row per run: row, column, seed, run id, status and the value of its column's metric."""
    metrics = {c.run_id: load_metrics(runs_dir, c.run_id) for c in cells}
    ok = lambda c: metrics[c.run_id]["status"] == "completed"
    finals = defaultdict(list)  # FedSSD's T: the reference row's final accuracy per setting
    for c in cells:
        metric = table.metric_for(c.column)
        if metric.kind == "rounds_to_row" and c.row.label == metric.reference and ok(c):
            finals[c.column.label].append(metrics[c.run_id]["final_acc"])
    reference_final = {k: float(np.mean(v)) for k, v in finals.items()}
    records = []
    for c in cells:
        m = metrics[c.run_id]
        value = cell_value(table.metric_for(c.column), m, reference_final.get(c.column.label)) if ok(c) else math.nan
        records.append(dict(row=c.row.label, column=c.column.label, seed=c.seed, run_id=c.run_id,
                            status=m["status"], value=value, wall_time_s=m.get("wall_time_s", 0.0),
                            device=m.get("device", ""), device_name=m.get("device_name", "")))
    return pd.DataFrame.from_records(records)


def summarize_cells(table: Table, runs: pd.DataFrame) -> pd.DataFrame:
    """Mean, std (ddof=0, as FL papers report it over seeds), seed count and runs per cell, in
    the paper's row and column order; methods not implemented yet appear with no runs."""
    rows = []
    for row in table.rows:
        for column in table.columns:
            sel = runs[(runs.row == row.label) & (runs.column == column.label)] if len(runs) else runs
            good = sel[sel.status == "completed"]["value"].dropna() if len(sel) else pd.Series(dtype=float)
            failed = sel[sel.status != "completed"] if len(sel) else sel
            rows.append(dict(
                row=row.label, column=column.label,
                mean=good.mean() if len(good) else math.nan,
                std=good.std(ddof=0) if len(good) else math.nan,
                n=len(good), failed=len(failed),
                status="not implemented" if not row.implemented else (
                    "ok" if len(failed) == 0 and len(good) else FAILED if len(failed) else "no value"),
                values=";".join(f"{v:.2f}" for v in good),
                runs=";".join(sel.run_id) if len(sel) else "",
            ))
    return pd.DataFrame.from_records(rows)


def rank_marks(table: Table, summary: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Best in bold and second best underlined within each column, as the papers do."""
    marks = {}
    for column in table.columns:
        col = summary[(summary.column == column.label) & summary["mean"].notna()]
        ordered = col.sort_values("mean", ascending=not table.metric_for(column).higher_is_better)
        for mark, (_, r) in zip(("best", "second"), ordered.iterrows()):
            marks[(r.row, column.label)] = mark
    return marks


def fmt(mean: float, std: float, n: int, decimals: int) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{decimals}f}" if n < 2 else f"{mean:.{decimals}f} ± {std:.{decimals}f}"


def escape(text: str) -> str:
    """Plain text (labels, notes) into LaTeX."""
    for char in "&%_#":
        text = text.replace(char, "\\" + char)
    return text


def decimals(metric: Metric) -> int:
    return 2 if metric.higher_is_better else 1


def cell_text(table: Table, summary: pd.DataFrame, marks: dict, row, column) -> str:
    s = summary[(summary.row == row.label) & (summary.column == column.label)].iloc[0]
    if s.status == "not implemented":
        return "n/i"
    if math.isnan(s["mean"]):
        return r"\textit{failed}" if s.failed else "--"
    places = decimals(table.metric_for(column))
    text = f"{s['mean']:.{places}f}"
    if s.n >= 2:
        text += rf" $\pm$ {s['std']:.{places}f}"
    if s.failed:
        text += r"$^\dagger$"
    mark = marks.get((row.label, column.label))
    return {"best": rf"\textbf{{{text}}}", "second": rf"\underline{{{text}}}"}.get(mark, text)


def latex_table(table: Table, summary: pd.DataFrame, scale: str) -> str:
    """booktabs; methods as rows, or as columns where the paper prints them so (FedGKD)."""
    marks = rank_marks(table, summary)
    grid = [[cell_text(table, summary, marks, row, column) for column in table.columns] for row in table.rows]
    row_labels = [escape(r.label) for r in table.rows]
    column_labels = [c.latex or escape(c.label) for c in table.columns]
    corner = "Method"
    if table.methods_as_columns:
        grid = [list(line) for line in zip(*grid)]
        row_labels, column_labels, corner = column_labels, row_labels, "Setting"
    lines = [" & ".join([label, *cells]) + r" \\" for label, cells in zip(row_labels, grid)]
    scale_note = "" if scale == "paper" else rf" \textbf{{[Scale: {scale}; not a paper result.]}}"
    notes = r"n/i: method not implemented yet. $^\dagger$: some seeds failed or diverged."
    if table.notes:
        notes += " " + escape(table.notes)
    return "\n".join([
        r"\begin{table}[t]", r"\centering",
        rf"\caption{{{table.caption}{scale_note}}}",
        rf"\label{{tab:{table.paper}-{table.name}}}",
        rf"\begin{{tabular}}{{l{'c' * len(column_labels)}}}", r"\toprule",
        " & ".join([corner, *column_labels]) + r" \\", r"\midrule", *lines,
        r"\bottomrule", r"\end{tabular}",
        rf"\par\footnotesize {notes}",
        r"\end{table}", ""])


def comparison(table: Table, summary: pd.DataFrame, scale: str) -> pd.DataFrame:
    """The paper's number beside ours for every cell. `within_spread`: the paper's mean lies
    within two standard deviations of ours over seeds (or of the paper's own, if larger);
    left empty below paper scale, where the numbers are not comparable."""
    rows = []
    for row in table.rows:
        reported = table.reported.get(row.label, [None] * len(table.columns))
        for column, paper in zip(table.columns, reported):
            s = summary[(summary.row == row.label) & (summary.column == column.label)].iloc[0]
            paper_mean = paper.mean if paper else math.nan
            paper_std = paper.std if paper and paper.std is not None else math.nan
            diff = s["mean"] - paper_mean
            spread = 2 * np.nanmax([s["std"], paper_std]) if s.n >= 2 and scale == "paper" else math.nan
            rows.append(dict(row=row.label, column=column.label, ours_mean=s["mean"], ours_std=s["std"], n=s.n,
                             paper_mean=paper_mean, paper_std=paper_std, diff=diff,
                             within_spread=bool(abs(diff) <= spread) if not math.isnan(spread) and not math.isnan(diff) else None,
                             failed=s.failed, status=s.status))
    return pd.DataFrame.from_records(rows)


def comparison_markdown(table: Table, comp: pd.DataFrame, scale: str) -> str:
    metrics = sorted({table.metric_for(c).label for c in table.columns})
    lines = [f"# {table.paper} {table.name}: ours vs. the paper", "",
             f"{table.caption}", "", f"Scale: **{scale}**" + ("" if scale == "paper" else
             " (not comparable with the paper's numbers; a check that the pipeline runs)"),
             f"Metric: {', '.join(metrics)}; ours are mean ± std over seeds {list(scale_seeds(table, scale))}.", "",
             "| Method | " + " | ".join(c.label for c in table.columns) + " |",
             "|---|" + "---|" * len(table.columns)]
    for row in table.rows:
        cells = []
        for column in table.columns:
            c = comp[(comp.row == row.label) & (comp.column == column.label)].iloc[0]
            places = decimals(table.metric_for(column))
            ours = "n/i" if c.status == "not implemented" else fmt(c.ours_mean, c.ours_std, c.n, places)
            ours += f" ({c.failed} failed)" if c.failed and c.status != "not implemented" else ""
            paper = fmt(c.paper_mean, c.paper_std if not math.isnan(c.paper_std) else 0.0,
                        2 if not math.isnan(c.paper_std) else 1, places)
            flag = {True: " ✓", False: " ✗"}.get(c.within_spread, "")
            diff = "" if math.isnan(c["diff"]) else f" ({c['diff']:+.{places}f})"
            cells.append(f"{ours} / {paper}{diff}{flag}")
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    lines += ["", "Each cell: ours / paper (difference). ✓: within two standard deviations; "
              "✗: outside; n/i: method not implemented yet; (k failed): k seeds failed or diverged, "
              "the mean is over the others."]
    if table.notes:
        lines += ["", f"Notes: {table.notes}"]
    return "\n".join(lines) + "\n"


def git_commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance_header(scale: str) -> dict:
    """Where and with what an output was made."""
    versions = {}
    for package in ("torch", "torchvision", "numpy", "pandas", "seaborn", "snakemake"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"scale": scale, "git_commit": git_commit(), "python": platform.python_version(),
            "platform": platform.platform(), "packages": versions}


def provenance(table: Table, runs: pd.DataFrame, scale: str) -> dict:
    gpu = runs[runs.device.str.startswith("cuda")] if len(runs) else runs
    header = provenance_header(scale)
    return {
        "table": f"{table.paper}/{table.name}",
        "scale": scale,
        "git_commit": header["git_commit"],
        "seeds": list(scale_seeds(table, scale)),
        "metric": {c.label: table.metric_for(c).label for c in table.columns},
        "runs": int(len(runs)),
        "runs_failed": int((runs.status != "completed").sum()) if len(runs) else 0,
        "methods_not_implemented": [r.label for r in table.rows if not r.implemented],
        "devices": sorted(set(runs.device)) if len(runs) else [],
        "device_names": sorted(set(runs.device_name)) if len(runs) else [],
        "gpu_hours": float(gpu.wall_time_s.sum() / 3600) if len(gpu) else 0.0,
        "compute_hours": float(runs.wall_time_s.sum() / 3600) if len(runs) else 0.0,
        **{k: v for k, v in header.items() if k not in ("scale", "git_commit")},
    }


def build_table(table: Table, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> None:
    runs_dir, out = Path(runs_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = expand(table, scale, runtime)
    runs = collect(table, cells, runs_dir)
    summary = summarize_cells(table, runs)
    summary.insert(0, "scale", scale)
    summary.to_csv(out / "table.csv", index=False)
    (out / "table.tex").write_text(latex_table(table, summary, scale))
    comp = comparison(table, summary, scale)
    comp.insert(0, "scale", scale)
    comp.to_csv(out / "comparison.csv", index=False)
    (out / "comparison.md").write_text(comparison_markdown(table, comp, scale))
    (out / "provenance.yaml").write_text(yaml.safe_dump(provenance(table, runs, scale), sort_keys=False))
    if table.curves and cells:
        draw("curves", cells, runs_dir, out / "curves", f"{table.paper} {table.name} learning curves (scale: {scale})")


def build_search(search: Search, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> None:
    """search.csv (every grid point's mean and std per setting), best.yaml (the best point per
    setting, the values to put in the paper's table) and provenance.yaml."""
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
        if len(col):
            top = col.sort_values("mean", ascending=not grid.metric_for(column).higher_is_better).iloc[0]
            best[column.label] = {"point": dict(points[top.row]),  # a copy: no YAML alias when two settings agree
                                  "mean": float(top["mean"]), "std": float(top["std"])}
    (out / "best.yaml").write_text(yaml.safe_dump(
        {"search": f"{search.paper}/{search.name}", "method": search.row, "grid": search.grid, "best": best},
        sort_keys=False, allow_unicode=True))
    (out / "provenance.yaml").write_text(yaml.safe_dump(provenance(grid, runs, scale), sort_keys=False))
