"""A group of runs trained in one batched step against each run trained alone (float64, CPU)."""

import json
import time

import pytest
import torch

from shared.config.schema import run_id, to_dict
from shared.methods.registry import method_class
from shared.run import main
from shared.training import timed_rounds, trainer
from shared.training.clients import missing_capabilities
from shared.training.group_training import group_reason, run_group

# Three runs of one row: different seeds and Dirichlet partitions, one with two local epochs,
# so clients differ in size and runs in steps. 16x16 images keep float64 convolutions quick.
SMALL = [
    "dataset.synthetic.image_size=16",
    "dataset.synthetic.train_per_class=24",
    "partition.clients=3",
    "local.batch_size=16",
    "local.momentum=0.9",
    "local.weight_decay=5e-4",
    "local.grad_clip=5",
    "eval.local=true",
]
MEMBERS = [
    ["seed=1", "partition.beta=0.5"],
    ["seed=2", "partition.beta=0.3"],
    ["seed=3", "partition.beta=1.0", "local.epochs=2"],
]
METHODS = {
    "fedavg": [],
    "fedprox": [],
    "fedssd": ["aux.per_class=5"],
    "fedgkd": [],
    "fednova": [],
    "fedavgm": [],
    "moon": [],
    "scaffold": [],
    "fedlsd": [],
    "fedcurv": [],
    "fedntd": [],
    "fedproto": [],
    "feddistill": [],
    "fedcad": ["aux.per_class=5"],
    "fedgen": ["method.hidden=16", "method.noise_dim=4", "method.generator_steps=2"],
    "fedcsd": ["aux.per_class=5"],
}


def configs(tiny_cfg, method: str, *extra: str):
    return [tiny_cfg(*SMALL, f"method={method}", *METHODS[method], *member, *extra) for member in MEMBERS]


def weights(path) -> dict[str, torch.Tensor]:
    return torch.load(path / "model.pt")


def rows(path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(grouped, alone):
    """Equal weights and per-round metrics, up to float64 rounding."""
    a, b = weights(grouped), weights(alone)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-10
    for g, s in zip(rows(grouped), rows(alone), strict=True):
        assert g["clients"] == s["clients"]
        for key in ("train_loss", "global_loss", "global_acc", "local_acc"):
            assert g[key] == pytest.approx(s[key], abs=1e-9), key


@pytest.mark.parametrize("method", METHODS)
def test_a_group_trains_each_run_as_it_trains_alone(tiny_cfg, tmp_path, float64, method):
    cfgs = configs(tiny_cfg, method, "trainer.clients_per_step=2")
    alone_cfgs = configs(tiny_cfg, method)
    assert [run_id(c) for c in cfgs] == [run_id(c) for c in alone_cfgs]
    lacking = missing_capabilities(method_class(method), method, "trainer.clients_per_step")
    if lacking:  # until its local_loss is vmappable: refused in one line, before any training
        with pytest.raises(ValueError, match="lacks the capabilities"):
            run_group(cfgs, [tmp_path / f"group{i}" for i in range(3)])
        assert "\n" not in lacking
        return
    summaries = run_group(cfgs, [tmp_path / f"group{i}" for i in range(3)])
    assert [s["run_id"] for s in summaries] == [run_id(c) for c in cfgs]
    assert all(s["status"] == "completed" and s["rounds_completed"] == 2 for s in summaries)
    for i, cfg in enumerate(alone_cfgs):
        trainer.run(cfg, tmp_path / f"alone{i}")
        assert_same_run(tmp_path / f"group{i}", tmp_path / f"alone{i}")
    assert not torch.equal(
        weights(tmp_path / "group0")["classifier.weight"], weights(tmp_path / "group1")["classifier.weight"]
    )


def test_a_group_stopped_by_its_deadline_and_started_again_gives_the_uninterrupted_runs(tiny_cfg, tmp_path, float64):
    """Members at different rounds share a step: run 0 is one round ahead when the group starts."""
    cfgs = configs(tiny_cfg, "fedssd", "trainer.clients_per_step=2")
    outs = [tmp_path / f"group{i}" for i in range(3)]
    with pytest.raises(timed_rounds.OutOfTime):
        timed_rounds.run_timed(configs(tiny_cfg, "fedssd")[0], outs[0], time.time())
    with pytest.raises(timed_rounds.OutOfTime):
        run_group(cfgs, outs, deadline=time.time())  # run 0 finishes, runs 1 and 2 stop after round 1
    assert [len(rows(out)) for out in outs] == [2, 1, 1]
    assert (outs[0] / "metrics.json").exists() and not (outs[1] / "metrics.json").exists()
    summaries = run_group(cfgs, outs)
    assert [s["rounds_completed"] for s in summaries] == [2, 2, 2]
    for i, cfg in enumerate(configs(tiny_cfg, "fedssd")):
        trainer.run(cfg, tmp_path / f"alone{i}")
        assert_same_run(outs[i], tmp_path / f"alone{i}")


def test_runs_that_cannot_share_a_step_train_one_after_another_with_a_note(tiny_cfg, tmp_path, capsys):
    cpu_default = configs(tiny_cfg, "fedavg", "federation.rounds=1")
    assert "on a CPU" in group_reason(cpu_default)
    assert "differ in more than" in group_reason([cpu_default[0], tiny_cfg(*SMALL, "method=fedprox")])
    args = []
    for i, cfg in enumerate(cpu_default[:2]):
        args += ["--json", json.dumps(to_dict(cfg)), "--out", str(tmp_path / f"run{i}")]
    assert main(args) == 0
    assert "note: 2 runs train one after another: on a CPU" in capsys.readouterr().err
    assert all(
        json.loads((tmp_path / f"run{i}" / "metrics.json").read_text())["status"] == "completed" for i in range(2)
    )


def test_a_run_that_diverges_leaves_its_group_and_the_others_train_as_alone(tiny_cfg, tmp_path, float64, monkeypatch):
    """Run seed=2's global model turns non-finite in its first aggregation: it ends as diverged
    after round 1, tested in the same vmapped pass as the others, and the others' rounds 2 and 3
    (one step, one evaluation pass without it) equal their runs trained alone."""
    from shared.methods.fedavg import FedAvg

    aggregate = FedAvg.aggregate

    def poisoned(self, global_model, updates):
        aggregate(self, global_model, updates)
        if self.cfg.seed == 2:
            with torch.no_grad():
                next(global_model.parameters()).fill_(float("nan"))

    cfgs = configs(tiny_cfg, "fedavg", "trainer.clients_per_step=2", "federation.rounds=3")
    outs = [tmp_path / f"group{i}" for i in range(3)]
    monkeypatch.setattr(FedAvg, "aggregate", poisoned)
    summaries = run_group(cfgs, outs)
    assert summaries[1]["status"].startswith("diverged") and summaries[1]["rounds_completed"] == 1
    assert [summaries[i]["status"] for i in (0, 2)] == ["completed", "completed"]
    monkeypatch.setattr(FedAvg, "aggregate", aggregate)
    alone = configs(tiny_cfg, "fedavg", "federation.rounds=3")
    for i in (0, 2):
        trainer.run(alone[i], tmp_path / f"alone{i}")
        assert_same_run(outs[i], tmp_path / f"alone{i}")
