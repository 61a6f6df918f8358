"""A table's runs -> its cells: what a cell reports from each run's metrics.json (cell_value), one
row per run (collect), each cell's mean and std over seeds with its marks (failed, suspect, at
chance, equal to FedAvg's) and the best and second-best per column among the rows on one data
set. What both the LaTeX table (shared/reporting/latex.py) and the comparison with the paper
(shared/reporting/comparison.py) print."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from shared.config.schema import RunConfig
from shared.data.catalog import num_classes
from shared.runs.files import read_summary
from shared.runs.metrics import CHANCE_MARGIN, rounds_to_target
from shared.targets.table_declarations import Cell, Metric, Table, cell_overrides

COMPLETED = "completed"
FAILED = "failed"
SUSPECT = "suspect"  # a run status starting with this: it finished, but its numbers are not trusted
NOT_IMPLEMENTED = "not implemented"


def first_round_reaching(metrics: dict, target: float) -> float:
    """`rounds_to_target` on a run's curve; NaN (shown as '-') if never reached."""
    reached = rounds_to_target(metrics["eval_rounds"], metrics["global_acc"], target)
    return math.nan if reached is None else float(reached)


def cell_value(metric, metrics: dict, reference_final: float | None) -> float:
    """The value of `metric` (a table's Metric, shared/targets/table_declarations.py) for one run (its
    metrics.json as a dict); `reference_final` is the reference row's final accuracy in the same
    column at the run's seed (FedSSD's T, `rounds_to_row`: the rounds to the accuracy FedAvg ends
    at on the same partition and initial weights; the reference row's own T is its rounds, which
    `collect` gives it)."""
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
        values = list(metrics["domain_acc"].values())
        return math.fsum(values) / len(values)
    raise ValueError(f"unknown metric {metric.kind!r}")


# What a table reading the accuracy at a round says below the paper's scale (`read_at_scale`)
ROUNDS_READ = (
    "At this scale a run trains R of the paper's P rounds: its accuracy at round t is read at round {ceil}, "
    "the same share of the run."
)


def rounds_read_note(table: Table, scale: str, ceil: str) -> str:
    """ROUNDS_READ (`ceil` written as the output writes it) where the table reads an accuracy at a
    round below the paper's scale; "" elsewhere."""
    reads = scale != "paper" and any(table.metric_for(c).kind == "acc_at" for c in table.columns)
    return ROUNDS_READ.format(ceil=ceil) if reads else ""


def read_at_scale(metric: Metric, table: Table, cell: Cell) -> Metric:
    """The metric as the cell's run can answer it: the accuracy at round t of the paper's P rounds
    (FedGKD Table 6) is read at the same share of a reduced scale's R rounds, round ceil(t R / P)
    (smoke's 4: rounds 10, 20, 50, 100 -> 1, 1, 2, 4), so that every cell has a value at every scale."""
    if metric.kind != "acc_at":
        return metric
    paper = cell_overrides(table, cell.row, cell.column, cell.seed).get("federation", {})
    paper_rounds, rounds = paper.get("rounds", RunConfig().federation.rounds), cell.config.federation.rounds
    return (
        metric
        if rounds == paper_rounds
        else replace(metric, round=max(1, math.ceil(metric.round * rounds / paper_rounds)))
    )


def is_suspect(status: str) -> bool:
    return str(status).startswith(SUSPECT)


# A cell whose mean accuracy is within CHANCE_MARGIN of chance (100 / classes %) is marked "at
# chance": its models have not learnt (yet), so its place among the methods says nothing of them.
# Every method here is a term added to FedAvg's loop: an accuracy cell whose every seed equals
# FedAvg's (the same accuracy at the same seed) is marked, since that term then left the counted
# accuracy unchanged (a weight too small to act in a reduced scale's few rounds), and its rank
# beside FedAvg says nothing. Rounds-to-target columns are not marked: equal counts are common there.
REFERENCE_ROW = "FedAvg"
EQUALS_NOTE = f" (= {REFERENCE_ROW})"  # the comparison's mark of such a cell
# In a column counting rounds to another row's final accuracy (FedSSD's T), that row's own count
# is its rounds by definition (`collect`): shown as the paper prints it, never compared or ranked
BY_DEFINITION_NOTE = " (by definition)"
ACCURACY_KINDS = ("final_acc", "best_acc", "acc_at", "domain_acc", "domain_avg")


def chance_level(metric: Metric, cell: Cell) -> float:
    """The value guessing scores on the cell's metric; NaN where that has no meaning (rounds)."""
    classes = num_classes(cell.config)
    return 100 / classes if metric.kind in ACCURACY_KINDS and classes else math.nan


def is_reference_count(metric: Metric, row: str) -> bool:
    """`row` is the one whose final accuracy the column counts rounds to (FedSSD's FedAvg)."""
    return metric.kind == "rounds_to_row" and row == metric.reference


def collect(table: Table, cells: list[Cell], runs_dir: Path) -> pd.DataFrame:
    """One row per run: row, column, seed, run id, status, the value of its column's metric and
    `never`: a completed run that never reached its rounds-to-target column's target (its value
    is then NaN); `no_target`: a completed run in a column that counts rounds to another row's
    final accuracy (FedSSD's T) whose run of that row at its seed did not complete, so that it
    has no target (its value is NaN too, and it is left out of the mean like a failed seed);
    `chance` and `rounds`: what guessing scores on the metric, the rounds the run trains."""
    metrics = {c.run_id: read_summary(Path(runs_dir) / c.run_id) for c in cells}

    def ok(c):
        return metrics[c.run_id]["status"] == COMPLETED

    finals = {}  # FedSSD's T: the reference row's final accuracy per setting and seed
    for c in cells:
        metric = table.metric_for(c.column)
        if metric.kind == "rounds_to_row" and c.row.label == metric.reference and ok(c):
            finals[(c.column.label, c.seed)] = metrics[c.run_id]["final_acc"]
    records = []
    for c in cells:
        m, metric = metrics[c.run_id], read_at_scale(table.metric_for(c.column), table, c)
        target_known = metric.kind == "rounds_to" or (c.column.label, c.seed) in finals
        value = cell_value(metric, m, finals.get((c.column.label, c.seed))) if ok(c) else math.nan
        if ok(c) and is_reference_count(metric, c.row.label):
            # "rounds to reach the same accuracy as running FedAvg for 100 rounds": FedAvg's own
            # is its rounds by definition (the paper prints 100 and 30), though its curve may
            # touch its final accuracy earlier
            value = float(c.config.federation.rounds)
        records.append(
            dict(
                row=c.row.label,
                column=c.column.label,
                seed=c.seed,
                run_id=c.run_id,
                status=m["status"],
                value=value,
                never=bool(ok(c) and metric.counts_rounds and target_known and math.isnan(value)),
                no_target=bool(ok(c) and metric.kind == "rounds_to_row" and not target_known),
                chance=chance_level(metric, c),
                rounds=c.config.federation.rounds,
                wall_time_s=m.get("wall_time_s", 0.0),
                device=m.get("device", ""),
                device_name=m.get("device_name", ""),
                environment=m.get("environment"),
            )
        )
    return pd.DataFrame.from_records(records)


def seed_values(runs: pd.DataFrame, row: str, column: str) -> dict[int, float]:
    """A cell's value per seed, over its completed runs."""
    sel = runs[(runs.row == row) & (runs.column == column) & (runs.status == COMPLETED)]
    return dict(zip(sel.seed, sel.value))


def equals_reference(runs: pd.DataFrame, row: str, column: str) -> bool:
    """Every seed of the cell has REFERENCE_ROW's value at that seed, and they share their seeds
    (a NaN never equals, so a value-less cell is never marked)."""
    if row == REFERENCE_ROW or not len(runs):
        return False
    ours = seed_values(runs, row, column)
    return bool(ours) and ours == seed_values(runs, REFERENCE_ROW, column)


def summarize_cells(table: Table, runs: pd.DataFrame) -> pd.DataFrame:
    """Mean, std (ddof=0, numpy's default; the papers do not say which they print), seed count and runs per cell, in
    the paper's row and column order; methods not implemented yet appear with no runs. Only
    completed runs enter the mean; `failed` counts the runs that failed or diverged, `suspect`
    those flagged suspect; `never` the completed runs that never reached a rounds-to-target
    column's target (the mean is over the others), `no_target` those with no target there
    (`collect`). A cell's status: ok, failed, suspect, no
    value or not implemented;
    `at_chance`: its mean accuracy is chance (within CHANCE_MARGIN); `equals_fedavg`: each seed's
    value is REFERENCE_ROW's (`equals_reference`); `by_definition`: the count of the row whose
    final accuracy a rounds column counts to (BY_DEFINITION_NOTE)."""
    rows = []
    for row in table.rows:
        for column in table.columns:
            sel = runs[(runs.row == row.label) & (runs.column == column.label)] if len(runs) else runs
            good = sel[sel.status == COMPLETED]["value"].dropna() if len(sel) else pd.Series(dtype=float)
            suspect = int(sel.status.map(is_suspect).sum()) if len(sel) else 0
            failed = int((sel.status != COMPLETED).sum()) - suspect if len(sel) else 0
            if not row.implemented:
                status = NOT_IMPLEMENTED
            elif failed:
                status = FAILED
            elif suspect:
                status = SUSPECT
            else:
                status = "ok" if len(good) else "no value"
            chance = sel["chance"].iloc[0] if len(sel) else math.nan
            rows.append(
                dict(
                    row=row.label,
                    column=column.label,
                    at_chance=bool(len(good) and good.mean() <= chance + CHANCE_MARGIN),
                    equals_fedavg=table.metric_for(column).kind in ACCURACY_KINDS
                    and equals_reference(runs, row.label, column.label),
                    by_definition=is_reference_count(table.metric_for(column), row.label),
                    mean=good.mean() if len(good) else math.nan,
                    std=good.std(ddof=0) if len(good) else math.nan,
                    n=len(good),
                    never=int(sel["never"].sum()) if len(sel) else 0,
                    no_target=int(sel["no_target"].sum()) if len(sel) else 0,
                    failed=failed,
                    suspect=suspect,
                    status=status,
                    values=";".join(f"{v:.2f}" for v in good),
                    runs=";".join(sel.run_id) if len(sel) else "",
                    reading=row.reading,
                )
            )
    return pd.DataFrame.from_records(rows)


def decimals(metric) -> int:
    return 2 if metric.higher_is_better else 1


def shown(value: float, places: int) -> float:
    """The number as printed: equal printed numbers are ties."""
    return float(f"{value:.{places}f}")


def rank_marks(table: Table, summary: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Best in bold and second best underlined within each column, as the papers do, among the
    rows on the same data (rows that bring a data set of their own, FedGKD Table 7's CIFAR-10 and
    CIFAR-100, are marked each data set apart, as the paper marks them). Ties (equal printed
    means) share their mark; only cells whose runs all completed, and reached the target of a
    rounds column, are ranked (a cell with a failed, diverged or suspect run, a seed that never
    reached the target or had none, or no run never takes a mark), and only the paper's rows (a
    reading that is not the paper's text competes for no mark the paper gives); a count that is
    the reference row's rounds by definition takes none."""
    marks = {}
    base_data = table.base.get("dataset", {}).get("name")
    data = {row.label: row.config.get("dataset", {}).get("name", base_data) for row in table.rows}
    for column in table.columns:
        metric = table.metric_for(column)
        col = summary[
            (summary.column == column.label)
            & summary["mean"].notna()
            & (summary.status == "ok")
            & (summary.never == 0)
            & (summary.no_target == 0)
            & ~summary.by_definition
            & (summary.reading == "")
        ]
        for same_data in dict.fromkeys(data.values()):
            values = {r.row: shown(r["mean"], decimals(metric)) for _, r in col.iterrows() if data[r.row] == same_data}
            distinct = sorted(set(values.values()), reverse=metric.higher_is_better)
            for mark, level in zip(("best", "second"), distinct):
                marks.update({(row, column.label): mark for row, value in values.items() if value == level})
    return marks


def fmt(mean: float, std: float, n: int, decimals: int) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{decimals}f}" if n < 2 else f"{mean:.{decimals}f} ± {std:.{decimals}f}"


# Under a table and its comparison, each row that is a reading of a method (not the paper's text)
READING_MARK = "¶"  # a row that is a reading of a method, not the paper's text


def reading_notes(table: Table) -> list[str]:
    """What each reading row is, for under the table and the comparison (READING_MARK)."""
    return [
        f"{row.label}: a reading of {row.reading_of} that is not the paper's text ({row.reading}); the paper "
        "prints no number for it."
        for row in table.rows
        if row.reading_of
    ]
