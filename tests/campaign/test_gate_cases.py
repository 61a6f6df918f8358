"""`campaign train --set-for CASE:KEY=VALUE` (shared/campaign/gate_cases.py): a gate case's
verdict reaches its method's runs only, in their settings and their units; a case that is not
the targets' or a key that would change run ids is refused in one line before anything is
written."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from shared.campaign import train as campaign_train
from shared.campaign.cli import main
from shared.campaign.gate import SAFEST, Verdict
from shared.campaign.gate_cases import (
    GATE_DATASET,
    cases_in_turn,
    in_given_order,
    method_cases,
    method_key,
    settings_by_method,
)
from shared.campaign.runtime import resolved
from shared.targets.copies import campaign_runs
from tests.campaign.test_campaign import put_run

TARGET = "papers/fedssd/table2"
MOON = "fedssd-table2-MOON"


def test_each_method_of_the_targets_is_one_case_named_by_its_first_row():
    cases = method_cases([TARGET, "papers/fedcad/table2"], GATE_DATASET)
    assert MOON in cases and "fedssd-table2-FedAvg" in cases and "fedcad-table2-FedAvg" not in cases
    assert len({method_key(cfg) for cfg in cases.values()}) == len(cases)
    # in the campaign's order (a gate cut short has tested the methods that train first)
    first = ["fedssd-table2-FedAvg", "fedssd-table2-FedSSD", "fedssd-table2-FedSSD (weight M)", "fedssd-table2-FedProx"]
    assert list(cases)[:4] == first and list(cases)[-1] == "fedcad-table2-FedLSD"


def test_a_session_tests_first_the_methods_it_trains_first(tmp_path, monkeypatch):
    """Every first seed of FedAvg and FedSSD finished (as the campaign's was once), a session
    trains FedProx first: its gate tests FedProx's case first, and a method none of whose runs
    is left last; the gate's own test process takes that order from the session."""
    from shared.campaign import session
    from shared.campaign.session_checks import Carried

    cases = method_cases([TARGET], GATE_DATASET)
    runs, _ = campaign_runs([TARGET], "paper", None)
    first_seeds = {rid for rid, cfg in runs.items() if cfg.seed == 0 and cfg.method["name"] in ("fedavg", "fedssd")}
    order = cases_in_turn(cases, runs, first_seeds.__contains__)
    assert order[:2] == ["fedssd-table2-FedProx", "fedssd-table2-FedCurv"] and sorted(order) == sorted(cases)
    assert order[-3:] == ["fedssd-table2-FedAvg", "fedssd-table2-FedSSD", "fedssd-table2-FedSSD (weight M)"]
    all_fedavg = {rid for rid, cfg in runs.items() if cfg.method["name"] == "fedavg"}
    assert cases_in_turn(cases, runs, all_fedavg.__contains__)[-1] == "fedssd-table2-FedAvg"
    assert cases_in_turn(cases, runs, lambda rid: False) == list(cases)  # nothing finished: the campaign's order
    assert list(in_given_order(cases, order)) == order
    assert list(in_given_order(cases, [])) == list(cases)
    assert list(in_given_order(cases, ["no such case", order[-1]]))[0] == order[-1]
    # a session: finished in the carried state, or shipped in the checkout, alike
    shipped = tmp_path / "results" / "shipped" / "runs"
    for rid in sorted(first_seeds)[::2]:
        put_run(shipped / rid, rid, "completed")
    monkeypatch.setattr(session, "REPO", tmp_path)
    lines = []
    a_session = SimpleNamespace(args=SimpleNamespace(targets=[TARGET]), log=SimpleNamespace(line=lines.append))
    carried = Carried("paper", None, frozenset(sorted(first_seeds)[1::2]))
    assert session.gate_order(a_session, carried) == order and not lines
    # the state's --first trains its cells before the rest: their methods' cases first
    first = ["rows=MOON,FedSSD", "settings=δ=0.5"]
    assert session.gate_order(a_session, Carried("paper", None, carried.finished, first))[:3] == [
        "fedssd-table2-MOON",
        "fedssd-table2-FedSSD",
        "fedssd-table2-FedProx",
    ]
    # an order that cannot be worked out is the cases' own, said in the log: never no training
    assert session.gate_order(a_session, Carried("paper", None, frozenset(), ["rows=NoSuchRow"])) == []
    assert len(lines) == 1 and "gate: its cases in their own order (CampaignError: --first rows=NoSuchRow" in lines[0]


def test_a_cases_settings_reach_its_methods_runs_only(monkeypatch):
    """A MOON case that failed its numbers (the gate's --set-for): MOON's runs train one client
    after another, each alone, recording the verdict; FedSSD's as given, in groups on CUDA."""
    import torch

    from shared.training import group_training

    monkeypatch.setattr(group_training, "resolve_device", lambda name: torch.device("cuda"))  # as on a GPU machine
    runs, _ = campaign_runs([TARGET], "smoke", None)
    verdict = Verdict("passed", "the general tests", {MOON: ("numerical", "it raised AssertionError")})
    args = argparse.Namespace(device="cuda", data_root=None, clients_per_step=None, chosen=[])
    args.settings = {"trainer": {"gate": "passed"}}
    args.by_method = settings_by_method(verdict.settings_for(), [TARGET])
    trained = {rid: resolved(cfg, args) for rid, cfg in runs.items()}
    moon = {rid for rid, cfg in trained.items() if cfg.method["name"] == "moon"}
    assert moon and len(moon) < len(runs)
    for rid, cfg in trained.items():
        safest = rid in moon
        assert cfg.trainer.gate == ("numerical" if safest else "passed")
        assert (cfg.trainer.clients_per_step == 1, cfg.trainer.cuda_graphs is False) == (safest, safest), rid
    units = campaign_train.training_units(runs, args)
    assert sorted(r for u in units for r in u) == sorted(runs)
    assert all(len(unit) == 1 for unit in units if unit[0] in moon)
    assert max(len(unit) for unit in units if unit[0] not in moon) > 1


def test_a_case_whose_row_holds_an_equals_sign_or_a_colon_is_found():
    """FedGKD's Table 8 rows are "M=1", ...: the case is the known one the text starts with."""
    by_method = settings_by_method(["fedgkd-table8-M=1:trainer.cuda_graphs=false"], ["papers/fedgkd/table8"])
    (case,) = [c for c in method_cases(["papers/fedgkd/table8"], GATE_DATASET) if c == "fedgkd-table8-M=1"]
    assert by_method == {
        method_key(method_cases(["papers/fedgkd/table8"], GATE_DATASET)[case]): {"trainer": {"cuda_graphs": False}}
    }


def test_a_retry_takes_the_next_safer_setting_over_those_its_unit_trained_with():
    """A unit whose method's case had CUDA graphs off (--set-for) retries with clients one after
    another; one that trained with the safest settings already is left out at once."""
    from shared.campaign.session import safer

    graphs_off, alone = SAFEST
    assert safer(["trainer.gate=passed"], []) == ["trainer.gate=passed", graphs_off]
    assert safer(["trainer.gate=passed"], [graphs_off]) == ["trainer.gate=passed", graphs_off, alone]
    assert safer(["trainer.gate=passed"], [graphs_off, alone]) is None


@pytest.mark.parametrize(
    "set_for, message",
    [
        ("fedssd-table2-Nope:trainer.clients_per_step=1", "with CASE a gate case of papers/fedssd/table2"),
        ("trainer.clients_per_step=1", "expected CASE:KEY=VALUE"),
        (f"{MOON}trainer.clients_per_step=1", "expected CASE:KEY=VALUE"),
        (f"{MOON}:local.epochs=2", "local.epochs is not a runtime key"),
    ],
)
def test_a_set_for_that_is_no_case_or_no_runtime_key_is_refused_in_one_line(tmp_path, capsys, set_for, message):
    state = tmp_path / "state.tar.gz"
    argv = ["train", TARGET, "--scale", "smoke", "--device", "cpu", "--minutes", "1", "--state", str(state)]
    assert main([*argv, f"--set-for={set_for}", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not state.exists() and not (tmp_path / "results").exists()


def test_per_method_settings_that_train_would_refuse_never_keep_a_session_from_training():
    """A case that is none of the targets' (never expected): every run trains with the safest
    settings, recorded as machinery's, rather than none; the targets' cases go through."""
    import types

    from shared.campaign.session import verdict_settings

    lines = []
    double = types.SimpleNamespace(
        args=types.SimpleNamespace(set=["trainer.deterministic=true"], targets=[TARGET]),
        log=types.SimpleNamespace(line=lambda text, **_: lines.append(text)),
    )
    moon = Verdict("passed", "the general tests", {MOON: ("numerical", "an assertion")})
    assert verdict_settings(double, moon) == (
        ["trainer.deterministic=true", "trainer.gate=passed"],
        moon.settings_for(),
    )
    assert not lines
    stranger = Verdict("passed", "the general tests", {"fedgkd-batched-graphs": ("capture", "a capture")})
    assert verdict_settings(double, stranger) == (["trainer.deterministic=true", *SAFEST, "trainer.gate=machinery"], [])
    assert len(lines) == 1 and "every run trains with the safest" in lines[0]
