"""`campaign train --first`: the cells a user names train before the rest, the state keeps the
choice for the next session, `status` shows those cells first, and a name that matches no cell is
refused in one line before anything is written."""

from __future__ import annotations

import argparse

import pytest

from shared.campaign import train as campaign_train
from shared.campaign.cli import main
from shared.campaign.first_cells import chosen_cells
from shared.campaign.state import read_state, write_state
from shared.targets.copies import campaign_runs
from shared.targets.resolve import target_cells

TARGET = "papers/fedcad/table4"  # rows FedAvg, FedProx, FedLSD, FedCAD; settings E=1..E=50; seeds 0, 1 at smoke


def cells_named(rows, settings, seeds):
    return [
        c.run_id
        for c in target_cells(TARGET, "smoke")
        if c.row.label in rows and c.column.label in settings and c.seed in seeds
    ]


def test_the_chosen_cells_come_in_the_order_named_seeds_then_rows_then_settings():
    table2 = "papers/fedssd/table2"  # its settings stay apart at smoke scale (table4's epochs do not)
    chosen = chosen_cells(["rows=FedSSD,FedAvg", "settings=δ=0.5,#K=2", "seeds=1,0"], [table2], "smoke", None)
    assert [(c.seed, c.row, c.setting) for c in chosen] == [
        (1, "FedSSD", "δ=0.5"),
        (1, "FedSSD", "#K=2"),
        (1, "FedAvg", "δ=0.5"),
        (1, "FedAvg", "#K=2"),
        (0, "FedSSD", "δ=0.5"),
        (0, "FedSSD", "#K=2"),
        (0, "FedAvg", "δ=0.5"),
        (0, "FedAvg", "#K=2"),
    ]
    assert chosen[0].name == "FedSSD at δ=0.5, seed 1"
    assert chosen_cells(None, [TARGET], "smoke", None) == []


def test_training_units_put_the_chosen_cells_before_every_other_run():
    runs, _ = campaign_runs([TARGET], "smoke", None)
    args = argparse.Namespace(device="cpu", data_root=None, clients_per_step=1, settings={})
    args.chosen = chosen_cells(["rows=FedLSD", "settings=E=10", "seeds=0"], [TARGET], "smoke", None)
    units = campaign_train.training_units(runs, args)
    assert units[0] == cells_named({"FedLSD"}, {"E=10"}, {0})
    assert sorted(r for u in units for r in u) == sorted(runs)  # every run once, the chosen ones first
    args.chosen = []
    assert campaign_train.training_units(runs, args)[0] != units[0]  # the usual order starts elsewhere


@pytest.mark.parametrize(
    "first, message",
    [
        (["rows=FedAvgg"], "--first rows=FedAvgg: no such row in papers/fedcad/table4 at scale smoke; valid: FedAvg,"),
        (["settings=Dir(0.5)"], "no such setting in papers/fedcad/table4 at scale smoke; valid: E=1, E=10, E=20, E=50"),
        (["seeds=2"], "--first seeds=2: no such seed"),
        (["methods=FedAvg"], "expected seeds|rows|settings=NAME[,NAME...]"),
        (["rows="], "names no row"),
    ],
)
def test_a_name_that_matches_no_cell_is_refused_in_one_line_before_anything_is_written(
    tmp_path, capsys, first, message
):
    state = tmp_path / "state.tar.gz"
    argv = ["train", TARGET, "--scale", "smoke", "--device", "cpu", "--minutes", "1", "--state", str(state)]
    argv += [f"--first={value}" for value in first] + ["--root", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not state.exists() and not (tmp_path / "results").exists()


def test_the_state_keeps_the_choice_and_status_shows_those_cells_first(tmp_path, capsys):
    state = tmp_path / "state.tar.gz"
    first = ["rows=FedProx", "settings=E=50", "seeds=0"]
    args = argparse.Namespace(
        state=state,
        state_targets=[TARGET],
        scale="smoke",
        copy_spec=None,
        ledger=frozenset(),
        carried_rounds=None,
        first=first,
        part_mib=None,
        max_parts=None,
        root=tmp_path,
    )
    campaign_train.save(args, tmp_path / "results" / "runs")
    assert read_state(state)[0]["first"] == first

    assert main(["status", TARGET, "--state", str(state), "--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (rid,) = cells_named({"FedProx"}, {"E=50"}, {0})
    assert lines[0] == f"first: FedProx at E=50, seed 0: not started (run {rid})"
    assert lines[1].startswith(f"{TARGET}: 0 finished")


def test_a_state_whose_choice_is_not_text_is_refused_in_one_line(tmp_path, capsys):
    state = tmp_path / "state.tar.gz"
    write_state(state, [], {"targets": [TARGET], "scale": "smoke", "copy": None, "first": [["rows=FedAvg"]]})
    assert main(["status", TARGET, "--state", str(state), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "its manifest first holds a value that is not printable text" in err and err.count("\n") == 1


def test_the_safest_settings_train_no_group_in_a_batched_step(monkeypatch):
    """On CUDA a group's runs share a batched step at any trainer.clients_per_step; a GPU session's
    safest settings (its gate failed: clients one after another) must train none that way."""
    import torch

    from shared.campaign.gate import SAFEST
    from shared.targets.runtime_settings import parse_settings
    from shared.training import group_training

    monkeypatch.setattr(group_training, "resolve_device", lambda name: torch.device("cuda"))  # as on a GPU machine
    runs, _ = campaign_runs(["papers/fedcad/table2"], "smoke", None)  # a group: one row's settings
    args = argparse.Namespace(device="cuda", data_root=None, clients_per_step=None, settings={}, chosen=[])
    assert max(map(len, campaign_train.training_units(runs, args))) > 1  # CUDA's default: groups
    args.settings = parse_settings(list(SAFEST))
    units = campaign_train.training_units(runs, args)
    assert {len(unit) for unit in units} == {1} and sorted(r for u in units for r in u) == sorted(runs)
    args.settings, args.clients_per_step = {}, 1
    assert {len(unit) for unit in campaign_train.training_units(runs, args)} == {1}
