"""evaluate_many: many models of one architecture tested in one vmapped pass over the test set."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from shared.data.federation import build_federation
from shared.methods.fedavg import snapshot
from shared.methods.registry import build_method
from shared.models.nets import Net
from shared.models.registry import build_model
from shared.training import evaluation
from shared.training.clients import client_trainer
from shared.training.evaluation import evaluate, evaluate_many, models_per_pass

# 80 test images of 16x16 in batches of 32: the last batch is short
SMALL = ["dataset.synthetic.image_size=16", "dataset.synthetic.test_per_class=8", "eval.batch_size=32"]


class TinyBatchNorm(nn.Module):
    """BatchNorm2d and BatchNorm1d, as AlexNet-BN has them, at a size a test can afford."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(3, 4, 3, 2),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
            nn.Linear(16, 8),
            nn.BatchNorm1d(8),
            nn.ReLU(),
        )
        self.out_dim = 8

    def forward(self, x):
        return self.layers(x)


def models_of(name: str, count: int, classes: int) -> list[Net]:
    """`count` differently initialised models; BatchNorm's running statistics made up, so
    that each model's buffers matter."""
    models = []
    for seed in range(count):
        torch.manual_seed(seed)
        model = Net(TinyBatchNorm(), 8, classes) if name == "batchnorm" else build_model(name, classes, 3, 16)
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
        models.append(model)
    return models


def by_hand(model: Net, split, federation, batch_size: int) -> dict:
    """The metrics written out plainly, one model, one batch after another."""
    model.eval()
    logits = torch.cat(
        [model(federation.augmenter.normalize(split.x[i : i + batch_size])) for i in range(0, len(split), batch_size)]
    )
    right = logits.argmax(1) == split.y
    result = {
        "acc": 100 * right.sum().item() / len(split),
        "loss": F.cross_entropy(logits, split.y, reduction="sum").item() / len(split),
        "per_class_acc": [100 * right[split.y == c].double().mean().item() for c in range(federation.num_classes)],
    }
    if split.group is not None:
        names = federation.dataset.groups
        result["domain_acc"] = {
            name: 100 * right[split.group == d].double().mean().item() for d, name in enumerate(names)
        }
    return result


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in got:
        if isinstance(want[key], dict):
            assert got[key].keys() == want[key].keys()
            assert list(got[key].values()) == pytest.approx(list(want[key].values()), rel=1e-10, abs=1e-10)
        else:
            assert got[key] == pytest.approx(want[key], rel=1e-10, abs=1e-10)


@pytest.fixture
def vmapped_on_cpu(monkeypatch):
    """Models with normalisation layers through the vmapped pass on the CPU too, where
    evaluate_many would take them one at a time (the path a GPU takes)."""
    monkeypatch.setattr(evaluation, "ALONE_ON_CPU", ())


def test_on_a_cpu_models_with_normalisation_layers_go_one_at_a_time(tiny_cfg):
    cfg = tiny_cfg(*SMALL)
    federation = build_federation(cfg, torch.device("cpu"))
    for name, alone in (("fedavg_cnn", False), ("resnet8", True), ("batchnorm", True)):
        model = models_of(name, 1, federation.num_classes)[0]
        assert (models_per_pass(model, 4, federation.test, snapshot(model), cfg) == 1) == alone


@pytest.mark.parametrize("name", ["fedavg_cnn", "resnet8", "batchnorm"])
def test_many_models_in_one_pass_give_each_model_its_own_metrics_in_float64(tiny_cfg, float64, vmapped_on_cpu, name):
    cfg = tiny_cfg(*SMALL)
    federation = build_federation(cfg, torch.device("cpu"))
    models = models_of(name, 3, federation.num_classes)
    template = copy.deepcopy(models[0]).train()
    before = snapshot(template)
    results = evaluate_many(template, [snapshot(m) for m in models], federation.test, federation, cfg)
    assert len(results) == 3
    for model, result in zip(models, results):
        assert_same(result, by_hand(model, federation.test, federation, cfg.eval.batch_size))
        assert_same(evaluate(model, federation.test, federation, cfg), result)
    assert len({r["loss"] for r in results}) == 3  # the models differ, so a mix-up would show
    assert template.training and all(torch.equal(before[k], v) for k, v in template.state_dict().items())


def test_models_and_inputs_in_channels_last_layout(tiny_cfg, float64, vmapped_on_cpu):
    """trainer.channels_last: vmap cannot query that layout; ResNet-8's 1x1 shortcut kernels
    look channels_last even when stacked contiguously."""
    cfg = tiny_cfg(*SMALL, "trainer.channels_last=true")
    federation = build_federation(cfg, torch.device("cpu"))
    models = [m.to(memory_format=torch.channels_last) for m in models_of("resnet8", 2, federation.num_classes)]
    results = evaluate_many(models[0], [snapshot(m) for m in models], federation.test, federation, cfg)
    for model, result in zip(models, results):
        assert_same(result, by_hand(model, federation.test, federation, cfg.eval.batch_size))


def test_accuracies_are_the_counts_in_float64(tiny_cfg):
    """An accuracy is its count of right answers over the split, in float64, as Python computes
    100 * 3 / 70, per class too, whatever the tally's dtype (float32 made 68.49 read
    68.48999786376953)."""
    cfg = tiny_cfg(*SMALL, "dataset.synthetic.test_per_class=7")
    federation = build_federation(cfg, torch.device("cpu"))
    tally = evaluation.Tally(2, federation.test, federation)
    assert tally.correct.dtype == torch.float32
    tally.correct[0, :3] = torch.tensor([1.0, 1.0, 1.0])
    tally.correct[1, :2] = torch.tensor([6.0, 1.0])
    results = tally.results()
    n, per_class = len(federation.test), tally.total[0].item()
    assert [r["acc"] for r in results] == [100 * 3 / n, 100 * 7 / n]
    assert results[1]["per_class_acc"][0] == 100 * 6 / per_class


def test_accuracy_per_domain_of_many_models(tiny_cfg, float64):
    cfg = tiny_cfg(*SMALL, "dataset.synthetic.domains=[red,green,blue]")
    federation = build_federation(cfg, torch.device("cpu"))
    models = models_of("fedavg_cnn", 2, federation.num_classes)
    results = evaluate_many(models[0], [snapshot(m) for m in models], federation.test, federation, cfg)
    for model, result in zip(models, results):
        assert list(result["domain_acc"]) == ["red", "green", "blue"]
        assert_same(result, by_hand(model, federation.test, federation, cfg.eval.batch_size))


def test_passes_keep_models_times_batch_under_the_bound_and_give_the_same_metrics(tiny_cfg, float64, monkeypatch):
    cfg = tiny_cfg(*SMALL)
    federation = build_federation(cfg, torch.device("cpu"))
    models = models_of("fedavg_cnn", 5, federation.num_classes)
    states = [snapshot(m) for m in models]
    in_one_pass = evaluate_many(models[0], states, federation.test, federation, cfg)
    one_sample = federation.test.x[0].numel()
    monkeypatch.setattr(evaluation, "PASS_INPUT_VALUES", 2 * cfg.eval.batch_size * one_sample)  # room for 2 models
    assert models_per_pass(models[0], 5, federation.test, states[0], cfg) == 2  # 3 passes: 2, 2, 1
    monkeypatch.setattr(evaluation, "PASS_INPUT_VALUES", 3 * cfg.eval.batch_size * one_sample)
    assert models_per_pass(models[0], 5, federation.test, states[0], cfg) == 3  # 2 passes: 3, 2
    assert models_per_pass(models[0], 6, federation.test, states[0], cfg) == 3
    for got, want in zip(evaluate_many(models[0], states, federation.test, federation, cfg), in_one_pass):
        assert_same(got, want)
    monkeypatch.setattr(evaluation, "PASS_STATE_BYTES", 1)  # no room: one model at a time, as evaluate does
    assert models_per_pass(models[0], 5, federation.test, states[0], cfg) == 1


def test_a_pass_dispatches_as_many_operators_for_eight_models_as_for_two(tiny_cfg):
    """What makes it pay on a GPU: the kernels launched per test batch do not grow with the models."""
    cfg = tiny_cfg(*SMALL)
    federation = build_federation(cfg, torch.device("cpu"))
    models = models_of("fedavg_cnn", 8, federation.num_classes)

    def operators(states) -> int:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            evaluate_many(models[0], states, federation.test, federation, cfg)
        return sum(1 for event in profile.events() if event.name.startswith("aten::"))

    states = [snapshot(m) for m in models]
    two, eight = operators(states[:2]), operators(states)
    assert eight <= 1.1 * two, (two, eight)
    assert operators(states[:1]) * 8 > 2 * eight  # one model at a time would be 4 times as many


def test_autocast_applies_to_the_vmapped_pass(tiny_cfg):
    cfg, amp = tiny_cfg(*SMALL), tiny_cfg(*SMALL, "trainer.amp=true")
    federation = build_federation(cfg, torch.device("cpu"))
    models = models_of("fedavg_cnn", 2, federation.num_classes)
    states = [snapshot(m) for m in models]
    exact = evaluate_many(models[0], states, federation.test, federation, cfg)
    in_bf16 = evaluate_many(models[0], states, federation.test, federation, amp)
    for model, fp32, bf16 in zip(models, exact, in_bf16):
        assert bf16["loss"] != fp32["loss"]  # bf16's rounding shows, so autocast was on
        assert bf16["loss"] == pytest.approx(fp32["loss"], rel=2e-2)
        assert bf16["loss"] == pytest.approx(evaluate(model, federation.test, federation, amp)["loss"], rel=2e-2)


@pytest.mark.parametrize(
    "way, kind",
    [([], "OneAfterAnother"), (["trainer.client_threads=2"], "InThreads"), (["trainer.clients_per_step=2"], "Batched")],
)
def test_each_way_of_training_clients_tests_every_local_model(tiny_cfg, way, kind):
    cfg = tiny_cfg(*SMALL, "dataset.synthetic.train_per_class=20", *way)
    federation = build_federation(cfg, torch.device("cpu"))
    torch.manual_seed(0)
    global_model = build_model("fedavg_cnn", federation.num_classes, 3, 16)
    method = build_method(cfg, federation)
    method.prepare_round(0, global_model)
    clients = federation.clients[:3]
    local_model = copy.deepcopy(global_model)
    ways = client_trainer(method, local_model, federation, cfg)
    assert type(ways).__name__ == kind
    results = ways.train(clients, global_model, 0, test_local=True)
    for result in results:
        local_model.load_state_dict(result.update.state)
        assert result.local_acc == pytest.approx(
            evaluate(local_model, federation.test, federation, cfg)["acc"], abs=1e-9
        )
    assert len({result.local_acc for result in results}) > 1  # each its own model's accuracy
    assert all(result.local_acc is None for result in ways.train(clients, global_model, 0, test_local=False))
