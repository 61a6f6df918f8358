"""A group of comparisons' verdict on our runs (`group_verdict`), each comparison "this quantity
is better than that one", a quantity a cell or a signed sum of cells (a gap between two rows):
the claims of shared/reporting/claims.py reduce to such groups, a column or a whole trend.

A comparison's lead is the difference of its sides' means over seeds, each rounded as the table
rounds (equal rounded means are a tie, as in the table's marks); its noise the spread of its lead
from seed to seed, scaled to one pooled standard deviation of its sides (NOISE_TEST). A group's
verdict:

- held: every comparison leads by more than its noise (by any lead where a side has one seed,
  and so no spread); `margin` is the smallest lead;
- within noise: no comparison misses by more than its noise, and some leads or misses by at most
  its noise (a tie included): the runs cannot tell; `margin` or `shortfall` is that of the one
  furthest behind among those;
- not held: some comparison misses by more than its noise (by any miss, a tie included, where a
  side has one seed); `shortfall` is the largest miss;
- not yet measured: a cell it needs has no value on any seed, or its cells share no seed
  (`missing` names them).

The seeds are those every cell of the group has (`shared_seeds`): a seed fixes the partition,
the initial weights and the sampling for every method, so the comparison is paired. A run that
ended but whose number is not a result (diverged, suspect: shared/runs/metrics.py `judge`) and
a target never reached take as low a value as a run scores (`run_values`: chance accuracy, or
the column's lowest if lower; one round more than the run's rounds) and are named
(`worst_named`); a seed some cell lacks (its run failed, or had no target) is left out and
named with why (`seeds_left_out`). Per seed, a group holds where every comparison holds on
that seed's values alone (`seeds_held`: "k/n").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from shared.reporting.summary import COMPLETED, FAILED, SUSPECT, shown

HELD, WITHIN_NOISE, NOT_HELD, NOT_MEASURED = "held", "within noise", "not held", "not yet measured"
VERDICTS = (HELD, WITHIN_NOISE, NOT_HELD, NOT_MEASURED)
NOISE_TEST = (
    "noise: the sample standard deviation (ddof=1) of a comparison's lead over the seeds, divided by "
    "sqrt(2): the pooled sqrt((s_a^2 + s_b^2) / 2) of its two sides where a seed moves them "
    "independently, less where a seed (one partition, one initialisation) moves both alike; "
    "measured on one seed there is no spread, so any lead holds and any miss (a tie included) does not"
)
# Why a cell's seed holds no plain number: a run's status (diverged, SUSPECT, FAILED), a target
# never reached, or none to reach. The worst outcomes are results, valued as low as a run scores
# (`run_values`): a method whose run diverged, or ended at chance, beat nothing there; the others
# leave the seed out of the comparison (shared/runs/files.py's FINAL: a failed run is tried again).
DIVERGED, NEVER, NO_TARGET = "diverged", "never reached", "no target"
WORST_OUTCOMES = (DIVERGED, SUSPECT, NEVER)

Cell = tuple[str, str]  # (row label, column label)
Values = dict[Cell, dict[int, float]]  # a cell's value per seed; a missing cell has no entry
Notes = dict[Cell, dict[int, str]]  # a cell's seeds that hold no plain number, and why (above)
Term = tuple[tuple[int, str, str], ...]  # (sign, row, column): a signed sum of cells


@dataclass(frozen=True)
class Comparison:
    """`better` beats `worse` (by at least `min_margin`) in the direction of the metric, whose
    numbers are printed to `places` decimals; `seeded_by`: other cells whose seeds the verdict
    shares (a family's members, its best chosen on those seeds)."""

    label: str
    better: Term
    worse: Term
    higher_is_better: bool
    min_margin: float = 0.0
    places: int = 2
    seeded_by: tuple[Cell, ...] = ()

    def cells(self) -> list[Cell]:
        return [(row, column) for _, row, column in (*self.better, *self.worse)]


def term_per_seed(term: Term, values: Values) -> dict[int, float]:
    """The term's value on each seed that all its cells share."""
    seeds = set.intersection(*(set(values[(r, c)]) for _, r, c in term))
    return {s: sum(sign * values[(r, c)][s] for sign, r, c in term) for s in sorted(seeds)}


def term_mean(term: Term, values: Values, places: int | None = None) -> float:
    """Mean over seeds: a sum of cells' means, each as printed to `places` decimals."""
    means = [sign * float(np.mean(list(values[(r, c)].values()))) for sign, r, c in term]
    if places is not None:
        means = [shown(m, places) for m in means]
    return sum(means)


def lead(better: float, worse: float, higher_is_better: bool) -> float:
    """How far `better` is ahead (negative: behind). Two targets never reached (+inf, as the
    paper's "_") are level, which does not make the claimant ahead."""
    diff = better - worse if higher_is_better else worse - better
    return -math.inf if math.isnan(diff) else diff


def comparison_lead(c: Comparison, values: Values) -> float:
    """The comparison's lead over its claimed margin, on the means as printed: a lead within
    rounding of the margin is none."""
    better = term_mean(c.better, values, c.places)
    worse = term_mean(c.worse, values, c.places)
    ahead = lead(better, worse, c.higher_is_better) - c.min_margin
    return shown(ahead, c.places) if math.isfinite(ahead) else ahead


def group_verdict(comparisons: list[Comparison], values: Values, notes: Notes | None = None) -> dict:
    """The verdict of one group of comparisons (see the module docstring); `notes`: why a cell's
    seed holds no plain number (`run_notes`), to name them."""
    notes = notes or {}
    cells = list(dict.fromkeys(cell for c in comparisons for cell in (*c.cells(), *c.seeded_by)))
    missing = [cell for cell in cells if cell not in values]
    if missing:
        return dict(verdict=NOT_MEASURED, missing="; ".join(named(cell, notes) for cell in missing))
    left_out = seeds_left_out(cells, values, notes)
    values = shared_seeds(cells, values)
    if not values[cells[0]]:
        return dict(verdict=NOT_MEASURED, missing=f"a seed every cell has ({left_out})", left_out=left_out)
    leads = [comparison_lead(c, values) for c in comparisons]
    noises = [noise(c, values) for c in comparisons]
    outcomes = [outcome(x, n) for x, n in zip(leads, noises)]
    verdict = NOT_HELD if "loss" in outcomes else WITHIN_NOISE if "within" in outcomes else HELD
    # the comparison the verdict rests on: of those with its outcome, the furthest behind (the closest where held)
    kind = {NOT_HELD: "loss", WITHIN_NOISE: "within", HELD: "win"}[verdict]
    decisive = min((i for i, o in enumerate(outcomes) if o == kind), key=lambda i: leads[i])
    ahead = leads[decisive] > 0
    return dict(
        verdict=verdict,
        margin=leads[decisive] + comparisons[decisive].min_margin if ahead else math.nan,
        shortfall=0.0 - leads[decisive] if not ahead else math.nan,  # 0.0 - 0.0 is +0.0, never "-0.00"
        noise=noises[decisive],
        claimed_margin=comparisons[decisive].min_margin,
        decisive=comparisons[decisive].label,
        seeds_held=seeds_held(comparisons, values),
        missing="",
        left_out=left_out,
        worst=worst_named(cells, values, notes),
    )


def noise(c: Comparison, values: Values) -> float:
    """The spread of the comparison's lead over its seeds, scaled to a pooled standard deviation
    of its sides (NOISE_TEST), as printed: a lead equal on every seed has none, whatever the
    float error of its variance; NaN on one seed, or where a paper's target never reached is +inf."""
    better, worse = term_per_seed(c.better, values), term_per_seed(c.worse, values)
    leads = [better[s] - worse[s] for s in better if s in worse]
    if len(leads) < 2:
        return math.nan
    with np.errstate(invalid="ignore"):  # +inf - +inf (the paper's "_" on both sides): no spread
        spread = float(np.std(leads, ddof=1))
    return math.nan if math.isnan(spread) else shown(spread / math.sqrt(2), c.places)


def outcome(lead_: float, noise_: float) -> str:
    """A comparison's lead against its noise: "win", "within" or "loss" (a tie is no lead)."""
    if math.isnan(noise_):  # a side on one seed (or the paper's "_"): no spread to be within
        return "win" if lead_ > 0 else "loss"
    # a tie on every seed (noise 0) is within: two rows that never reach a rounds target, say,
    # could reach it in any order after the last round
    return "win" if lead_ > noise_ else "within" if lead_ >= -noise_ else "loss"


def seeds_held(comparisons: list[Comparison], values: Values) -> str:
    """On how many of the shared seeds every comparison holds on that seed's values alone, each
    value rounded as the verdict rounds a mean (`comparison_lead`)."""
    cells = list(dict.fromkeys(cell for c in comparisons for cell in c.cells()))
    seeds = sorted(set.intersection(*(set(values[cell]) for cell in cells)))
    held = sum(
        all(comparison_lead(c, {cell: {s: values[cell][s]} for cell in cells}) > 0 for c in comparisons) for s in seeds
    )
    return f"{held}/{len(seeds)}"


def shared_seeds(cells: list[Cell], values: Values) -> Values:
    """The cells' values on the seeds every one of them has."""
    seeds = set.intersection(*(set(values[cell]) for cell in cells))
    return {cell: {s: v for s, v in values[cell].items() if s in seeds} for cell in cells}


def named(cell: Cell, notes: Notes) -> str:
    """'row @ column', with why its seeds hold no value where that is known."""
    why = seeds_by_reason(notes.get(cell, {}))
    return f"{cell[0]} @ {cell[1]}" + (f" ({why})" if why else "")


def seeds_by_reason(reasons: dict[int, str]) -> str:
    """{0: "failed", 2: "failed", 1: "no target"} -> "seed 0, 2 failed, seed 1 no target"."""
    by: dict[str, list[int]] = {}
    for seed, reason in sorted(reasons.items()):
        by.setdefault(reason, []).append(seed)
    return ", ".join(f"seed {', '.join(map(str, seeds))} {reason}" for reason, seeds in by.items())


def seeds_left_out(cells: list[Cell], values: Values, notes: Notes) -> str:
    """Each seed some cell has and another lacks, with the cells lacking it and why ("" if none):
    "seed 1 (Ours @ a: failed)"; a seed no cell has a value on is named where a cell failed on
    it or had no target there."""
    have = set.intersection(*(set(values[cell]) for cell in cells))
    seeds = set().union(*(set(values[cell]) | set(notes.get(cell, {})) for cell in cells)) - have
    parts = []
    for seed in sorted(seeds):
        lacking = [cell for cell in cells if seed not in values[cell]]
        why = [f"{r} @ {c}: {notes.get((r, c), {}).get(seed, 'no run')}" for r, c in lacking]
        parts.append(f"seed {seed} ({'; '.join(why)})")
    return "; ".join(parts)


def worst_named(cells: list[Cell], values: Values, notes: Notes) -> str:
    """The cells' worst outcomes on the compared seeds: "Ours @ a: seed 1 diverged" ("" if none)."""
    parts = []
    for cell in cells:
        reasons = {s: why for s, why in notes.get(cell, {}).items() if s in values[cell] and why in WORST_OUTCOMES}
        if reasons:
            parts.append(f"{cell[0]} @ {cell[1]}: {seeds_by_reason(reasons)}")
    return "; ".join(parts)


def run_reason(run) -> str | None:
    """Why a run of collect's rows holds no plain number (the module's reasons), None if it does."""
    status = str(run.status).split(":")[0]
    if status in (DIVERGED, SUSPECT):
        return status
    if status != COMPLETED:
        return FAILED
    if getattr(run, "no_target", False):
        return NO_TARGET
    return NEVER if run.never else None


def run_values(table, runs: pd.DataFrame) -> Values:
    """Our runs' values per cell and seed (shared.reporting.summary.collect's rows): a completed
    run's number; a worst outcome's, as low as a run scores: in an accuracy column chance (100 /
    classes %) or the column's lowest completed value if lower (a few rounds' runs, or a domain's
    accuracy, can sit under chance), in a column of rounds to a target one round more than the
    run's rounds (the fewest a run that never reached the target could take); none for a failed
    run, or a count of rounds with no target (another row's run at that seed did not complete).
    Finite: each seed weighs as one, and spreads over seeds stay numbers."""
    rounds = {c.label: table.metric_for(c).counts_rounds for c in table.columns}
    records = list(runs.itertuples()) if len(runs) else []
    reasons = [run_reason(run) for run in records]
    lowest: dict[str, float] = {}
    for run, reason in zip(records, reasons):
        if reason is None and not rounds[run.column]:
            lowest[run.column] = min(lowest.get(run.column, math.inf), float(run.value))
    values: Values = {}
    for run, reason in zip(records, reasons):
        if reason is None:
            value = float(run.value)
        elif reason in WORST_OUTCOMES and rounds[run.column]:
            value = float(run.rounds + 1)
        elif reason in WORST_OUTCOMES:
            value = min(float(run.chance), lowest.get(run.column, math.inf))
        else:
            value = math.nan
        if not math.isnan(value):
            values.setdefault((run.row, run.column), {})[int(run.seed)] = value
    return values


def run_notes(runs: pd.DataFrame) -> Notes:
    """Why each of our runs that holds no plain number holds none (`run_reason`)."""
    notes: Notes = {}
    for run in runs.itertuples() if len(runs) else []:
        if (reason := run_reason(run)) is not None:
            notes.setdefault((run.row, run.column), {})[int(run.seed)] = reason
    return notes
