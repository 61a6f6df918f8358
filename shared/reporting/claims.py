"""A paper's claims as checks over its tables, and their verdicts on our runs.

A paper module lists `CLAIMS`: what its abstract and conclusion say about its own tables, each
as one of the types below. Every claim reduces, per group (a column, or a whole trend), to
comparisons "this quantity is better than that one", each quantity a cell or a signed sum of
cells (a gap between two rows). A group's verdict on our runs:

- held: every comparison holds on the means over seeds, strictly (a tie is no lead); `margin`
  is the smallest lead. The seeds are those every cell of the group has (`shared_seeds`): a
  seed fixes the partition, the initial weights and the sampling for every method, so the
  comparison is paired; a seed some cell lacks (its run failed or diverged) is left out and
  named (`left_out`);
- held within noise: some comparison fails, each failing one by no more than the pooled
  standard deviation of its two sides over seeds (NOISE_TEST);
- not held: some comparison fails by more; `shortfall` is the largest miss;
- not yet measured: a cell it needs has no completed run, or its cells share no seed (`missing`
  names them).

Per seed, a group holds where every comparison holds on that seed's values alone
(`seeds_held`: "k/n"). The same checks on the paper's own numbers must hold (tests): a claim
is never written wrongly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from shared.data.catalog import copy_label
from shared.reporting.partial_claims import judged_part
from shared.targets.papers import paper_tables_module
from shared.targets.table_declarations import cell_overrides, paper_tables

HELD, WITHIN_NOISE, NOT_HELD, NOT_MEASURED = "held", "held within noise", "not held", "not yet measured"
VERDICTS = (HELD, WITHIN_NOISE, NOT_HELD, NOT_MEASURED)
NOISE_TEST = (
    "held within noise: each failing comparison misses by at most one pooled standard deviation "
    "of its two sides over seeds, sqrt((s_a^2 + s_b^2) / 2) with sample standard deviations "
    "(ddof=1); a side measured on one seed has no spread, so its misses are never within noise"
)

Cell = tuple[str, str]  # (row label, column label)
Values = dict[Cell, dict[int, float]]  # a cell's value per seed; a missing cell has no entry
Term = tuple[tuple[int, str, str], ...]  # (sign, row, column): a signed sum of cells


@dataclass(frozen=True)
class Comparison:
    """`better` beats `worse` (by at least `min_margin`) in the direction of the metric."""

    label: str
    better: Term
    worse: Term
    higher_is_better: bool
    min_margin: float = 0.0

    def cells(self) -> list[Cell]:
        return [(row, column) for _, row, column in (*self.better, *self.worse)]


def term_per_seed(term: Term, values: Values) -> dict[int, float]:
    """The term's value on each seed that all its cells share."""
    seeds = set.intersection(*(set(values[(r, c)]) for _, r, c in term))
    return {s: sum(sign * values[(r, c)][s] for sign, r, c in term) for s in sorted(seeds)}


def term_mean_var(term: Term, values: Values) -> tuple[float, float]:
    """Mean over seeds (a sum of cells' means) and its seeds' variance (the cells' variances
    added; NaN where a cell has one seed)."""
    means = [sign * float(np.mean(list(values[(r, c)].values()))) for sign, r, c in term]
    with np.errstate(invalid="ignore"):  # a target never reached (inf) has no spread: NaN
        variances = [
            float(np.var(list(values[(r, c)].values()), ddof=1)) if len(values[(r, c)]) > 1 else math.nan
            for _, r, c in term
        ]
    return sum(means), sum(variances)


def lead(better: float, worse: float, higher_is_better: bool) -> float:
    """How far `better` is ahead (negative: behind). Never reaching a target counts as infinitely
    many rounds: two that never reach are level, which does not make the claimant ahead."""
    diff = better - worse if higher_is_better else worse - better
    return -math.inf if math.isnan(diff) else diff


@dataclass(frozen=True)
class Claim:
    """Base of the claim types: `statement` says it in words, `source` where the paper says it."""

    table: str
    statement: str
    source: str

    def groups(self, table, values: Values) -> dict[str, list[Comparison]]:
        raise NotImplementedError

    def needed(self, table) -> list[Cell]:
        """Every cell the claim can look at (to say which are missing)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Best(Claim):
    """`rows` (one, or a family of which the best counts) has the best mean in each of `columns`
    (None: all) against each of `against` (None: every other row the paper reports). `each`:
    every row of `rows` must beat `against`, not only the best of them."""

    rows: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    against: tuple[str, ...] | None = None
    each: bool = False
    min_margin: float = 0.0

    def column_labels(self, table) -> list[str]:
        return list(self.columns) if self.columns else [c.label for c in table.columns]

    def rivals(self, table) -> list[str]:
        return list(self.against) if self.against is not None else [r for r in table.reported if r not in self.rows]

    def needed(self, table) -> list[Cell]:
        return [(r, c) for c in self.column_labels(table) for r in (*self.rows, *self.rivals(table))]

    def groups(self, table, values):
        columns = {c.label: c for c in table.columns}
        out = {}
        for label in self.column_labels(table):
            higher = table.metric_for(columns[label]).higher_is_better
            claimants = list(self.rows)
            if not self.each and all((r, label) in values for r in claimants):
                # the family's best on the seeds the verdict compares (`shared_seeds`)
                cells = [(r, label) for r in (*claimants, *self.rivals(table)) if (r, label) in values]
                paired = shared_seeds(cells, values)[0]
                paired = paired if paired[cells[0]] else values
                means = {r: term_mean_var(((1, r, label),), paired)[0] for r in claimants}
                claimants = [max(claimants, key=lambda r: means[r] if higher else -means[r])]
            out[label] = [
                Comparison(f"{mine} vs {rival}", ((1, mine, label),), ((1, rival, label),), higher, self.min_margin)
                for mine in claimants
                for rival in self.rivals(table)
            ]
        return out


@dataclass(frozen=True)
class FewestRounds(Best):
    """Best on columns that count rounds to a target: the fewest rounds (never reached is worst).
    The row whose final accuracy is the target (FedSSD's FedAvg) is no rival: its count is its
    rounds by definition, which any row reaching that accuracy earlier beats."""

    def rivals(self, table) -> list[str]:
        references = {table.metric_for(c).reference for c in table.columns if c.label in self.column_labels(table)}
        return [r for r in super().rivals(table) if r not in references]

    def groups(self, table, values):
        columns = {c.label: c for c in table.columns}
        counts = [label for label in self.column_labels(table) if not table.metric_for(columns[label]).counts_rounds]
        if counts:
            raise ValueError(f"{table.paper}/{table.name}: FewestRounds on columns that do not count rounds: {counts}")
        return super().groups(table, values)


@dataclass(frozen=True)
class BeatsAblations(Best):
    """A component ablation: the full model (`rows`) beats every ablated variant (`against`)."""


@dataclass(frozen=True)
class Trend(Claim):
    """`row`'s value (minus row `minus`'s, for a gap) rises (or falls, `increasing=False`)
    from each of `columns` to the next: a monotone trend over a setting."""

    row: str = ""
    columns: tuple[str, ...] = ()
    increasing: bool = True
    minus: str | None = None

    def term(self, column: str) -> Term:
        return ((1, self.row, column),) + (((-1, self.minus, column),) if self.minus else ())

    def needed(self, table):
        return [(r, c) for c in self.columns for r in (self.row, *([self.minus] if self.minus else []))]

    def groups(self, table, values):
        pairs = zip(self.columns, self.columns[1:])
        return {
            " → ".join(self.columns): [
                Comparison(f"{b} vs {a}", self.term(b), self.term(a), self.increasing) for a, b in pairs
            ]
        }


# --- verdicts -----------------------------------------------------------------------------


def group_verdict(comparisons: list[Comparison], values: Values) -> dict:
    """The verdict of one group of comparisons (see the module docstring)."""
    cells = list(dict.fromkeys(cell for c in comparisons for cell in c.cells()))
    missing = [cell for cell in cells if cell not in values]
    if missing:
        return dict(verdict=NOT_MEASURED, missing="; ".join(f"{r} @ {c}" for r, c in missing))
    values, left_out = shared_seeds(cells, values)
    if not values[cells[0]]:
        return dict(verdict=NOT_MEASURED, missing=f"a seed every cell has ({left_out})", left_out=left_out)
    leads, noises = [], []
    for c in comparisons:
        (better, var_b), (worse, var_w) = term_mean_var(c.better, values), term_mean_var(c.worse, values)
        leads.append(lead(better, worse, c.higher_is_better) - c.min_margin)
        noises.append(math.sqrt((var_b + var_w) / 2) if not math.isnan(var_b + var_w) else math.nan)
    decisive = int(np.argmin(leads))  # the closest rival where it holds, the furthest ahead where not
    seeds = sorted(set.intersection(*(set(values[cell]) for cell in cells)))
    sides = [(term_per_seed(c.better, values), term_per_seed(c.worse, values), c) for c in comparisons]
    held_seeds = sum(
        all(lead(better[s], worse[s], c.higher_is_better) > c.min_margin for better, worse, c in sides) for s in seeds
    )
    failing = [(0.0 - x, n) for x, n in zip(leads, noises) if x <= 0]  # a tie is no lead (0.0 - 0.0 is +0.0)
    if not failing:
        verdict = HELD
    elif all(miss <= noise for miss, noise in failing):  # NaN noise (one seed) is never within
        verdict = WITHIN_NOISE
    else:
        verdict = NOT_HELD
    return dict(
        verdict=verdict,
        margin=leads[decisive] + comparisons[decisive].min_margin if not failing else math.nan,
        shortfall=max(miss for miss, _ in failing) if failing else math.nan,
        noise=noises[decisive],
        decisive=comparisons[decisive].label,
        seeds_held=f"{held_seeds}/{len(seeds)}",
        missing="",
        left_out=left_out,
    )


def shared_seeds(cells: list[Cell], values: Values) -> tuple[Values, str]:
    """The cells' values on the seeds every one of them has, and the others named ("" if none)."""
    seeds = set.intersection(*(set(values[cell]) for cell in cells))
    extra = {cell: sorted(set(values[cell]) - seeds) for cell in cells}
    named = "; ".join(f"{r} @ {c}: seed {', '.join(map(str, s))}" for (r, c), s in extra.items() if s)
    return {cell: {s: v for s, v in values[cell].items() if s in seeds} for cell in cells}, named


def evaluate(table, claims: list[Claim], values: Values) -> pd.DataFrame:
    """One row per claim and group: the verdict, its margin or shortfall, the noise, the seeds."""
    records = []
    for number, claim in enumerate(claims, 1):
        for group, comparisons in claim.groups(table, values).items():
            records.append(
                dict(
                    claim=number,
                    statement=claim.statement,
                    source=claim.source,
                    table=claim.table,
                    group=group,
                    **group_verdict(comparisons, values),
                )
            )
    columns = [
        "claim",
        "statement",
        "source",
        "table",
        "group",
        "verdict",
        "margin",
        "shortfall",
        "noise",
        "decisive",
        "seeds_held",
        "missing",
        "left_out",
    ]
    return pd.DataFrame.from_records(records, columns=columns)


def run_values(table, runs: pd.DataFrame) -> Values:
    """Our completed runs' values per cell and seed (shared.reporting.summary.collect's rows). A
    target never reached is +inf rounds (worse than any count); a rounds count to another row's
    accuracy whose reference run at that seed did not complete is not measured."""
    values: Values = {}
    done = runs[runs.status == "completed"] if len(runs) else runs
    for (row, column), sel in done.groupby(["row", "column"]) if len(done) else []:
        per_seed = {int(s): math.inf if never else float(v) for s, v, never in zip(sel.seed, sel.value, sel.never)}
        per_seed = {s: v for s, v in per_seed.items() if not math.isnan(v)}
        if per_seed:
            values[(row, column)] = per_seed
    return values


def paper_values(table, implied: bool = True) -> Values:
    """The paper's printed numbers as one seed each; a number it never reached ("_") is +inf.
    `implied`: a cell the paper contradicts itself on reads as its other evidence implies
    (the table's `inconsistencies`), so that a claim is checked against what the paper means."""
    readings = {(i.row, i.column): i.implied for i in table.inconsistencies if implied and i.implied is not None}
    values: Values = {}
    for row, reported in table.reported.items():
        for column, number in zip(table.columns, reported):
            value = readings.get((row, column.label), number.mean if number else None)
            if value is None and table.metric_for(column).counts_rounds and number is None:
                value = math.inf
            if value is not None:
                values[(row, column.label)] = {0: float(value)}
    return values


def paper_claims(paper: str) -> list[Claim]:
    """papers/<paper>/tables.py's CLAIMS."""
    return list(getattr(paper_tables_module(paper), "CLAIMS", []))


def table_claims(table) -> list[Claim]:
    """The paper's claims about `table`; a claim naming a row or column the paper's declared
    table lacks is refused (a typo). On a partial table of shipped runs (shared/campaign/ship.py)
    a claim is judged on the cells there, or left out while none of its comparisons is measured
    (shared/reporting/partial_claims.py). A table built on a
    copy of a dataset, named after the copy, keeps the claims of the table it was declared as."""
    claims = [c for c in paper_claims(table.paper) if c.table == table.declared_name]
    declared = paper_tables(table.paper).get(table.declared_name, table)

    def cells(t):
        return {(r.label, c.label) for r in t.rows for c in t.columns}

    for claim in claims:
        unknown = [cell for cell in claim.needed(declared) if cell not in cells(declared)]
        if unknown:
            raise ValueError(
                f"{table.paper}/{table.name}: the claim {claim.statement!r} names cells the table lacks: {unknown}"
            )
    return [part for claim in claims if (part := judged_part(claim, declared, table)) is not None]


def reread(claim: Claim, table, row: str, reading) -> Claim | None:
    """The claim made of `reading` (a Row that reads `row`'s method otherwise) in `row`'s place,
    against the same rivals (never `row` itself), its statement marked so; None where the claim
    does not make it of `row`."""
    if isinstance(claim, Best) and row in claim.rows:
        changes = {
            "rows": tuple(reading.label if r == row else r for r in claim.rows),
            "against": tuple(claim.rivals(table)),
        }
    elif isinstance(claim, Trend) and claim.row == row:
        changes = {"row": reading.label}
    else:
        return None
    return replace(
        claim,
        statement=f"{claim.statement} [read as {reading.label}: {reading.reading}; not the paper's text]",
        **changes,
    )


def verdicts(table, runs: pd.DataFrame) -> pd.DataFrame:
    """Every claim on `table` evaluated on our runs, beside its verdict on the paper's numbers;
    after each, the same claim made of each reading of its row (Row.reading_of), numbered
    "<n> (<reading>)", beside the printed claim's verdict on the paper's numbers (a reading has
    no number of its own in the paper)."""
    claims = table_claims(table)
    values = run_values(table, runs)
    ours = evaluate(table, claims, values)
    paper = evaluate(table, claims, paper_values(table))
    ours.insert(ours.columns.get_loc("verdict"), "paper_verdict", paper["verdict"].values)
    frames = []
    for number, claim in enumerate(claims, 1):
        frames.append(ours[ours.claim == number].assign(reading=""))
        for reading in (r for r in table.rows if r.reading_of):
            twin = reread(claim, table, reading.reading_of, reading)
            if twin is not None:
                mine = evaluate(table, [twin], values).assign(
                    claim=f"{number} ({reading.label})", reading=reading.label
                )
                mine.insert(
                    mine.columns.get_loc("verdict"), "paper_verdict", paper[paper.claim == number]["verdict"].values
                )
                frames.append(mine)
    return pd.concat(frames, ignore_index=True) if frames else ours.assign(reading="")


def data_label(table, cells) -> str:
    """The datasets the runs train on, and the paper's dataset each stands in for where a
    reduced scale replaced it ("synthetic (stand-in for cifar10)"); a labelled table's `data`."""
    if table.data:
        return table.data
    pairs = {
        (
            c.config.dataset.name,
            cell_overrides(table, c.row, c.column, c.seed).get("dataset", {}).get("name", c.config.dataset.name),
            c.config.dataset.copy,
        )
        for c in cells
    }
    names = [
        copy_label(ours, copy) if copy else ours if ours == paper else f"{ours} (stand-in for {paper})"
        for ours, paper, copy in sorted(pairs, key=str)
    ]
    return ", ".join(names) or "none"
