"""A campaign across sessions: its state lives in the checkout (results/campaign/state.tar.gz) between
sessions; an import ships the finished runs and writes the state anew with the checkpoints of the
runs in progress alone; a fresh clone's bundle carries that state to a GPU, and a session there or
here continues it."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import yaml

from shared.campaign.cli import main
from shared.campaign.ship import affected_tables, build_shipped_figure, build_shipped_table
from shared.campaign.state import CAMPAIGN_STATE, read_state
from shared.reporting.claims import paper_claims
from shared.reporting.claims_pages import NO_CLAIM
from shared.targets.copies import Copy, copy_part
from shared.targets.figure_declarations import get_figure
from shared.targets.scales import SMOKE_ROUNDS
from shared.targets.table_declarations import expand, get_table
from tests.campaign.test_campaign import TARGET, checkout, clock_of_rounds, finish_for_table, train

FIRST = ["--first", "rows=FedProx", "--first", "seeds=0"]


def runs_of(state, kind: str) -> set[str]:
    return {name.split("/")[1] for name in read_state(state)[1] if name.startswith(f"{kind}/")}


def test_sessions_keep_one_state_of_checkpoints_in_the_checkout_and_a_fresh_clone_carries_it_on(
    tmp_path, monkeypatch, capsys
):
    home = checkout(tmp_path / "home")
    state = home / CAMPAIGN_STATE

    # session 1: two runs finish, the third stops after its second round (the clock of test_campaign)
    budget_s = (2 * (SMOKE_ROUNDS - 1) + 1.5) * 100 + 30
    with monkeypatch.context() as patch:
        clock_of_rounds(patch)
        assert train(home, state, budget_s / 60, *FIRST) == 0
    finished, progress = runs_of(state, "finished"), runs_of(state, "progress")
    assert len(finished) == 2 and len(progress) == 1
    out = capsys.readouterr().out
    assert out.count("advanced: ") == 3 and "advanced: FedProx at E=1, seed 0 (run " in out

    # import ships the finished runs and writes the state anew: checkpoints only, the choice kept
    capsys.readouterr()
    assert main(["import", str(state), "--state", str(state), "--root", str(home)]) == 0
    assert "the checkpoints of the runs in progress" in capsys.readouterr().out
    manifest, _ = read_state(state)
    assert runs_of(state, "finished") == set() and runs_of(state, "progress") == progress
    assert manifest["first"] == ["rows=FedProx", "seeds=0"] and manifest["targets"] == [TARGET]
    assert {p.name for p in (home / "results" / "shipped" / "runs").iterdir()} >= finished

    # a fresh clone holds what git tracks: the shipped runs and the campaign's state, no results/runs
    clone = checkout(tmp_path / "clone")
    for tracked in ("results/shipped", "results/campaign"):
        shutil.copytree(home / tracked, clone / tracked)
    capsys.readouterr()
    assert main(["bundle", TARGET, "-o", str(clone / ".carry"), "--no-wheels", "--root", str(clone)]) == 0
    assert (clone / ".carry" / "state.tar.gz").read_bytes() == state.read_bytes()
    assert "carried as it is: the session skips the runs this checkout has shipped" in capsys.readouterr().out

    # session 2 in the clone continues the run in progress and trains none of the shipped ones
    capsys.readouterr()
    assert train(clone, clone / CAMPAIGN_STATE, 60) == 0
    out = capsys.readouterr().out
    assert "0 finished and 1 checkpointed runs restored" in out
    assert f"rounds 2 -> {SMOKE_ROUNDS} of {SMOKE_ROUNDS} (finished)," in out  # what the session advanced, said
    (resumed,) = progress
    assert (clone / "results" / "runs" / resumed / "metrics.json").is_file()
    assert not any((clone / "results" / "runs" / rid).exists() for rid in finished)
    assert not runs_of(clone / CAMPAIGN_STATE, "finished") & finished  # shipped runs never travel again


def test_an_import_into_a_new_campaign_state_takes_the_imported_states_campaign(tmp_path, monkeypatch):
    home = checkout(tmp_path / "home")
    returned = tmp_path / "out" / "state.tar.gz"
    with monkeypatch.context() as patch:
        clock_of_rounds(patch)
        assert train(home, returned, (SMOKE_ROUNDS - 0.5) * 100 / 60 + 0.5, *FIRST) == 0
    assert main(["import", str(returned), "--state", str(home / CAMPAIGN_STATE), "--root", str(home)]) == 0
    manifest, members = read_state(home / CAMPAIGN_STATE)
    assert manifest["targets"] == [TARGET] and manifest["scale"] == "smoke" and manifest["first"][0] == "rows=FedProx"
    assert not any(name.startswith("finished/") for name in members)


def test_a_shipped_table_of_a_few_cells_is_the_largest_finished_block_with_the_papers_numbers(tmp_path):
    """FedSSD Table II with seed 0 of FedAvg and both FedSSD readings at δ=0.5 shipped (the CPU
    campaign's first cells), and FedAvg alone at δ=0.1: a table of those three rows at δ=0.5
    (3 cells beat FedAvg's 2), marked partial, the paper's numbers beside."""
    shipped = tmp_path / "results" / "shipped"
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    first = {("FedAvg", "δ=0.5"): 64.0, ("FedSSD", "δ=0.5"): 65.0, ("FedSSD (weight M)", "δ=0.5"): 66.0}
    for cell in expand(get_table("fedssd", "table2"), "paper", {"dataset": {"copy": copy.sha256}}):
        value = {**first, ("FedAvg", "δ=0.1"): 55.0}.get((cell.row.label, cell.column.label))
        if cell.seed == 0 and value is not None:
            finish_for_table(shipped / "runs", cell.run_id, value)
    out = build_shipped_table("papers/fedssd/table2", "paper", copy, shipped)
    table = pd.read_csv(out / "table.csv")
    assert set(table.row) == {"FedAvg", "FedSSD", "FedSSD (weight M)"} and set(table.column) == {"δ=0.5"}
    partial = "partial: 3 of 8 rows, settings δ=0.5, seeds [0] of [0, 1, 2]"
    assert partial in (out / "comparison.md").read_text()
    assert r"settings $\delta$=0.5" in (out / "table.tex").read_text()
    paper = pd.read_csv(out / "comparison.csv").set_index("row").paper_mean
    assert paper["FedAvg"] == 70.49 and paper["FedSSD"] == 73.38  # the paper's numbers beside ours
    claims = (out / "claims.md").read_text()  # the claim judged on these cells, both readings
    assert claims.count("[judged on the cells this table holds: δ=0.5; against FedAvg]") == 2
    assert "**held in 1 of 1 group**" in claims


def test_a_block_with_more_seeds_outweighs_more_settings_at_one_seed(tmp_path):
    """FedAvg and FedSSD at δ=0.5 on seeds 0-2 (6 runs), FedAvg alone at the four other settings
    on seed 0: the table is the two rows at δ=0.5 over three seeds, not FedAvg's five settings
    (7 runs), which would hold no claim to judge: one method compares nothing."""
    shipped = tmp_path / "results" / "shipped"
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    for cell in expand(get_table("fedssd", "table2"), "paper", {"dataset": {"copy": copy.sha256}}):
        at_half = cell.column.label == "δ=0.5" and cell.row.label in ("FedAvg", "FedSSD")
        if at_half or (cell.row.label == "FedAvg" and cell.seed == 0):
            finish_for_table(shipped / "runs", cell.run_id, 60.0 + cell.seed)
    out = build_shipped_table("papers/fedssd/table2", "paper", copy, shipped)
    table = pd.read_csv(out / "table.csv").set_index("row")
    assert list(table.index) == ["FedAvg", "FedSSD"] and set(table.column) == {"δ=0.5"} and set(table.n) == {3}


def test_a_setting_finished_on_more_seeds_keeps_them_in_the_shipped_table(tmp_path):
    """FedAvg and FedSSD at all five settings on seed 0, and at δ=0.5 on seeds 0-2 too (the CPU
    campaign's runs): every setting is kept, δ=0.5 with its three seeds, in the table, its
    captions and the claims (within noise there, where seed 0 alone would say not held)."""
    shipped = tmp_path / "results" / "shipped"
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    at_half = {("FedAvg", 0): 67.24, ("FedAvg", 1): 68.49, ("FedAvg", 2): 68.07}
    at_half |= {("FedSSD", 0): 67.05, ("FedSSD", 1): 69.08, ("FedSSD", 2): 67.50}
    for cell in expand(get_table("fedssd", "table2"), "paper", {"dataset": {"copy": copy.sha256}}):
        if cell.column.label == "δ=0.5":
            value = at_half.get((cell.row.label, cell.seed))
        else:
            value = {"FedAvg": 60.0, "FedSSD": 61.0}.get(cell.row.label) if cell.seed == 0 else None
        if value is not None:
            finish_for_table(shipped / "runs", cell.run_id, value)
    out = build_shipped_table("papers/fedssd/table2", "paper", copy, shipped)
    table = pd.read_csv(out / "table.csv")
    assert (
        len(table) == 10
        and set(table[table.column == "δ=0.5"].n) == {3}
        and set(table[table.column != "δ=0.5"].n) == {1}
    )
    partial = "partial: 2 of 8 rows, seeds [0] ([0, 1, 2] at δ=0.5) of [0, 1, 2]"
    comparison = (out / "comparison.md").read_text()
    assert partial in comparison and "ours are mean ± std over seeds [0] ([0, 1, 2] at δ=0.5)" in comparison
    assert r"over seeds [0] ([0, 1, 2] at $\delta=0.5$)" in (out / "table.tex").read_text()
    provenance = yaml.safe_load((out / "provenance.yaml").read_text())
    assert provenance["seeds"] == [0, 1, 2] and provenance["column_seeds"] == {
        c: [0] for c in ("#K=2", "#K=5", "δ=0.1", "δ=10")
    }
    verdicts = pd.read_csv(out / "claims.csv").set_index("group").verdict
    assert verdicts["δ=0.5"] == "within noise" and verdicts["#K=2"] == "held"


def test_a_partial_tables_claim_is_judged_on_the_seeds_its_own_cells_share(tmp_path):
    """FedAvg and FedSSD at δ=0.5 on seeds 0-2, FedProx there on seed 0 (the CPU campaign's runs
    on Table I): the table holds seed 0 (the seeds all its rows have), while "FedSSD above
    FedAvg" compares two cells of three seeds each: within noise on them, not held on seed 0
    alone."""
    shipped = tmp_path / "results" / "shipped"
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    values = {("FedAvg", 0): 67.24, ("FedAvg", 1): 68.49, ("FedAvg", 2): 68.07, ("FedProx", 0): 67.20}
    values |= {("FedSSD", 0): 67.05, ("FedSSD", 1): 69.08, ("FedSSD", 2): 67.50}
    table = copy_part(get_table("fedssd", "table1"), "paper", copy)
    for cell in expand(table, "paper", {"dataset": {"copy": copy.sha256}}):
        if cell.column.label == "CIFAR10 ACC" and (cell.row.label, cell.seed) in values:
            finish_for_table(shipped / "runs", cell.run_id, values[cell.row.label, cell.seed])
    out = build_shipped_table("papers/fedssd/table1", "paper", copy, shipped)
    cells = pd.read_csv(out / "table.csv")
    assert set(cells[cells.column == "CIFAR10 ACC"].n) == {1}
    claims = pd.read_csv(out / "claims.csv", dtype={"claim": str}).set_index("claim")
    assert claims.statement["2"].startswith("FedSSD's final accuracy is above FedAvg's")
    assert (claims.verdict["2"], claims.seeds_held["2"]) == ("within noise", "1/3")


def test_a_figure_drawn_from_a_shipped_table_is_drawn_from_its_finished_part(tmp_path):
    """Table II's FedAvg runs at every setting on seed 0 and at δ=0.5 on seeds 0-2: Fig. 2 (its
    forgetting) is drawn from them, marked partial, as `import` builds it beside the table, and
    Fig. 7's curves from Table I's CIFAR-10 runs they are (the copy's part of Table I); Fig. 9's
    sweep over E, of one point, is not; a custom figure that does not say it draws any part, and
    one with a probe, wait for all their runs."""
    shipped = tmp_path / "results" / "shipped"
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    for cell in expand(get_table("fedssd", "table2"), "paper", {"dataset": {"copy": copy.sha256}}):
        if cell.row.label == "FedAvg" and (cell.seed == 0 or cell.column.label == "δ=0.5"):
            finish_for_table(shipped / "runs", cell.run_id, 60.0)
            history = [{"round": r, "global_acc": 40.0 + r, "local_acc": 30.0 + r + cell.seed} for r in (1, 2, 3)]
            (shipped / "runs" / cell.run_id / "metrics.jsonl").write_text(
                "".join(json.dumps(h) + "\n" for h in history)
            )
    manifest = {"targets": ["papers/fedssd/table2"], "scale": "paper"}
    assert {"papers/fedssd/fig2", "papers/fedssd/fig7"} <= set(affected_tables(manifest, copy, shipped))
    curves = build_shipped_figure("papers/fedssd/fig7", "paper", copy, shipped)
    assert yaml.safe_load((curves / "provenance.yaml").read_text())["partial"].startswith("partial: 1 of 8 rows")
    assert build_shipped_figure("papers/fedssd/fig9", "paper", copy, shipped) is None
    out = build_shipped_figure("papers/fedssd/fig2", "paper", copy, shipped)
    partial = "partial: 1 of 1 rows, seeds [0] ([0, 1, 2] at δ=0.5) of [0, 1, 2]"
    assert yaml.safe_load((out / "provenance.yaml").read_text())["partial"] == partial
    points = pd.read_csv(out / "figure.csv")
    assert points.groupby("setting").seed.nunique().to_dict() == {
        "#K=2": 1,
        "#K=5": 1,
        "δ=0.1": 1,
        "δ=0.5": 3,
        "δ=10": 1,
    }
    assert (out / "figure.png").stat().st_size > 0
    assert not get_figure("fedssd", "fig3").draws_partial and not get_figure("fedcsd", "fig1").draws_partial
    assert get_figure("fedssd", "fig7").draws_partial  # curves draw any settings and seeds


def test_a_shipped_run_builds_every_table_that_reads_it(tmp_path):
    """FedSSD's Table II at δ=0.1 and δ=0.5, FedAvg and FedProx on seed 0, shipped by a state of
    Table II: FedCAD's Table 2 reads the same runs (its cells resolve to their configs), so
    `import` builds it too, partial, with FedCAD's figures; a table that reads none of them
    (FedGKD's) is not built."""
    shipped = tmp_path / "results" / "shipped"
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    for cell in expand(get_table("fedssd", "table2"), "paper", {"dataset": {"copy": copy.sha256}}):
        if cell.row.label in ("FedAvg", "FedProx") and cell.seed == 0 and cell.column.label in ("δ=0.1", "δ=0.5"):
            finish_for_table(shipped / "runs", cell.run_id, 60.0 + len(cell.row.label))
    affected = affected_tables({"targets": ["papers/fedssd/table2"], "scale": "paper"}, copy, shipped)
    assert {"papers/fedcad/table2", "papers/fedcad/fig4", "papers/fedssd/table1"} <= set(affected)
    assert not [t for t in affected if "fedgkd" in t or "fedcsd" in t]
    out = build_shipped_table("papers/fedcad/table2", "paper", copy, shipped)
    table = pd.read_csv(out / "table.csv")
    assert sorted(table.row.unique()) == ["FedAvg", "FedProx"] and set(table.column) == {"δ=0.1", "δ=0.5"}
    assert yaml.safe_load((out / "provenance.yaml").read_text())["partial"].startswith("partial: 2 of 4 rows")
    # FedCAD's claims on Table 2 need its FedCAD row: none is judged yet, and the page says so
    assert [c for c in paper_claims("fedcad") if c.table == "table2"] and NO_CLAIM in (out / "claims.md").read_text()
    assert "marked where ours has two seeds or more" in (out / "comparison.md").read_text()  # one seed: no mark


def test_a_reading_short_of_a_seed_leaves_the_shipped_table_and_costs_the_papers_rows_none(tmp_path):
    """FedAvg and FedSSD finished at δ=0.5 on seeds 0-2, the weight-M reading on seeds 0 and 1:
    the table keeps all three seeds of the paper's rows and leaves the reading out until it has
    them (a reading is not the paper's and never decides which seeds its rows are judged on)."""
    shipped = tmp_path / "results" / "shipped"
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    finished = {("FedAvg", s): 67.0 + s for s in (0, 1, 2)}
    finished |= {("FedSSD", s): 66.0 + 2 * s for s in (0, 1, 2)}
    finished |= {("FedSSD (weight M)", s): 70.0 for s in (0, 1)}
    for cell in expand(get_table("fedssd", "table2"), "paper", {"dataset": {"copy": copy.sha256}}):
        value = finished.get((cell.row.label, cell.seed)) if cell.column.label == "δ=0.5" else None
        if value is not None:
            finish_for_table(shipped / "runs", cell.run_id, value)
    out = build_shipped_table("papers/fedssd/table2", "paper", copy, shipped)
    table = pd.read_csv(out / "table.csv").set_index("row")
    assert list(table.index) == ["FedAvg", "FedSSD"] and set(table.n) == {3}
    assert table["mean"].to_dict() == {"FedAvg": 68.0, "FedSSD": 68.0}
    assert "partial: 2 of 8 rows, settings δ=0.5, seeds [0, 1, 2] of [0, 1, 2]" in (out / "comparison.md").read_text()


def test_each_device_trains_a_rounds_clients_its_fastest_way_unless_told_otherwise():
    """On CUDA a round's clients in one batched step; on a CPU one after another, in threads of
    one core each; --clients-per-step and --set win; no run id moves."""
    import torch

    from shared.campaign.runtime import cpu_defaults, with_runtime
    from shared.config.schema import run_id
    from shared.targets.copies import campaign_runs

    runs, _ = campaign_runs(["papers/fedssd/table2"], "paper", None)
    rid, cfg = next(iter(runs.items()))
    on_cuda = with_runtime(cfg, "cuda", None, None)
    assert on_cuda.trainer.clients_per_step == 10 and run_id(on_cuda) == rid  # FedSSD's 10 clients a round
    assert with_runtime(cfg, "cpu", None, None).trainer.clients_per_step == 1
    assert with_runtime(cfg, "cuda", None, None, {"trainer": {"clients_per_step": 1}}).trainer.clients_per_step == 1
    threads = {"trainer": {"client_threads": torch.get_num_threads()}}
    assert cpu_defaults("cpu", None, {}) == threads
    assert cpu_defaults("cpu", 2, {}) == {} and cpu_defaults("cuda", None, {}) == {}
    assert cpu_defaults("cpu", None, {"trainer": {"client_threads": 1}}) == {"trainer": {"client_threads": 1}}
