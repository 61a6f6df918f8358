"""Runs -> table, on hand-written metrics: values, marks for failed cells, best/second (ties,
failed and suspect cells), the comparison with the paper (rank agreement, HTML, figure), the
LaTeX escaping and layout, and the metrics a table can ask for."""

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from shared.reporting.tables import build_table
from shared.targets.table_declarations import Column, Metric, Reported, Row, Table, expand

BASE = {"dataset": {"name": "synthetic"}, "federation": {"rounds": 3}}
FINAL = Metric()  # the default metric: the final accuracy


def make_table(metric=FINAL):
    return Table(
        paper="fedssd",
        name="tabletest",
        caption="A test table.",
        base=BASE,
        rows=[
            Row("FedAvg", {"name": "fedavg"}),
            Row("FedProx", {"name": "fedprox", "mu": 0.01}),
            Row("Future", {"name": "not-a-method-yet"}),
        ],
        columns=[Column("a", {"partition": {"beta": 0.1}}), Column("b", {"partition": {"beta": 0.5}})],
        reported={"FedAvg": [Reported(50.0, 1.0), Reported(60.0, 1.0)], "FedProx": [Reported(52.0), None]},
        metric=metric,
        seeds=(0, 1, 2),
    )


def write_runs(table, runs_dir, curves, failed=(), suspect=()):
    """curves[(row, column)] = per-seed global accuracy curves; `failed` cells diverge at seed 0,
    `suspect` cells are flagged suspect at seed 0."""
    for cell in expand(table, "paper"):
        accs = curves[(cell.row.label, cell.column.label)][cell.seed]
        key = (cell.row.label, cell.column.label)
        status = (
            ("diverged: nan" if key in failed else "suspect: at chance" if key in suspect else "completed")
            if cell.seed == 0
            else "completed"
        )
        metrics = {
            "status": status,
            "run_id": cell.run_id,
            "eval_rounds": list(range(1, len(accs) + 1)),
            "global_acc": accs,
            "local_acc": accs,
            "final_acc": accs[-1],
            "best_acc": max(accs),
            "wall_time_s": 3600.0,
            "device": "cuda:0",
            "device_name": "H100",
        }
        (runs_dir / cell.run_id).mkdir(parents=True, exist_ok=True)  # columns may share a run
        (runs_dir / cell.run_id / "metrics.json").write_text(json.dumps(metrics))


CURVES = {
    ("FedAvg", "a"): [[10, 40, 50], [10, 45, 52], [10, 41, 48]],
    ("FedAvg", "b"): [[20, 50, 60], [20, 55, 61], [20, 58, 62]],
    ("FedProx", "a"): [[10, 50, 55], [12, 51, 53], [11, 52, 57]],
    ("FedProx", "b"): [[30, 60, 70], [31, 61, 71], [32, 62, 72]],
}


def test_table_cells_marks_and_comparison(tmp_path):
    table = make_table()
    write_runs(table, tmp_path / "runs", CURVES, failed={("FedProx", "b")})
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    assert cells.loc[("FedAvg", "a"), "mean"] == pytest.approx(50.0)
    assert cells.loc[("FedAvg", "a"), "std"] == pytest.approx(math.sqrt(8 / 3))  # population std of 50, 52, 48
    assert cells.loc[("FedAvg", "a"), "n"] == 3
    assert cells.loc[("FedProx", "b"), "status"] == "failed" and cells.loc[("FedProx", "b"), "n"] == 2
    assert cells.loc[("FedProx", "b"), "mean"] == pytest.approx(71.5)
    assert cells.loc[("Future", "a"), "status"] == "not implemented"

    tex = (tmp_path / "out" / "table.tex").read_text()
    assert r"\textbf{\boldmath 55.00\,$\pm$\,1.63}" in tex  # FedProx best in column a, the whole cell bold
    assert r"\underline{50.00\,$\pm$\,1.63}" in tex  # FedAvg second
    assert r"71.50\,$\pm$\,0.50$^\dagger$ \\" in tex  # a failed seed is marked, and the cell is not ranked
    assert r"\textbf{\boldmath 61.00\,$\pm$\,0.82}" in tex  # so FedAvg is best in column b
    assert "Future & n/i & n/i" in tex
    assert "Scale" not in tex  # paper scale: no warning in the caption
    notes = tex.split(r"\footnotesize\raggedright", 1)[1]
    assert "n/i:" in notes and r"$^\dagger$:" in notes and r"$^\ddagger$" not in notes  # only the marks that occur

    comparison = pd.read_csv(tmp_path / "out" / "comparison.csv").set_index(["row", "column"])
    assert comparison.loc[("FedAvg", "a"), "diff"] == pytest.approx(0.0)
    assert bool(comparison.loc[("FedAvg", "a"), "within_spread"])
    assert comparison.loc[("FedAvg", "b"), "diff"] == pytest.approx(1.0)
    assert math.isnan(comparison.loc[("FedProx", "b"), "paper_mean"])
    assert comparison.loc[("FedProx", "b"), "failed"] == 1
    assert "| 71.50 ± 0.50 (1 failed) / -" in (tmp_path / "out" / "comparison.md").read_text()
    # rank agreement: column a orders FedAvg < FedProx as the paper does; column b has one pair
    assert comparison.loc[("FedAvg", "a"), "kendall_tau"] == pytest.approx(1.0)
    assert comparison.loc[("FedProx", "a"), "rank_ours"] == 1 and comparison.loc[("FedAvg", "a"), "rank_paper"] == 2
    assert math.isnan(comparison.loc[("FedAvg", "b"), "kendall_tau"])
    assert "| *Kendall τ* | +1.00 (2 methods) | - |" in (tmp_path / "out" / "comparison.md").read_text()
    page = (tmp_path / "out" / "comparison.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<link" not in page and "<script" not in page
    assert 'style="color:#1a7f37;font-weight:bold" title="within two standard deviations">✓' in page  # FedAvg a
    assert "+1.00 (2 methods)" in page
    assert (tmp_path / "out" / "comparison.png").stat().st_size > 0
    provenance = (tmp_path / "out" / "provenance.yaml").read_text()
    assert "gpu_hours: 12.0" in provenance and "runs_failed: 1" in provenance


def test_a_rounds_cell_with_a_seed_that_never_reached_takes_no_agreement_mark():
    """Our mean of a rounds cell leaves out the seeds that never reached the target: it agrees
    with the paper's number by neither mark; where no seed reached what the paper reached, ✗;
    where the paper never reached it ("_"), ✓ if none of ours did, ✗ if all did."""
    from shared.reporting.comparison import agreement

    def cell(never, n):
        return pd.Series(dict(by_definition=False, never=never, n=n))

    assert agreement(cell(0, 3), 1.0, 2.0, 30.0, "paper") is True
    assert agreement(cell(0, 3), 3.0, 2.0, 30.0, "paper") is False
    assert agreement(cell(1, 2), 0.0, 2.0, 30.0, "paper") is None  # two seeds agree, the third never reached
    assert agreement(cell(3, 0), math.nan, math.nan, 30.0, "paper") is False
    assert agreement(cell(3, 0), math.nan, math.nan, math.nan, "paper") is None  # no number of the paper's
    # the paper's "_": it never reached the target either (✓), or we reached it on every seed (✗)
    assert agreement(cell(3, 0), math.nan, math.nan, math.nan, "paper", paper_never=True) is True
    assert agreement(cell(0, 3), math.nan, math.nan, math.nan, "paper", paper_never=True) is False
    assert agreement(cell(1, 2), math.nan, math.nan, math.nan, "paper", paper_never=True) is None
    assert agreement(cell(1, 0), math.nan, math.nan, math.nan, "paper", paper_never=True) is None  # one seed
    assert agreement(cell(3, 0), math.nan, math.nan, math.nan, "small", paper_never=True) is None
    assert agreement(cell(3, 0), math.nan, math.nan, 30.0, "small") is None  # below paper scale: no mark


def test_rounds_to_reference_final_accuracy(tmp_path):
    """FedSSD's T: the first round reaching FedAvg's final accuracy at the same seed in the same
    column; FedAvg's own T is its rounds by definition ("the same accuracy as running FedAvg for
    100 rounds", printed as 100), even where its curve touched that accuracy before."""
    table = make_table(Metric("rounds_to_row", reference="FedAvg"))
    curves = {**CURVES, ("FedAvg", "b"): [[20, 62, 60], [20, 55, 61], [20, 62, 62]]}  # seeds 0, 2 touch it at 2
    write_runs(table, tmp_path / "runs", curves)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    # column a: FedAvg ends at 50, 52, 48; FedProx reaches them at rounds 2, 3, 2
    assert cells.loc[("FedAvg", "a"), "mean"] == pytest.approx(3.0) and cells.loc[("FedAvg", "a"), "n"] == 3
    assert cells.loc[("FedAvg", "b"), ["mean", "std", "n"]].tolist() == [3.0, 0.0, 3]
    # shown as the paper prints it, but neither compared with the paper's number nor ranked
    comp = pd.read_csv(tmp_path / "out" / "comparison.csv").set_index(["row", "column"])
    assert comp.loc[("FedAvg", "b"), "by_definition"] and pd.isna(comp.loc[("FedAvg", "b"), "within_spread"])
    assert math.isnan(comp.loc[("FedAvg", "a"), "rank_ours"]) and comp.loc[("FedProx", "a"), "rank_ours"] == 1
    assert "3.0 ± 0.0 (by definition)" in (tmp_path / "out" / "comparison.md").read_text()
    assert cells.loc[("FedProx", "a"), "mean"] == pytest.approx(7 / 3)
    tex = (tmp_path / "out" / "table.tex").read_text()
    assert r"\textbf{\boldmath 2.3" in tex  # fewer rounds is better


def test_a_seed_whose_reference_run_failed_has_no_target_and_is_counted_and_marked(tmp_path):
    """FedSSD's T with FedAvg diverged at seed 0 in column a: FedProx's seed 0 has no target. Its
    mean (3, 2 at seeds 1 and 2) is over two seeds, marked, counted and not ranked."""
    table = make_table(Metric("rounds_to_row", reference="FedAvg"))
    write_runs(table, tmp_path / "runs", CURVES, failed={("FedAvg", "a")})
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    assert cells.loc[("FedProx", "a"), ["mean", "n", "no_target", "never", "failed"]].tolist() == [2.5, 2, 1, 0, 0]
    tex = (tmp_path / "out" / "table.tex").read_text()
    assert r"FedProx & 2.5\,$\pm$\,0.5$^\dagger$ &" in tex  # marked, and not ranked in column a
    assert "or that row's run at the seed did: no target" in tex
    comparison = (tmp_path / "out" / "comparison.md").read_text()
    assert "2.5 ± 0.5 (1 without a target)" in comparison and "(k without a target): k seeds" in comparison
    ranks = pd.read_csv(tmp_path / "out" / "comparison.csv").set_index(["row", "column"])
    assert math.isnan(ranks.loc[("FedProx", "a"), "rank_ours"])  # nor ranked against the paper's order


def test_a_seed_that_never_reaches_the_target_is_counted_and_marked(tmp_path):
    """Target 51: FedAvg reaches it on seed 1 alone (round 3), so its mean of 3.0 is over one seed:
    marked, and not ranked against FedProx, which reaches it on every seed (3, 2, 2)."""
    table = make_table(Metric("rounds_to", target=51))
    write_runs(table, tmp_path / "runs", CURVES)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    assert cells.loc[("FedAvg", "a"), ["mean", "n", "never"]].tolist() == [3.0, 1, 2]
    tex = (tmp_path / "out" / "table.tex").read_text()
    assert r"FedAvg & 3.0$^{*2}$ &" in tex and "k seeds never reached the target" in tex
    assert r"\textbf{\boldmath 2.3\,$\pm$\,0.5}" in tex  # FedProx, the only cell ranked in column a
    assert "3.0 (2 never reached)" in (tmp_path / "out" / "comparison.md").read_text()


def test_a_target_never_reached_ranks_last_in_the_rank_agreement(tmp_path):
    """Target 53: no seed of FedAvg reaches it in column a ('--'), so it ranks after FedProx (3.0);
    the paper's '_' (FedProx, column b) ranks last too, so both columns compare two methods."""
    table = make_table(Metric("rounds_to", target=53))
    write_runs(table, tmp_path / "runs", CURVES)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    tex = (tmp_path / "out" / "table.tex").read_text()
    assert "FedAvg & --" in tex and "--: the target accuracy was not reached." in tex
    comparison = pd.read_csv(tmp_path / "out" / "comparison.csv").set_index(["row", "column"])
    # a: FedAvg never, FedProx 3.0, against the paper's 50 and 52; b: FedAvg 2.3, FedProx 2.0, the paper's 60 and "_"
    assert comparison.loc[("FedAvg", "a"), "rank_pairs"] == 2 and comparison.loc[("FedAvg", "b"), "rank_pairs"] == 2
    assert comparison.loc[("FedAvg", "a"), "kendall_tau"] == pytest.approx(-1.0)
    assert comparison.loc[("FedAvg", "b"), "kendall_tau"] == pytest.approx(-1.0)


def test_fixed_target_and_accuracy_at_round(tmp_path):
    table = make_table(Metric("rounds_to", target=45))
    write_runs(table, tmp_path / "runs", CURVES)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    assert cells.loc[("FedAvg", "a"), "mean"] == pytest.approx((3 + 2 + 3) / 3)
    table = make_table(Metric("acc_at", round=2))
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out2")
    cells = pd.read_csv(tmp_path / "out2" / "table.csv").set_index(["row", "column"])
    assert cells.loc[("FedAvg", "b"), "mean"] == pytest.approx(163 / 3)


@pytest.mark.parametrize(
    ("scale", "read"), [("paper", [10, 20, 50, 100]), ("small", [1, 2, 5, 10]), ("smoke", [1, 1, 2, 4])]
)
def test_accuracy_at_a_round_is_read_at_its_share_of_a_reduced_scales_rounds(scale, read):
    """FedGKD Table 6 reads rounds 10, 20, 50 and 100 of 100: small's 10 rounds and smoke's 4 read
    the same shares of theirs, so that no cell is empty below the paper's scale (and says so)."""
    from shared.reporting.latex import footnote
    from shared.reporting.summary import read_at_scale, rounds_read_note
    from shared.targets.table_declarations import get_table

    table = get_table("fedgkd", "table6")
    cells = [c for c in expand(table, scale) if c.row.label == "FedAvg" and c.seed == 0]
    assert [read_at_scale(table.metric_for(c.column), table, c).round for c in cells] == read
    assert ("the same share of the run" in footnote(table, set(), scale)) == (scale != "paper")
    assert ("⌈tR/P⌉" in rounds_read_note(table, scale, "⌈tR/P⌉")) == (scale != "paper")  # comparison.md's


def test_columns_with_their_own_metric_and_transposed_layout(tmp_path):
    """FedCAD Table 1 puts acc and T(x%) side by side; FedGKD prints methods as columns."""
    table = make_table()
    table.columns = [
        Column("acc", {"partition": {"beta": 0.1}}),
        Column("T(45%)", {"partition": {"beta": 0.1}}, metric=Metric("rounds_to", target=45)),
    ]
    table.methods_as_columns = True
    curves = {(r, c): CURVES[(r, "a")] for r in ("FedAvg", "FedProx") for c in ("acc", "T(45%)")}
    write_runs(table, tmp_path / "runs", curves)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    assert cells.loc[("FedAvg", "acc"), "mean"] == pytest.approx(50.0)
    assert cells.loc[("FedAvg", "T(45%)"), "mean"] == pytest.approx((3 + 2 + 3) / 3)
    assert cells.loc[("FedProx", "T(45%)"), "mean"] == pytest.approx(2.0)
    tex = (tmp_path / "out" / "table.tex").read_text()
    header = next(line for line in tex.splitlines() if line.startswith("Setting"))
    assert header.split(" & ")[1:3] == ["FedAvg", "FedProx"]  # methods across
    t_line = next(line for line in tex.splitlines() if line.startswith("T(45"))
    assert r"\textbf{\boldmath 2.0\,$\pm$\,0.0}" in t_line  # fewer rounds is better: FedProx is best


def test_domain_metrics(tmp_path):
    table = make_table()
    table.columns = [
        Column("A", {}, metric=Metric("domain_acc", domain="amazon")),
        Column("Average", {}, metric=Metric("domain_avg")),
    ]
    write_runs(
        table, tmp_path / "runs", {(r, c): CURVES[(r, "a")] for r in ("FedAvg", "FedProx") for c in ("A", "Average")}
    )
    for metrics_path in (tmp_path / "runs").glob("*/metrics.json"):
        metrics = json.loads(metrics_path.read_text())
        metrics["domain_acc"] = {"amazon": 40.0, "caltech": 30.0, "dslr": 60.0, "webcam": 90.0}
        metrics_path.write_text(json.dumps(metrics))
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    assert cells.loc[("FedAvg", "A"), "mean"] == pytest.approx(40.0)
    assert cells.loc[("FedAvg", "Average"), "mean"] == pytest.approx(55.0)


def test_search_picks_the_best_point_per_setting(tmp_path, monkeypatch):
    import yaml

    from shared.reporting.tables import build_search
    from shared.targets import table_declarations
    from shared.targets.table_declarations import Search

    table = make_table()
    monkeypatch.setattr(table_declarations, "get_table", lambda paper, name: table)
    search = Search("fedssd", "search_test", "tabletest", "FedProx", {"method.mu": [0.001, 0.1]})
    grid = search.as_table()
    assert [r.method for r in grid.rows] == [{"name": "fedprox", "mu": 0.001}, {"name": "fedprox", "mu": 0.1}]
    better_in_a = {
        ("mu=0.001", "a"): CURVES[("FedAvg", "a")],
        ("mu=0.1", "a"): CURVES[("FedProx", "a")],
        ("mu=0.001", "b"): CURVES[("FedProx", "b")],
        ("mu=0.1", "b"): CURVES[("FedAvg", "b")],
    }
    write_runs(grid, tmp_path / "runs", better_in_a)
    build_search(search, "paper", tmp_path / "runs", tmp_path / "out")
    best = yaml.safe_load((tmp_path / "out" / "best.yaml").read_text())["best"]
    assert best["a"]["point"] == {"method.mu": 0.1} and best["b"]["point"] == {"method.mu": 0.001}
    assert best["a"]["mean"] == pytest.approx(55.0) and best["a"]["seeds"] == 3 and best["a"]["status"] == "ok"
    # mu=0.001 diverges at seed 0 in b: its other seeds' 71.5 does not beat mu=0.1's whole 61.0
    write_runs(grid, tmp_path / "runs", better_in_a, failed={("mu=0.001", "b")})
    build_search(search, "paper", tmp_path / "runs", tmp_path / "out")
    best = yaml.safe_load((tmp_path / "out" / "best.yaml").read_text())["best"]
    assert best["b"]["point"] == {"method.mu": 0.1} and best["b"]["mean"] == pytest.approx(61.0)


@pytest.mark.parametrize("methods", [1, 2])  # FedCSD's Figs. 3 and 4 draw FedCSD alone
def test_sweep_and_round_metric_figures(tmp_path, methods):
    """FedCSD Figs. 3 and 5 from hand-written runs: one panel per hyperparameter, and a
    method's own per-round number read from metrics.jsonl."""
    from shared.reporting.figures import build_figure
    from shared.targets.figure_declarations import Figure

    table = make_table()
    table.rows = table.rows[:methods]
    table.columns = [
        Column("μ=0.1", {"partition": {"beta": 0.1}}),
        Column("μ=1", {"partition": {"beta": 0.5}}),
        Column("τ=4", {"partition": {"beta": 5.0}}),
    ]
    curves = {(r, c.label): CURVES[(r, "a")] for r in ("FedAvg", "FedProx") for c in table.columns}
    write_runs(table, tmp_path / "runs", curves)
    for cell in expand(table, "paper"):
        lines = [json.dumps({"round": r, "mask_filter_rate": 0.5 / r}) for r in (1, 2, 3)]
        (tmp_path / "runs" / cell.run_id / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for kind, value in (("sweep", None), ("round_metric", "mask_filter_rate")):
        figure = Figure("fedssd", f"fig_{kind}", "A test figure.", kind=kind, table=table, value=value)
        build_figure(figure, "paper", tmp_path / "runs", tmp_path / kind)
        assert (tmp_path / kind / "figure.png").stat().st_size > 0
        assert (
            len(yaml.safe_load((tmp_path / kind / "provenance.yaml").read_text())["runs"]) == methods * 3 * 3
        )  # rows x columns x seeds


def three_methods():
    table = make_table()
    table.rows = [
        Row("FedAvg", {"name": "fedavg"}),
        Row("FedProx", {"name": "fedprox", "mu": 0.01}),
        Row("FedProx μ=0.1", {"name": "fedprox", "mu": 0.1}),
    ]
    table.reported = {}
    return table


def test_ties_share_their_mark_and_failed_or_suspect_cells_are_not_ranked(tmp_path):
    table = three_methods()
    curves = {
        ("FedAvg", "a"): [[10, 40, 50.001], [10, 40, 50.0], [10, 40, 50.0]],  # prints 50.00, as FedProx
        ("FedProx", "a"): [[10, 40, 50.0], [10, 40, 50.0], [10, 40, 50.0]],
        ("FedProx μ=0.1", "a"): [[10, 40, 45.0], [10, 40, 45.0], [10, 40, 45.0]],
        ("FedAvg", "b"): [[10, 40, 60.0]] * 3,
        ("FedProx", "b"): [[10, 40, 90.0]] * 3,  # the highest, but seed 0 is suspect
        ("FedProx μ=0.1", "b"): [[10, 40, 95.0]] * 3,  # higher still, but seed 0 diverged
    }
    write_runs(table, tmp_path / "runs", curves, failed={("FedProx μ=0.1", "b")}, suspect={("FedProx", "b")})
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    tex = (tmp_path / "out" / "table.tex").read_text()
    lines = {line.split(" & ")[0]: line.split(" & ")[1:] for line in tex.splitlines() if " & " in line}
    assert lines["FedAvg"][0].startswith(r"\textbf{") and lines["FedProx"][0].startswith(r"\textbf{")  # a tie
    assert lines[r"FedProx $\mu$=0.1"][0].startswith(r"\underline{")  # the next value is second
    assert lines["FedAvg"][1].startswith(r"\textbf{")  # the only cell of column b whose runs all completed
    assert lines["FedProx"][1] == r"90.00\,$\pm$\,0.00$^\ddagger$ \\"
    assert lines[r"FedProx $\mu$=0.1"][1] == r"95.00\,$\pm$\,0.00$^\dagger$ \\"
    notes = tex.split(r"\footnotesize\raggedright", 1)[1]
    assert r"$^\dagger$:" in notes and r"$^\ddagger$:" in notes and "n/i" not in notes
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    assert cells.loc[("FedProx", "b"), "status"] == "suspect" and cells.loc[("FedProx", "b"), "suspect"] == 1
    assert cells.loc[("FedProx", "b"), "failed"] == 0 and cells.loc[("FedProx", "b"), "n"] == 2


def test_rows_on_data_sets_of_their_own_are_marked_each_data_set_apart(tmp_path):
    """FedGKD Table 7: the best buffer length of CIFAR-10 and of CIFAR-100, each in bold, as the
    paper prints them; CIFAR-100's lower accuracies took no mark when one column ranked both."""
    table = make_table()
    table.rows = [
        Row(f"{data}, M={m}", {"name": "fedprox", "mu": m / 100}, config={"dataset": {"name": name}})
        for data, name in (("CIFAR-10", "cifar10"), ("CIFAR-100", "cifar100"))
        for m in (1, 3, 5)
    ]
    table.reported = {}
    finals = {"CIFAR-10": (70, 72, 71), "CIFAR-100": (40, 43, 42)}
    curves = {
        (row.label, column.label): [[10, finals[row.label.split(",")[0]][i % 3]]] * 3
        for i, row in enumerate(table.rows)
        for column in table.columns
    }
    write_runs(table, tmp_path / "runs", curves)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    lines = [line.split(" & ") for line in (tmp_path / "out" / "table.tex").read_text().splitlines() if "M=" in line]
    bold = [cells[1] for cells in lines if cells[2].startswith(r"\textbf{")]
    underlined = [cells[1] for cells in lines if cells[2].startswith(r"\underline{")]
    assert bold == ["M=3", "M=3"] and underlined == ["M=5", "M=5"], lines


def test_a_column_of_rises_prints_each_mean_against_fedavgs(tmp_path):
    """FedCSD's "59.37 (0.87)↑": the rise or fall of a mean against FedAvg's in its column."""
    table = make_table()
    table.rises = ("a",)
    write_runs(table, tmp_path / "runs", CURVES)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    tex = (tmp_path / "out" / "table.tex").read_text()
    lines = {line.split(" & ")[0]: line.split(" & ")[1:] for line in tex.splitlines() if " & " in line}
    assert lines["FedAvg"][0] == r"\underline{50.00\,$\pm$\,1.63\,(base)}"  # second best
    assert lines["FedProx"][0] == r"\textbf{\boldmath 55.00\,$\pm$\,1.63\,(5.00)$\uparrow$}"
    assert "(" not in lines["FedProx"][1] + lines["FedAvg"][1]
    assert "rise and fall against FedAvg's" in tex.split(r"\footnotesize\raggedright", 1)[1]
    rounds = make_table(Metric("rounds_to", target=50.0))
    with pytest.raises(ValueError, match="accuracy columns, not rounds"):
        dataclasses.replace(rounds, rises=("a",))
    with pytest.raises(ValueError, match="rises= names columns"):
        Table(
            **{
                **{f: getattr(table, f) for f in ("paper", "name", "caption", "base", "rows", "columns")},
                "reported": {},
                "rises": ("c",),
            }
        )


@pytest.mark.parametrize(
    "rows, corner, header",
    [
        (
            ["CIFAR-10, M=1", "CIFAR-10, M=3", "CIFAR-100, M=1", "CIFAR-100, M=3"],
            ("DataSet", "Buffer Length"),
            "DataSet & Buffer Length",
        ),
        (
            ["CIFAR-10, M=1", "CIFAR-10, M=3"],
            ("DataSet", "Buffer Length"),
            "DataSet / Buffer Length",
        ),  # one group: no group column
        (["KL", "MSE"], ("Loss Type",), "Loss Type"),
        (["KL", "MSE"], (), "Method"),
        (
            ["CIFAR-10, M=1", "CIFAR-10, M=3", "CIFAR-100, M=1", "CIFAR-100, M=3"],
            ("Setting",),
            r"\multicolumn{2}{l}{Setting}",
        ),
    ],
)
def test_the_label_columns_take_the_papers_header(tmp_path, rows, corner, header):
    """FedGKD Table 7 heads its label columns "DataSet" and "Buffer Length", FedSSD Table III
    "Loss Type", FedCAD's "Algorithm"."""
    table = make_table()
    table.rows = [Row(label, {"name": "fedprox", "mu": (i + 1) / 100}) for i, label in enumerate(rows)]
    table.reported, table.corner = {}, corner
    write_runs(table, tmp_path / "runs", {(r, c.label): CURVES[("FedAvg", "a")] for r in rows for c in table.columns})
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    tex = (tmp_path / "out" / "table.tex").read_text()
    assert f"\n{header} & a & b \\\\\n" in tex


def test_escape_text_fields():
    from shared.reporting.latex import escape

    assert escape("5% of α=0.1, β = 0.5") == r"5\% of $\alpha$=0.1, $\beta$ = 0.5"
    assert escape("M1 (δ̂, M)") == r"M1 ($\hat{\delta}$, M)"
    assert escape("a_b & c#d {e} ~ ^ \\") == r"a\_b \& c\#d \{e\} \textasciitilde{} \textasciicircum{} \textbackslash{}"
    assert escape("μτ ± Δ") == r"$\mu\tau$ $\pm$ $\Delta$"
    assert escape("café – x") == r"caf\'{e} -- x"
    assert escape("FedAvg").isascii() and escape("αβγδ̂").isascii()


def test_grouped_headers_and_rows(tmp_path):
    """Columns sharing a dataset get a spanning header over their settings (FedSSD Table I);
    rows sharing a dataset print it once beside their settings (FedGKD Table 7)."""
    from shared.reporting.latex import latex_table
    from shared.reporting.summary import summarize_cells

    table = make_table()
    table.columns = [
        Column("CIFAR10 acc", {}, r"CIFAR10 acc $\uparrow$"),
        Column("CIFAR10 T(45%)", {}),
        Column("CIFAR100 acc", {}),
        Column("CIFAR100 T(45%)", {}),
    ]
    table.rows = [
        Row("CIFAR-10, M=1", {"name": "fedavg"}),
        Row("CIFAR-10, M=3", {"name": "fedavg"}),
        Row("CIFAR-100, M=1", {"name": "fedavg"}),
        Row("CIFAR-100, M=3", {"name": "fedavg"}),
    ]
    table.reported = {}
    tex = latex_table(table, summarize_cells(table, pd.DataFrame()), "paper")
    assert r"\multicolumn{2}{c}{CIFAR10} & \multicolumn{2}{c}{CIFAR100}" in tex
    assert r"\cmidrule(lr){3-4}\cmidrule(lr){5-6}" in tex
    assert r"\multicolumn{2}{l}{Method} & acc $\uparrow$ & T(45\%) & acc & T(45\%) \\" in tex
    assert "CIFAR-10 & M=1 &" in tex and "\n & M=3 &" in tex and "CIFAR-100 & M=1 &" in tex


@pytest.mark.parametrize(
    "labels, under",
    [
        (["A", "C", "Average"], "Method & A & C & Average"),
        (["round 10", "round 20", "round 50"], "Method & 10 & 20 & 50"),
        (["CIFAR10 acc", "CIFAR100 acc", "CIFAR100 T"], "Method & CIFAR10 acc & CIFAR100 acc & CIFAR100 T"),
    ],
)
def test_the_papers_span_heads_every_value_column(labels, under):
    """FedCSD Table II's "Office-Caltech-10" over A, C, D, W, Average; FedGKD Table 6's "Test
    Accuracy at different communication round" over 10, 20, 50, 100 (in place of "round")."""
    from shared.reporting.latex import latex_table
    from shared.reporting.summary import summarize_cells

    table = make_table()
    table.columns = [Column(label, {}) for label in labels]
    table.reported, table.span = {}, "Office-Caltech-10"
    tex = latex_table(table, summarize_cells(table, pd.DataFrame()), "paper")
    assert f"\n & \\multicolumn{{3}}{{c}}{{Office-Caltech-10}} \\\\\n\\cmidrule(lr){{2-4}}\n{under} \\\\" in tex
    assert tex.count(r"\multicolumn") == 1


def test_an_ablations_components_are_ticked_beside_its_rows():
    """FedCSD Table III: δ̂, M and TMA, ticked where a variant keeps them, crossed where it drops
    them, "-" beside FedAvg, which is no variant of FedCSD; its variants labelled as the paper
    prints them (M_1, M_2, M_3)."""
    from shared.reporting.latex import latex_table
    from shared.reporting.summary import summarize_cells

    table = make_table()
    table.rows = [
        Row("FedAvg", {"name": "fedavg"}),
        Row("Base", {"name": "fedprox", "mu": 0.1}, components=()),
        Row("M1 (δ̂, M)", {"name": "fedprox", "mu": 0.2}, components=("δ̂", "M")),
        Row("M2 (δ̂)", {"name": "fedprox", "mu": 0.3}, components=("δ̂",), latex=r"$\mathcal{M}_2$"),
    ]
    table.reported, table.components = {}, ("δ̂", "M")
    tex = latex_table(table, summarize_cells(table, pd.DataFrame()), "paper")
    assert r"\begin{tabular}{lcccc}" in tex
    assert "\nMethod & $\\hat{\\delta}$ & M & a & b \\\\\n" in tex
    assert "\nFedAvg & - & - & " in tex and "\nBase & $\\times$ & $\\times$ & " in tex
    assert "\nM1 ($\\hat{\\delta}$, M) & $\\surd$ & $\\surd$ & " in tex
    assert "\n$\\mathcal{M}_2$ & $\\surd$ & $\\times$ & " in tex  # the paper's label, where the row gives it
    assert "the variant keeps, drops the component" in tex  # the footnote says what the marks mean


@pytest.mark.parametrize(
    "changes, why",
    [
        ({"components": ("δ̂",), "rows": [Row("M1", {"name": "fedavg"}, components=("M",))]}, "lacks"),
        ({"components": ("δ̂",), "methods_as_columns": True}, "methods as rows"),
        ({"span": "Office-Caltech-10", "methods_as_columns": True}, "methods as rows"),
    ],
)
def test_components_are_checked_where_the_table_is_declared(changes, why):
    table = make_table()
    with pytest.raises(ValueError, match=why):
        Table(**{**{f.name: getattr(table, f.name) for f in dataclasses.fields(table)}, "reported": {}, **changes})


def test_kendall_tau_matches_scipys_tau_b():
    from shared.reporting.comparison import kendall_tau

    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9128709291752769)  # scipy.stats.kendalltau
    assert math.isnan(kendall_tau([1], [2])) and math.isnan(kendall_tau([1, 1], [1, 2]))


def test_reporting_imports_no_training_code():
    """shared.reporting.tables and shared.reporting.figures load no part of the training loop, and neither imports
    the other's module back (no cycle)."""
    import subprocess
    import sys

    training = ("shared.training.trainer", "shared.data.federation", "shared.methods.fedavg", "shared.training.batched")
    code = (
        f"import sys, shared.reporting.tables, shared.reporting.summary, shared.reporting.latex, "
        f"shared.reporting.comparison, shared.reporting.figures; bad = [m for m in {training!r} if m in sys.modules]; "
        "print(bad); sys.exit(bool(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    for module in ("shared/reporting/figures.py", "shared/runs/metrics.py", "shared/runs/provenance.py"):
        source = Path(module).read_text()
        assert "shared.reporting.tables" not in source and "shared.training.trainer" not in source, module


def test_a_table_from_several_commits_says_so_in_its_provenance(tmp_path):
    table = make_table()
    write_runs(table, tmp_path / "runs", CURVES)
    for i, path in enumerate(sorted((tmp_path / "runs").glob("*/metrics.json"))):
        metrics = json.loads(path.read_text())
        metrics["environment"] = {"git_commit": "abc123" if i else "def456", "git_dirty": i == 1}
        path.write_text(json.dumps(metrics))
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    provenance = yaml.safe_load((tmp_path / "out" / "provenance.yaml").read_text())
    assert provenance["mixed_commits"] is True
    assert provenance["run_commits"] == ["abc123", "abc123-dirty", "def456"]

    write_runs(table, tmp_path / "same", CURVES)  # no environment recorded: one "unknown" commit
    build_table(table, "paper", tmp_path / "same", tmp_path / "out2")
    provenance = yaml.safe_load((tmp_path / "out2" / "provenance.yaml").read_text())
    assert provenance["mixed_commits"] is False and provenance["run_commits"] == ["unknown"]


def test_cells_at_chance_are_marked_in_the_table_and_comparison(tmp_path):
    """Synthetic data has 10 classes: 10% is chance; 10.4% is within the margin, 11% is not."""
    table = make_table()
    curves = {
        **CURVES,
        ("FedAvg", "a"): [[10, 10, 10], [10, 10, 10.4], [10, 10, 10.6]],
        ("FedProx", "a"): [[10, 10, 11], [10, 10, 11], [10, 10, 11]],
    }
    write_runs(table, tmp_path / "runs", curves)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    assert cells.loc[("FedAvg", "a"), "at_chance"]
    assert not cells.loc[("FedProx", "a"), "at_chance"] and not cells.loc[("FedAvg", "b"), "at_chance"]
    tex = (tmp_path / "out" / "table.tex").read_text()
    assert tex.count(r"$^\circ$") == 2  # the cell and its footnote
    assert "at chance" in tex
    markdown = (tmp_path / "out" / "comparison.md").read_text()
    fedavg = next(line for line in markdown.splitlines() if line.startswith("| FedAvg"))
    fedprox = next(line for line in markdown.splitlines() if line.startswith("| FedProx"))
    assert fedavg.count("(at chance)") == 1 and "(at chance)" not in fedprox
    assert "(at chance)" in (tmp_path / "out" / "comparison.html").read_text()
    comparison = pd.read_csv(tmp_path / "out" / "comparison.csv").set_index(["row", "column"])
    assert comparison.loc[("FedAvg", "a"), "at_chance"]


def test_cells_whose_every_seed_equals_fedavg_are_marked(tmp_path):
    """FedProx at a has FedAvg's value at every seed (the same numbers in another seed order are
    not equal), and is marked in the table and the comparison; FedAvg itself never is."""
    table = make_table()
    curves = {
        **CURVES,
        ("FedProx", "a"): CURVES["FedAvg", "a"],
        ("FedProx", "b"): [CURVES["FedAvg", "b"][i] for i in (1, 0, 2)],
    }
    write_runs(table, tmp_path / "runs", curves)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv").set_index(["row", "column"])
    assert cells["equals_fedavg"].to_dict() == {(r, c): (r, c) == ("FedProx", "a") for r, c in cells.index}
    tex = (tmp_path / "out" / "table.tex").read_text()
    assert tex.count(r"$^{=}$") == 2  # the cell and its footnote
    assert r"50.00\,$\pm$\,1.63$^{=}$" in tex
    markdown = (tmp_path / "out" / "comparison.md").read_text()
    fedprox = next(line for line in markdown.splitlines() if line.startswith("| FedProx"))
    assert fedprox.count("(= FedAvg)") == 1
    assert "(= FedAvg)" in (tmp_path / "out" / "comparison.html").read_text()
    comparison = pd.read_csv(tmp_path / "out" / "comparison.csv").set_index(["row", "column"])
    assert comparison["equals_fedavg"].sum() == 1 and comparison.loc[("FedProx", "a"), "equals_fedavg"]

    write_runs(table, tmp_path / "one_failed", curves, failed={("FedProx", "a")})  # a seed short: not equal
    build_table(table, "paper", tmp_path / "one_failed", tmp_path / "out2")
    assert not pd.read_csv(tmp_path / "out2" / "table.csv")["equals_fedavg"].any()


def test_rounds_to_target_equal_to_fedavgs_are_not_marked(tmp_path):
    """Equal round counts are common (FedCAD's T(90%) of 6 for FedAvg and FedProx alike), and
    say nothing of a term that did not act: only accuracy cells are marked."""
    table = make_table(Metric("rounds_to", target=5.0))
    write_runs(table, tmp_path / "runs", {k: [[10, 10, 10]] * 3 for k in CURVES})
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    cells = pd.read_csv(tmp_path / "out" / "table.csv")
    assert cells.set_index("row").loc["FedProx", "n"].gt(0).all() and not cells["equals_fedavg"].any()


def test_rounds_are_never_at_chance(tmp_path):
    table = make_table(Metric("rounds_to", target=5.0))
    write_runs(table, tmp_path / "runs", {k: [[10, 10, 10]] * 3 for k in CURVES})
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    assert not pd.read_csv(tmp_path / "out" / "table.csv")["at_chance"].any()
