"""Claims as data: every paper's claims hold on its own numbers, and their verdicts on generated
run results (held, within noise, not held, not yet measured; per seed; rounds never
reached), written beside a built table and summed up per paper."""

import math
from dataclasses import replace

import pandas as pd
import pytest

import shared.reporting.claims
from shared.reporting.claim_verdicts import HELD, NOT_HELD, NOT_MEASURED, WITHIN_NOISE, run_notes, run_values
from shared.reporting.claims import (
    BeatsAblations,
    Best,
    FewestRounds,
    Trend,
    evaluate,
    paper_claims,
    paper_values,
)
from shared.reporting.tables import build_paper_claims, build_table
from shared.targets.papers import paper_names
from shared.targets.table_declarations import Column, Inconsistency, Metric, Reported, Row, Table, expand, paper_tables
from tests.reporting.test_tables import BASE, FINAL, write_runs


@pytest.mark.parametrize("paper", paper_names())
def test_every_claim_holds_on_the_papers_own_numbers(paper):
    claims = paper_claims(paper)
    assert len(claims) >= 3, f"{paper} declares {len(claims)} claims; its abstract and conclusion make at least 3"
    tables = paper_tables(paper)
    for claim in claims:
        table = tables[claim.table]
        needed = set(claim.needed(table))
        assert needed <= set(paper_values(table)), f"{paper} {claim.statement}: cells the paper does not report"
        result = evaluate(table, [claim], paper_values(table))
        assert len(result) and (result.verdict == HELD).all(), (claim.statement, result[["group", "verdict"]])


def test_a_wrongly_written_claim_fails_on_the_papers_numbers():
    table = paper_tables("fedssd")["table2"]
    wrong = Best("table2", "MOON is best everywhere.", "nowhere", rows=("MOON",))
    result = evaluate(table, [wrong], paper_values(table))
    assert result.group.tolist() == [c.label for c in table.columns]  # one verdict per column, each not held
    assert (result.verdict == NOT_HELD).all()


def seeds_frame(values: dict) -> pd.DataFrame:
    """Generated run results: {(row, column): [value per seed]} as shared.reporting.summary.collect's
    rows; NaN: a rounds target never reached."""
    return pd.DataFrame(
        [
            dict(
                row=r,
                column=c,
                seed=s,
                status="completed",
                value=v,
                never=math.isnan(v),
                run_id=f"{r}{c}{s}",
                rounds=100,
            )
            for (r, c), per_seed in values.items()
            for s, v in enumerate(per_seed)
        ]
    )


def grid_table(metric=FINAL):
    columns = [Column(label, {}) for label in ("clear", "close", "behind", "missing")]
    return Table(
        paper="fedssd",
        name="tablegen",
        caption="Generated.",
        base=BASE,
        rows=[Row("Ours", {"name": "fedavg"}), Row("Rival", {"name": "fedavg"})],
        columns=columns,
        reported={"Ours": [Reported(60.0)] * 4, "Rival": [Reported(50.0)] * 4},
        metric=metric,
    )


def test_verdicts_per_column_and_per_seed_on_generated_runs():
    table = grid_table()
    runs = seeds_frame(
        {
            ("Ours", "clear"): [70, 71, 72],
            ("Rival", "clear"): [60, 61, 62],  # ahead by 10
            ("Ours", "close"): [60, 62, 58],
            ("Rival", "close"): [61, 60, 60.5],  # behind by 0.5, std 2
            ("Ours", "behind"): [50, 50.5, 49.5],
            ("Rival", "behind"): [60, 60.2, 59.8],  # behind by 10
            ("Ours", "missing"): [70, 70, 70],  # the rival never ran
        }
    )
    result = evaluate(table, [Best("tablegen", "Ours is best.", "test", rows=("Ours",))], run_values(table, runs))
    by = result.set_index("group")
    assert by.loc["clear", "verdict"] == HELD and by.loc["clear", "margin"] == pytest.approx(10.0)
    assert by.loc["clear", "seeds_held"] == "3/3"
    assert by.loc["close", "verdict"] == WITHIN_NOISE and by.loc["close", "shortfall"] == pytest.approx(0.5)
    assert by.loc["close", "seeds_held"] == "1/3"  # only seed 1 (62 > 60)
    assert by.loc["behind", "verdict"] == NOT_HELD and by.loc["behind", "shortfall"] == pytest.approx(10.0)
    assert by.loc["missing", "verdict"] == NOT_MEASURED and by.loc["missing", "missing"] == "Rival @ missing"


def test_a_claimed_margin_must_be_cleared():
    table = grid_table()
    values = run_values(table, seeds_frame({("Ours", "clear"): [60.2, 60.6], ("Rival", "clear"): [60.0, 60.0]}))
    by_half = Best("tablegen", "Ours by more than 0.5", "t", rows=("Ours",), columns=("clear",), min_margin=0.5)
    result = evaluate(table, [by_half], values)
    # ahead by 0.4 on the means: 0.1 short of the claimed 0.5, inside the noise of 0.2 (leads 0.2, 0.6)
    assert result.verdict.tolist() == [WITHIN_NOISE] and result.shortfall[0] == pytest.approx(0.1)
    assert result.noise[0] == pytest.approx(0.2)
    assert result.seeds_held[0] == "1/2"  # seed 1 clears it (0.6), seed 0 does not (0.2)


def test_a_tie_is_no_lead():
    """Two identical runs (a method equal to FedAvg) do not make a claim of beating it hold."""
    table = grid_table()
    values = run_values(
        table,
        seeds_frame(
            {
                ("Ours", "clear"): [50.0, 52.0],
                ("Rival", "clear"): [50.0, 52.0],
                ("Ours", "close"): [50.0],
                ("Rival", "close"): [50.0],
            }
        ),
    )
    result = evaluate(table, [Best("tablegen", "x", "t", rows=("Ours",), columns=("clear", "close"))], values)
    # a tie on every seed is within noise (none: a lead of 0 is within 0); one seed has no spread
    assert result.verdict.tolist() == [WITHIN_NOISE, NOT_HELD]
    assert result.seeds_held.tolist() == ["0/2", "0/1"]


def test_a_single_seed_has_no_spread_so_a_miss_is_never_within_noise():
    table = grid_table()
    runs = seeds_frame({("Ours", "close"): [60.0], ("Rival", "close"): [60.1]})
    result = evaluate(table, [Best("tablegen", "x", "t", rows=("Ours",), columns=("close",))], run_values(table, runs))
    assert result.verdict.tolist() == [NOT_HELD] and math.isnan(result.noise[0])


def test_cells_are_compared_on_the_seeds_they_share():
    """The claimant's seed 1 failed: the rival's mean over both seeds (55) would put the
    claimant (60 on seed 0) ahead by 5; on the seed both have the rival leads by 10, and the
    verdict says which seed it left out."""
    from shared.reporting.claims_pages import detail

    table = grid_table()
    runs = seeds_frame({("Ours", "clear"): [60.0], ("Rival", "clear"): [70.0, 40.0]})
    result = evaluate(table, [Best("tablegen", "x", "t", rows=("Ours",), columns=("clear",))], run_values(table, runs))
    row = result.iloc[0]
    assert row.verdict == NOT_HELD and row.shortfall == pytest.approx(10.0) and row.seeds_held == "0/1"
    assert row.left_out == "seed 1 (Ours @ clear: no run)"
    assert detail(row).endswith("left out: seed 1 (Ours @ clear: no run))")


def test_a_familys_best_is_chosen_on_the_seeds_compared():
    """FedGKD's seed 2 (80) would make it the family's best on its own seeds; FedAvg has no seed 2
    (diverged), so on seeds 0 and 1 the best is the other member (72), which beats FedAvg (71)."""
    table = grid_table()
    runs = seeds_frame({("Ours", "clear"): [70.0, 70.0, 80.0], ("Rival", "clear"): [72.0, 72.0, 72.0]})
    runs = pd.concat([runs, seeds_frame({("Other", "clear"): [71.0, 71.0]})])
    family = Best("tablegen", "x", "t", rows=("Ours", "Rival"), against=("Other",), columns=("clear",))
    result = evaluate(table, [family], run_values(table, runs)).iloc[0]
    assert result.verdict == HELD and result.decisive == "Rival vs Other" and result.seeds_held == "2/2"


def test_cells_that_share_no_seed_are_not_measured_yet():
    table = grid_table()
    runs = seeds_frame({("Ours", "clear"): [60.0], ("Rival", "clear"): [70.0, 40.0]})
    runs = runs[~((runs.row == "Rival") & (runs.seed == 0))]  # the rival's seed 1 alone
    result = evaluate(table, [Best("tablegen", "x", "t", rows=("Ours",), columns=("clear",))], run_values(table, runs))
    assert result.verdict.tolist() == [NOT_MEASURED]
    assert result.missing[0] == "a seed every cell has (seed 0 (Rival @ clear: no run); seed 1 (Ours @ clear: no run))"


def outcomes_frame(values: dict) -> pd.DataFrame:
    """Like seeds_frame, where a seed's entry may name how its run ended instead of a number:
    "diverged", "suspect" (at chance), "failed", "never" (a rounds target never reached) or
    "no target" (a count of rounds to another row's accuracy whose run there did not complete)."""
    status = {"diverged": "diverged: loss is nan", "suspect": "suspect: at chance", "failed": "failed: OSError"}
    rows = []
    for (r, c), per_seed in values.items():
        for s, v in enumerate(per_seed):
            number = not isinstance(v, str)
            rows.append(
                dict(
                    row=r,
                    column=c,
                    seed=s,
                    run_id=f"{r}{c}{s}",
                    status=status.get(v, "completed"),
                    value=v if number else math.nan,
                    never=v == "never",
                    no_target=v == "no target",
                    chance=10.0,
                    rounds=100,
                )
            )
    return pd.DataFrame(rows)


def judged(table, claim, values: dict) -> pd.DataFrame:
    runs = outcomes_frame(values)
    return evaluate(table, [claim], run_values(table, runs), run_notes(runs)).set_index("group")


def test_a_run_that_diverged_or_ended_at_chance_counts_at_chance_never_as_a_missing_cell():
    """Diverged and suspect runs are results (never trained again): each counts at chance
    accuracy (10% here) and is named. Before, the cell counted as missing, a verdict that would
    never change, or its seeds were left out, in the claimant's favour."""
    table = grid_table()
    claim = Best("tablegen", "x", "t", rows=("Ours",), columns=("clear", "close", "behind"))
    by = judged(
        table,
        claim,
        {
            ("Ours", "clear"): ["diverged", "diverged", "diverged"],
            ("Rival", "clear"): [60, 61, 62],
            ("Ours", "close"): [70, 71, 72],
            ("Rival", "close"): ["suspect", "suspect", "suspect"],  # as FedNova at chance in FedCSD's Table I
            ("Ours", "behind"): [70, "diverged", "diverged"],
            ("Rival", "behind"): [60, 61, 62],
        },
    )
    assert by.verdict.to_dict() == {"clear": NOT_HELD, "close": HELD, "behind": NOT_HELD}
    assert by.loc["clear", "shortfall"] == pytest.approx(51.0)
    assert by.loc["clear", "worst"] == "Ours @ clear: seed 0, 1, 2 diverged"
    assert by.loc["close", "margin"] == pytest.approx(61.0)
    assert by.loc["close", "worst"] == "Rival @ close: seed 0, 1, 2 suspect"
    # 30 against 61 on the means, the diverged seeds' spread in the noise: leads 10, -51, -52, std 35.5 / sqrt(2)
    assert by.loc["behind", "shortfall"] == pytest.approx(31.0) and by.loc["behind", "noise"] == pytest.approx(
        25.11, abs=0.01
    )
    assert by.loc["behind", "seeds_held"] == "1/3" and by.loc["behind", "worst"] == "Ours @ behind: seed 1, 2 diverged"
    assert (by.left_out == "").all()
    one_in_three = judged(table, claim, {("Ours", "clear"): [50, 50, 50], ("Rival", "clear"): ["diverged", 70, 70]})
    assert one_in_three.loc["clear", "verdict"] == WITHIN_NOISE  # one diverged seed does not decide it alone
    # a few rounds' runs can sit under chance: a diverged run counts as low as the column's lowest
    under = {("Ours", "clear"): ["diverged"] * 3, ("Rival", "clear"): [9.2, 9.6, 9.4]}
    assert judged(table, claim, under).loc["clear", ["verdict", "shortfall"]].tolist() == [NOT_HELD, pytest.approx(0.2)]


def test_every_seed_left_out_is_named_with_why():
    """FedSSD's T: FedAvg's run at seed 1 diverged, so no other row has a target there; the
    seed is left out of every cell, and said so (before, a seed no cell had went unnamed)."""
    table = grid_table(Metric("rounds_to_row", reference="Ref"))
    claim = FewestRounds("tablegen", "fewest", "t", rows=("Ours",), columns=("clear",), against=("Rival",))
    by = judged(
        table,
        claim,
        {("Ours", "clear"): [20, "no target", 22], ("Rival", "clear"): [30, "no target", "failed"]},
    )
    assert by.loc["clear", "verdict"] == HELD and by.loc["clear", "seeds_held"] == "1/1"
    assert by.loc["clear", "left_out"] == (
        "seed 1 (Ours @ clear: no target; Rival @ clear: no target); seed 2 (Rival @ clear: failed)"
    )


def test_a_target_never_reached_counts_one_round_more_than_the_run_trained():
    """Never reaching the target in 100 rounds counts as 101, the fewest it could take: a
    claimant reaching it on two seeds of three, where the rival never does, is ahead (before,
    two infinite means made it behind); its spread enters the noise. Where both never reach it
    on the same seed, that seed is a tie: at "close" the leads 10, 9, 0 hold (noise 3.9)."""
    table = grid_table(Metric("rounds_to", target=50))
    claim = FewestRounds("tablegen", "fewest", "t", rows=("Ours",), columns=("clear", "close", "behind"))
    by = judged(
        table,
        claim,
        {
            ("Ours", "clear"): [20, 22, "never"],
            ("Rival", "clear"): ["never", "never", "never"],
            ("Ours", "close"): [20, 22, "never"],
            ("Rival", "close"): [30, 31, "never"],
            ("Ours", "behind"): [20, "never", 22],
            ("Rival", "behind"): [25, 26, 27],
        },
    )
    assert by.verdict.to_dict() == {"clear": HELD, "close": HELD, "behind": WITHIN_NOISE}
    assert by.loc["clear", "margin"] == pytest.approx(101 - 47.7)  # 47.67 printed to one decimal
    assert by.loc["close", "margin"] == pytest.approx(6.3) and by.loc["close", "seeds_held"] == "2/3"
    assert by.loc["close", "noise"] == pytest.approx(3.9)
    assert by.loc["behind", "shortfall"] == pytest.approx(21.7)
    assert by.loc["close", "worst"] == "Ours @ close: seed 2 never reached; Rival @ close: seed 2 never reached"


def test_the_verdict_is_symmetric_and_a_tie_is_as_the_table_prints_it():
    """A lead within the noise is no more support than a miss within it: "A beats B" and "B
    beats A" on the same runs are both within noise. Means equal as printed (62.00) are a tie,
    as the table's marks have them, not a lead of 0.0033."""
    table = grid_table()
    values = {("Ours", "clear"): [60, 62, 64], ("Rival", "clear"): [61, 62, 62.99]}
    mine = judged(table, Best("tablegen", "x", "t", rows=("Ours",), columns=("clear",)), values).iloc[0]
    theirs = judged(table, Best("tablegen", "x", "t", rows=("Rival",), columns=("clear",)), values).iloc[0]
    assert mine.verdict == theirs.verdict == WITHIN_NOISE
    assert mine.shortfall == theirs.shortfall == 0.0 and mine.noise == pytest.approx(0.71)  # leads -1, 0, 1.01
    clear = {("Ours", "clear"): [60, 62, 64], ("Rival", "clear"): [55, 56, 57]}  # ahead by 6, noise 0.71
    assert judged(table, Best("tablegen", "x", "t", rows=("Ours",), columns=("clear",)), clear).iloc[0].verdict == HELD


def test_the_detail_names_the_comparison_the_verdict_rests_on():
    """Ours beats Other clearly (by 3, noise 0.1) and Rival within noise (by 5, noise 7.1): the
    verdict is within noise, and its detail is Rival's, not the smallest lead's. Held by a lead
    exactly at the claimed margin as printed is no lead, and a tie prints as 0.00, never -0.00."""
    from shared.reporting.claims_pages import detail

    table = grid_table()
    claim = Best("tablegen", "x", "t", rows=("Ours",), against=("Rival", "Other"), columns=("clear",))
    values = {
        ("Ours", "clear"): [80, 80.1, 79.9],
        ("Rival", "clear"): [65, 75, 85],
        ("Other", "clear"): [76.9, 77, 77.1],
    }
    row = judged(table, claim, values).iloc[0]
    assert (row.verdict, row.decisive, row.margin) == (WITHIN_NOISE, "Ours vs Rival", pytest.approx(5.0))
    by_half = Best("tablegen", "x", "t", rows=("Ours",), columns=("clear",), min_margin=0.5)
    exact = judged(table, by_half, {("Ours", "clear"): [70.3], ("Rival", "clear"): [69.8]}).iloc[0]
    assert exact.verdict == NOT_HELD and str(exact.shortfall) == "0.0"
    assert detail(exact).startswith("short by 0.00 (furthest behind: Ours vs Rival; noise -; the claim: a lead of")
    gap = Trend("tablegen", "gap grows", "t", row="Ours", columns=("clear", "close"), minus="Rival")
    tie = {k: [v] for k, v in {("Ours", "clear"): 78.11, ("Rival", "clear"): 57.96}.items()}
    tie |= {("Ours", "close"): [81.79], ("Rival", "close"): [61.64]}  # 20.15 and 20.15 as printed
    assert judged(table, gap, tie).iloc[0].verdict == NOT_HELD


def test_the_noise_is_paired_by_seed():
    """A seed moves every run on it alike (one partition, one initialisation): a comparison's
    noise is the spread of its per-seed lead (over sqrt(2), the scale of a pooled std), not its
    sides' spreads pooled. A lead of 2 on every seed holds with no noise, where the sides' own
    spreads (std 2) would call it within noise; so does a gap that grows by 1 on every seed."""
    table = grid_table()
    best = Best("tablegen", "x", "t", rows=("Ours",), columns=("clear",))
    row = judged(table, best, {("Ours", "clear"): [62, 66, 64], ("Rival", "clear"): [60, 64, 62]}).iloc[0]
    assert (row.verdict, row.margin, row.noise, row.seeds_held) == (HELD, pytest.approx(2.0), 0.0, "3/3")
    gap = Trend("tablegen", "gap grows", "t", row="Ours", columns=("clear", "close"), minus="Rival")
    runs = {("Ours", "clear"): [62, 66, 64], ("Rival", "clear"): [60, 64, 62]}
    runs |= {("Ours", "close"): [63, 67, 65], ("Rival", "close"): [60, 64, 62]}
    row = judged(table, gap, runs).iloc[0]
    assert (row.verdict, row.margin, row.noise) == (HELD, pytest.approx(1.0), 0.0)
    runs[("Ours", "close")] = [65, 65, 65]  # the gap grows by 3, -1, 1: std 2, noise 1.41
    row = judged(table, gap, runs).iloc[0]
    assert (row.verdict, row.noise) == (WITHIN_NOISE, pytest.approx(math.sqrt(2), abs=0.01))


def test_a_seed_holds_as_the_verdict_reads_it_printed():
    """On one seed the verdict and its seeds held agree: a lead within rounding of the claimed
    margin (64.01 against 63.51, 0.5000000000000071 apart in floats) is none on either."""
    table = grid_table()
    by_half = Best("tablegen", "x", "t", rows=("Ours",), columns=("clear",), min_margin=0.5)
    row = judged(table, by_half, {("Ours", "clear"): [64.01], ("Rival", "clear"): [63.51]}).iloc[0]
    assert (row.verdict, row.seeds_held) == (NOT_HELD, "0/1")
    best = Best("tablegen", "x", "t", rows=("Ours",), columns=("clear",))
    tie = judged(table, best, {("Ours", "clear"): [70.004], ("Rival", "clear"): [70.001]}).iloc[0]
    assert (tie.verdict, tie.seeds_held) == (NOT_HELD, "0/1")
    # each side rounded, then compared, as the verdict's means are: 70.01 against 70.00 leads
    ahead = judged(table, best, {("Ours", "clear"): [70.006], ("Rival", "clear"): [70.004]}).iloc[0]
    assert (ahead.verdict, ahead.seeds_held) == (HELD, "1/1")
    behind = judged(table, best, {("Ours", "clear"): [70.004], ("Rival", "clear"): [69.996]}).iloc[0]
    assert (behind.verdict, behind.seeds_held) == (NOT_HELD, "0/1")
    three = judged(table, best, {("Ours", "clear"): [70.006] * 3, ("Rival", "clear"): [70.004] * 3}).iloc[0]
    assert (three.verdict, three.seeds_held) == (HELD, "3/3")


def test_a_familys_best_is_judged_on_the_seeds_it_was_chosen_on():
    """The family's best is chosen on the seeds every member and rival has (0 and 1: the other
    member failed on seed 2) and judged on the same, seed 2 named (before, judged on all three)."""
    table = grid_table()
    family = Best("tablegen", "x", "t", rows=("Ours", "Rival"), against=("Other",), columns=("clear",))
    result = judged(
        table,
        family,
        {("Ours", "clear"): [72, 72, 60], ("Rival", "clear"): [71.9, 71.9, "failed"], ("Other", "clear"): [71, 71, 71]},
    ).iloc[0]
    assert (result.verdict, result.decisive, result.seeds_held) == (HELD, "Ours vs Other", "2/2")
    assert result.left_out == "seed 2 (Rival @ clear: failed)"


def test_fewest_rounds_counts_a_target_never_reached_as_worst():
    table = grid_table(Metric("rounds_to", target=50))
    runs = seeds_frame(
        {
            ("Ours", "clear"): [20, 22],
            ("Rival", "clear"): [30, math.nan],
            ("Ours", "close"): [math.nan, math.nan],
            ("Rival", "close"): [math.nan, math.nan],
        }
    )
    claim = FewestRounds("tablegen", "fewest", "t", rows=("Ours",), columns=("clear", "close"))
    by = evaluate(table, [claim], run_values(table, runs)).set_index("group")
    assert by.loc["clear", "verdict"] == HELD and by.loc["clear", "seeds_held"] == "2/2"
    assert by.loc["close", "verdict"] == WITHIN_NOISE  # neither reaches it on either seed: the runs cannot tell
    with pytest.raises(ValueError, match="do not count rounds"):
        FewestRounds("tablegen", "x", "t", rows=("Ours",)).groups(grid_table(), {})


def test_fewest_rounds_to_a_rows_final_accuracy_has_that_row_as_no_rival():
    """FedSSD's T: FedAvg's own count is its rounds by definition, so a method that merely
    matches FedAvg would beat it; the claim is judged against the other rows."""
    table = grid_table(Metric("rounds_to_row", reference="Rival"))
    claim = FewestRounds("tablegen", "fewest", "t", rows=("Ours",), columns=("clear",))
    assert claim.rivals(table) == [] and claim.groups(table, {}) == {"clear": []}
    three = replace(
        table,
        rows=[*table.rows, Row("Other", {"name": "fedprox"})],
        reported={**table.reported, "Other": [Reported(40.0)] * 4},
    )
    assert claim.rivals(three) == ["Other"]


def test_trend_of_a_gap_and_ablations_and_a_family():
    table = grid_table()
    runs = seeds_frame(
        {
            ("Ours", "clear"): [51, 51],
            ("Rival", "clear"): [50, 50],
            ("Ours", "close"): [55, 55],
            ("Rival", "close"): [50, 50],
            ("Ours", "behind"): [54, 54],
            ("Rival", "behind"): [50, 50],
        }
    )
    values = run_values(table, runs)
    rising = Trend("tablegen", "the gap grows", "t", row="Ours", columns=("clear", "close"), minus="Rival")
    falling_then = Trend(
        "tablegen", "the gap grows", "t", row="Ours", columns=("clear", "close", "behind"), minus="Rival"
    )
    assert evaluate(table, [rising], values).verdict.tolist() == [HELD]
    assert evaluate(table, [falling_then], values).verdict.tolist() == [NOT_HELD]
    ablation = BeatsAblations("tablegen", "full beats ablated", "t", rows=("Ours",), against=("Rival",))
    held = evaluate(table, [ablation], values).dropna(subset=["margin"])
    assert len(held) and (held.verdict == HELD).all()
    family = Best("tablegen", "one of the family", "t", rows=("Rival", "Ours"), against=(), columns=("clear",))
    assert family.groups(table, values)["clear"] == []  # no rivals left: nothing to compare
    assert evaluate(table, [family], values).empty  # and nothing judged


def test_the_claims_beside_a_built_table_and_the_papers_summary(tmp_path, monkeypatch):
    from tests.reporting.test_tables import CURVES, make_table

    table = make_table()
    claims = [Best("tabletest", "FedProx beats FedAvg.", "test", rows=("FedProx",), against=("FedAvg",))]
    monkeypatch.setattr(shared.reporting.claims, "paper_claims", lambda paper: claims)
    write_runs(table, tmp_path / "runs", CURVES, failed={("FedProx", "b")})
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    verdicts = pd.read_csv(tmp_path / "out" / "claims.csv")
    # seed 0 of FedProx at b diverged: it counts at chance there, its spread in the noise
    assert verdicts.set_index("group").verdict.to_dict() == {"a": HELD, "b": WITHIN_NOISE}
    assert set(verdicts.scale) == {"paper"} and set(verdicts.data) == {"synthetic"}  # the table's own data
    b = verdicts.set_index("group").loc["b"]
    assert (b.seeds_held, b.worst) == ("2/3", "FedProx @ b: seed 0 diverged") and b.noise > b.shortfall > 0
    text = (tmp_path / "out" / "claims.md").read_text()
    assert "Scale: **paper**. Data: synthetic." in text and "held in 1, within noise in 1 of 2 groups" in text
    assert "; worst outcomes: FedProx @ b: seed 0 diverged)" in text
    assert "standard deviation (ddof=1) of a comparison&#x27;s lead" in (tmp_path / "out" / "claims.html").read_text()

    monkeypatch.setattr(shared.reporting.tables, "paper_tables", lambda paper: {"tabletest": table})
    for cell in expand(table, "paper"):  # FedAvg at "a" has not run yet
        if (cell.row.label, cell.column.label) == ("FedAvg", "a"):
            (tmp_path / "runs" / cell.run_id / "metrics.json").unlink()
    build_paper_claims("fedssd", "paper", tmp_path / "runs", tmp_path / "summary")
    summary = pd.read_csv(tmp_path / "summary" / "claims.csv").set_index("group")
    assert summary.verdict.to_dict() == {"a": NOT_MEASURED, "b": WITHIN_NOISE}
    assert summary.loc["a", "missing"] == "FedAvg @ a"


def test_a_claim_naming_a_cell_the_table_lacks_is_refused(monkeypatch):
    table = grid_table()
    typo = Best("tablegen", "Ours beats Rivals.", "t", rows=("Ours",), against=("Rivals",))
    monkeypatch.setattr(shared.reporting.claims, "paper_claims", lambda paper: [typo])
    with pytest.raises(ValueError, match=r"names cells the table lacks: \[\('Rivals', 'clear'\)"):
        shared.reporting.claims.table_claims(table)


def test_an_inconsistency_must_name_a_reported_cell():
    with pytest.raises(ValueError, match="does not report"):
        Table(
            paper="fedssd",
            name="t",
            caption="",
            base=BASE,
            rows=[Row("A", {"name": "fedavg"})],
            columns=[Column("x", {})],
            reported={"A": [Reported(1.0)]},
            inconsistencies=[Inconsistency("A", "y", "no such column")],
        )


def test_a_table_on_a_copy_of_the_data_keeps_its_claims_with_the_copy_as_their_data(tmp_path):
    """FedCAD Table 4 built on a copy of CIFAR-10 is named after the copy (its LaTeX label, its
    titles) and still carries the paper's two claims on it, labelled with the copy as the data;
    Table 1's part on the copy (its CIFAR-10 columns) judges its claims on those columns alone."""
    import json

    from shared.targets.copies import Copy, copy_part, copy_runtime, labelled
    from shared.targets.table_declarations import get_table

    # no kind ("JPEG"): a run's config records the copy's checksum alone, which names the claims' data
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228")
    declared = get_table("fedcad", "table4")
    table = labelled(copy_part(declared, "paper", copy), copy)
    assert (table.name, table.declared_name) == ("table4-cifar10-copy-dfaab4e", "table4")
    assert (
        shared.reporting.claims.table_claims(table) == shared.reporting.claims.table_claims(declared)
        and len(table.rows) == 4
    )
    table1 = labelled(copy_part(get_table("fedcad", "table1"), "paper", copy), copy)
    assert [c.label for c in table1.columns] == ["CIFAR10 acc", "CIFAR10 T(65%)"]
    # each names a CIFAR-100 or FEMNIST column too: judged on the CIFAR-10 column alone, and saying so
    cut = shared.reporting.claims.table_claims(table1)
    assert [(c.columns, c.against) for c in cut] == [
        (("CIFAR10 acc",), ("FedAvg", "FedProx", "FedLSD")),
        (("CIFAR10 T(65%)",), ("FedAvg", "FedProx", "FedLSD")),
    ]
    said = "[judged on the cells this table holds: CIFAR10 acc; against FedAvg, FedProx, FedLSD]"
    assert cut[0].statement.endswith(said)

    epochs = [c.label for c in table.columns]
    for cell in expand(table, "paper", copy_runtime(copy)):  # FedCAD ahead, by more the longer clients train
        gain = 5.0 + 3 * epochs.index(cell.column.label) if cell.row.label == "FedCAD" else 0.0
        accuracy = {"FedAvg": 60.0}.get(cell.row.label, 65.0) + gain + cell.seed
        (tmp_path / "runs" / cell.run_id).mkdir(parents=True)
        (tmp_path / "runs" / cell.run_id / "metrics.json").write_text(
            json.dumps(
                {
                    "status": "completed",
                    "run_id": cell.run_id,
                    "final_acc": accuracy,
                    "best_acc": accuracy,
                    "eval_rounds": [1, 2],
                    "global_acc": [50.0, accuracy],
                    "local_acc": [40.0, 45.0],
                }
            )
        )
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out", copy_runtime(copy))
    verdicts = pd.read_csv(tmp_path / "out" / "claims.csv")
    assert sorted(set(zip(verdicts.table, verdicts.claim))) == [("table4", 1), ("table4", 2)]
    assert verdicts.verdict.tolist() == [HELD] * 5
    assert set(verdicts.data) == {copy.label}
    assert f"Data: {copy.label}." in (tmp_path / "out" / "claims.md").read_text()
