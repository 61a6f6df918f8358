"""A paper's claims as checks over its tables, and their verdicts on our runs.

A paper module lists `CLAIMS`: what its abstract and conclusion say about its own tables, each
as one of the types below. Every claim reduces, per group (a column, or a whole trend), to
comparisons "this quantity is better than that one", each quantity a cell or a signed sum of
cells (a gap between two rows), whose verdict on our runs shared/reporting/claim_verdicts.py
gives: held, within noise, not held or not yet measured. The same checks on the paper's own
numbers must hold (tests): a claim is never written wrongly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from shared.data.catalog import copy_label
from shared.reporting.claim_verdicts import (
    Cell,
    Comparison,
    Notes,
    Term,
    Values,
    group_verdict,
    run_notes,
    run_values,
    shared_seeds,
    term_mean,
)
from shared.reporting.partial_claims import judged_part
from shared.reporting.summary import decimals
from shared.targets.papers import paper_tables_module
from shared.targets.table_declarations import cell_overrides, paper_tables


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
            metric = table.metric_for(columns[label])
            claimants, family = list(self.rows), ()
            if not self.each and all((r, label) in values for r in claimants):
                # the family's best on the seeds the verdict compares: those every member and rival has
                family = tuple((r, label) for r in (*claimants, *self.rivals(table)) if (r, label) in values)
                paired = shared_seeds(list(family), values)
                means = {r: term_mean(((1, r, label),), paired) if paired[family[0]] else 0.0 for r in claimants}
                claimants = [max(claimants, key=lambda r: means[r] if metric.higher_is_better else -means[r])]
            out[label] = [
                Comparison(
                    f"{mine} vs {rival}",
                    ((1, mine, label),),
                    ((1, rival, label),),
                    metric.higher_is_better,
                    self.min_margin,
                    decimals(metric),
                    family,
                )
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
        places = {c.label: decimals(table.metric_for(c)) for c in table.columns}
        return {
            " → ".join(self.columns): [
                Comparison(f"{b} vs {a}", self.term(b), self.term(a), self.increasing, places=places[b])
                for a, b in pairs
            ]
        }


# --- verdicts -----------------------------------------------------------------------------


def evaluate(table, claims: list[Claim], values: Values, notes: Notes | None = None) -> pd.DataFrame:
    """One row per claim and group: the verdict, its margin or shortfall, the noise, the seeds."""
    records = []
    for number, claim in enumerate(claims, 1):
        for group, comparisons in claim.groups(table, values).items():
            if not comparisons:  # no rival left in the group (a family against none): nothing to judge
                continue
            records.append(
                dict(
                    claim=number,
                    statement=claim.statement,
                    source=claim.source,
                    table=claim.table,
                    group=group,
                    **group_verdict(comparisons, values, notes),
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
        "claimed_margin",
        "decisive",
        "seeds_held",
        "missing",
        "left_out",
        "worst",
    ]
    return pd.DataFrame.from_records(records, columns=columns)


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
    values, notes = run_values(table, runs), run_notes(runs)
    ours = evaluate(table, claims, values, notes)
    paper = evaluate(table, claims, paper_values(table))
    ours.insert(ours.columns.get_loc("verdict"), "paper_verdict", paper["verdict"].values)
    frames = []
    for number, claim in enumerate(claims, 1):
        frames.append(ours[ours.claim == number].assign(reading=""))
        for reading in (r for r in table.rows if r.reading_of):
            twin = reread(claim, table, reading.reading_of, reading)
            if twin is not None:
                mine = evaluate(table, [twin], values, notes).assign(
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
