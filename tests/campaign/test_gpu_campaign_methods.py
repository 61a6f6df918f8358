"""Every method of the campaign's targets (tests/training/test_group_step.py's CAMPAIGN_TARGETS: FedSSD
Table II, FedGKD Tables 5 and 7-9, FedCAD Tables 2-4, each distinct method, model and switch
of their rows once) trained as the campaign trains it on a GPU: a group of two runs, all
their clients in one batched step captured in a CUDA graph and replayed, against each run
trained alone, one client after another. Two rounds, so that the state a method keeps from
round to round (MOON's previous models, FedCurv's Fisher terms, FedGen's generator, FedGKD's
buffer of teachers) is in the second round's step. In float64, so that only rounding (1e-9 of
the weights, tests/training/test_gpu.py) separates the ways.

    python -m pytest -q -m gpu tests/campaign/test_gpu_campaign_methods.py

Part of the GPU session's gate (`pytest -m "gpu and gate"`): a few seconds a method. In a
session, the methods of its targets only ($FEDREPRO_GATE_TARGETS, shared/campaign/gate.py), those
it trains first first ($FEDREPRO_GATE_ORDER).
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch

from benchmarks.group_step import small_group
from shared.campaign.gate import ORDER_ENV, TARGETS_ENV
from shared.campaign.gate_cases import GATE_DATASET, in_given_order, method_cases
from shared.config.schema import run_id
from shared.training import trainer
from shared.training.batched import BatchedClients
from shared.training.group_training import run_group
from tests.training.test_gpu import history, relative_difference
from tests.training.test_group_step import cases

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.gate,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is false)"),
]


def captures(monkeypatch) -> list:
    """Each CUDA graph BatchedClients captures from now on."""
    graphs = []
    capture = BatchedClients.capture

    def counted(self):
        capture(self)
        graphs.append(self.graph)

    monkeypatch.setattr(BatchedClients, "capture", counted)
    return graphs


def gate_cases() -> dict:
    """Case id -> a run of each method: the session's targets' (the gate's), in the order the
    session trains them, else the campaign's."""
    targets = os.environ.get(TARGETS_ENV, "").split()
    if not targets:
        return cases()
    return in_given_order(method_cases(targets, GATE_DATASET), json.loads(os.environ.get(ORDER_ENV) or "[]"))


@pytest.mark.parametrize("case", list(gate_cases()))  # in training's order: a gate cut short tested those
def test_a_campaign_method_in_a_batched_captured_step_gives_the_sequential_weights(
    tmp_path, monkeypatch, float64, case
):
    cfgs = small_group(gate_cases()[case], device="cuda", cuda_graphs=True)
    graphs = captures(monkeypatch)
    together = run_group(cfgs, [tmp_path / f"group{i}" for i in range(len(cfgs))])
    assert graphs and all(isinstance(g, torch.cuda.CUDAGraph) for g in graphs)
    for i, cfg in enumerate(cfgs):
        alone_cfg = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, clients_per_step=1))
        alone = trainer.run(alone_cfg, tmp_path / f"alone{i}")
        assert together[i]["status"] == alone["status"]  # completed (or suspect alike: two tiny rounds)
        assert together[i]["run_id"] == alone["run_id"] == run_id(cfg)
        weights = [torch.load(tmp_path / f"{way}{i}" / "model.pt", map_location="cpu") for way in ("alone", "group")]
        assert next(iter(weights[1].values())).dtype == torch.float64
        assert relative_difference(*weights) < 1e-9, f"run {i}"
        for a, b in zip(history(tmp_path / f"alone{i}"), history(tmp_path / f"group{i}"), strict=True):
            assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-9)
