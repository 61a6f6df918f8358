"""The batched step on a model with BatchNorm against the sequential trainer (float64, CPU): each
lane normalises by its own batch's statistics and keeps its own running statistics."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from shared.config.schema import run_id
from shared.data.federation import build_federation
from shared.methods.registry import build_method
from shared.models.nets import Bottleneck
from shared.models.registry import MODELS, ImageModel, build_model
from shared.training import batched, trainer
from shared.training.batched import BatchedClients, Lane, lanes_that_fit
from shared.training.clients import train_client, unbatchable_reason
from shared.training.group_training import run_group
from tests.training.test_group_training import assert_same_run

# Clients of different sizes (Dirichlet), batches that do not divide them, two epochs: clients
# take short last batches of different sizes, and those with fewer steps wait while others train.
ROUND = [
    "model.name=tiny_bn",
    "dataset.synthetic.image_size=8",
    "dataset.synthetic.train_per_class=24",
    "partition.beta=0.5",
    "local.epochs=2",
    "local.batch_size=16",
    "local.momentum=0.9",
    "local.weight_decay=5e-4",
    "local.grad_clip=5",
]
METHODS = {
    "fedavg": [],
    "fedgkd": [],
    "fedssd": ["aux.per_class=5"],
    "moon": ["model.projection_dim=8"],
    "fedgen": ["method.hidden=16", "method.noise_dim=4"],
}


class TinyBN(nn.Module):
    """ResNet-50's and AlexNet-BN's layers at a size float64 trains in milliseconds: a stem with
    BatchNorm2d, one bottleneck block (BatchNorm2d in the block and its shortcut), and a hidden
    layer with BatchNorm1d."""

    def __init__(self, in_channels: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.block = Bottleneck(8, 4, stride=2)
        self.fc = nn.Sequential(nn.Linear(16, 12), nn.BatchNorm1d(12), nn.ReLU())
        self.out_dim = 12

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.block(self.stem(x)), 1).flatten(1))


@pytest.fixture(autouse=True)
def tiny_bn_model(monkeypatch):
    monkeypatch.setitem(MODELS, "tiny_bn", ImageModel(lambda channels, side: TinyBN(channels), 1))


def one_round_both_ways(cfg, seed_previous: bool):
    """Every client's update after one round from the same global model, trained one after
    another and all in one batched step, each way with a method of its own. `seed_previous`:
    give half of the clients a previous local model (MOON) whose running statistics differ."""
    federation = build_federation(cfg, torch.device("cpu"))
    torch.manual_seed(0)
    global_model = build_model(
        cfg.model.name, federation.num_classes, 3, federation.input_shape[-1], cfg.model.projection_dim
    )
    clients = federation.clients
    sizes = [c.epoch_length(cfg.local.batch_size) for c in clients]
    assert len({c.num_batches(cfg.local.batch_size) for c in clients}) > 1  # some clients wait for others
    assert len({n % cfg.local.batch_size for n in sizes} - {0}) > 1  # short last batches of several sizes

    def method_for_round():
        torch.manual_seed(1)  # FedGen's generator: the same initial weights both ways
        method = build_method(cfg, federation)
        method.prepare_round(0, global_model)
        if cfg.method["name"] == "fedgen":
            method.trained = True  # its generated samples (step_inputs) in play from this round
        if seed_previous:
            for client in clients[::2]:
                method.previous[client.id] = {
                    k: v + 0.1 * (client.id + 1) if v.is_floating_point() else v + 3
                    for k, v in global_model.state_dict().items()
                }
        return method

    method = method_for_round()
    sequential = [train_client(method, client, copy.deepcopy(global_model), cfg, 0) for client in clients]
    method = method_for_round()
    together = BatchedClients(copy.deepcopy(global_model), federation, cfg, lanes=len(clients))
    return global_model, sequential, together.train([Lane(method, client, cfg, 0, global_model) for client in clients])


@pytest.mark.parametrize("method", METHODS)
def test_batched_round_with_batchnorm_gives_the_sequential_weights_and_running_statistics(tiny_cfg, float64, method):
    cfg = tiny_cfg(*ROUND, f"method={method}", *METHODS[method])
    global_model, sequential, together = one_round_both_ways(cfg, seed_previous=method == "moon")
    running = [k for k in global_model.state_dict() if "running_" in k or "num_batches_tracked" in k]
    assert len(running) == 3 * 6  # six BatchNorm layers
    for seq, bat in zip(sequential, together, strict=True):
        assert (seq.client, seq.num_samples, seq.num_steps) == (bat.client, bat.num_samples, bat.num_steps)
        assert seq.train_loss == pytest.approx(bat.train_loss, abs=1e-10)
        assert list(seq.state) == list(bat.state)  # a state dict's keys, buffers included, in its order
        assert max((seq.state[k] - bat.state[k]).abs().max().item() for k in seq.state) < 1e-10
        assert all(torch.equal(seq.state[k], bat.state[k]) for k in seq.state if k.endswith("num_batches_tracked"))
        assert bat.state["backbone.fc.1.num_batches_tracked"].item() == bat.num_steps
    # the running statistics moved, by different amounts for different clients
    key = "backbone.block.bn3.running_var"
    assert not torch.equal(together[0].state[key], global_model.state_dict()[key])
    assert not torch.equal(together[0].state[key], together[1].state[key])


def test_lanes_of_a_batchnorm_model_that_take_no_step_keep_weights_momentum_and_running_statistics(tiny_cfg):
    """A step with one lane at a full batch, one at a short batch and one without a batch: the
    last is left exactly as it was, whatever its (stale) batch holds."""
    cfg = tiny_cfg(*ROUND, "method=fedavg")
    federation = build_federation(cfg, torch.device("cpu"))
    model = build_model("tiny_bn", federation.num_classes, 3, 8)
    clients = BatchedClients(model, federation, cfg, lanes=3)
    method = build_method(cfg, federation)
    lanes = [Lane(method, federation.clients[0], cfg, 0, model)] * 3
    clients.load_globals(lanes)
    clients.loss.use(method, clients.start_clients(lanes)[0])
    clients.optimizer.reset()
    clients.x.normal_()
    clients.y.random_(federation.num_classes)
    for sizes in ([16, 5, 0], [16, 0, 0]):
        before = {name: t[2].clone() for name, t in clients.stacks.items()}
        momentum = [m[2].clone() for m in clients.optimizer.momentum_buffers]
        clients.sizes.copy_(torch.tensor(sizes))
        clients.take_step(clients.sizes.numpy())
        assert all(torch.equal(before[name], t[2]) for name, t in clients.stacks.items())
        assert all(torch.equal(m0, m[2]) for m0, m in zip(momentum, clients.optimizer.momentum_buffers))
    tracked = clients.stacks["model.backbone.stem.1.num_batches_tracked"]
    assert tracked.tolist() == [2, 1, 0]
    mean = clients.stacks["model.backbone.stem.1.running_mean"]
    assert not torch.equal(mean[0], mean[1])  # the short batch's statistics are its own five samples'


def test_batchnorm_models_train_batched(tiny_cfg):
    """(A model with dropout still trains one client after another: tests/training/test_batched.py.)"""
    cfg = tiny_cfg(*ROUND, "trainer.clients_per_step=4")
    federation = build_federation(cfg, torch.device("cpu"))
    method = build_method(cfg, federation)
    assert unbatchable_reason(method, build_model("tiny_bn", federation.num_classes, 3, 8), cfg) is None
    resnet50 = build_model("resnet50", federation.num_classes, 3, 8)
    assert unbatchable_reason(method, resnet50, cfg) is None
    assert lanes_that_fit(resnet50, 150) == 11  # a step's share of a group's lanes (a pass each)


GROUP = [
    "model.name=tiny_bn",
    "dataset.synthetic.image_size=8",
    "dataset.synthetic.train_per_class=24",
    "partition.clients=3",
    "local.batch_size=16",
    "local.momentum=0.9",
    "local.weight_decay=5e-4",
    "local.grad_clip=5",
    "eval.local=true",
    "trainer.clients_per_step=2",
]
MEMBERS = [
    ["seed=1", "partition.beta=0.5"],
    ["seed=2", "partition.beta=0.3"],
    ["seed=3", "partition.beta=1.0", "local.epochs=2"],
]


def assert_group_trains_runs_as_alone(tiny_cfg, tmp_path, method: str) -> None:
    cfgs = [tiny_cfg(*GROUP, f"method={method}", *METHODS[method], *member) for member in MEMBERS]
    summaries = run_group(cfgs, [tmp_path / f"group{i}" for i in range(3)])
    assert all(s["status"] == "completed" and s["rounds_completed"] == 2 for s in summaries)
    for i, cfg in enumerate(cfgs):
        alone = tiny_cfg(*GROUP[:-1], f"method={method}", *METHODS[method], *MEMBERS[i])
        assert run_id(alone) == run_id(cfg)
        trainer.run(alone, tmp_path / f"alone{i}")
        assert_same_run(tmp_path / f"group{i}", tmp_path / f"alone{i}")
    grouped = torch.load(tmp_path / "group0" / "model.pt")
    assert grouped["backbone.stem.1.num_batches_tracked"].item() > 0


@pytest.mark.parametrize("method", ["fedavg", "moon"])
def test_a_group_of_batchnorm_runs_trains_each_run_as_it_trains_alone(tiny_cfg, tmp_path, float64, method):
    """Two rounds, so that MOON's second round reads each client's previous model (BatchNorm
    buffers included); the global models' running statistics are their clients' averages."""
    assert_group_trains_runs_as_alone(tiny_cfg, tmp_path, method)


def test_a_group_whose_lanes_do_not_fit_one_step_trains_them_in_passes(tiny_cfg, tmp_path, float64, monkeypatch):
    """As a ResNet-50 group would on a GPU (11 lanes a step): here 2 of the 9 (run, client) lanes."""
    model = build_model("tiny_bn", 10, 3, 8)
    state_bytes = sum(t.numel() * t.element_size() for t in model.double().state_dict().values())
    monkeypatch.setattr(batched, "STEP_STATE_BYTES", 4 * state_bytes * 2)
    passes, train_pass = [], BatchedClients.train_pass

    def counted(self, lanes):
        passes.append(len(lanes))
        return train_pass(self, lanes)

    monkeypatch.setattr(BatchedClients, "train_pass", counted)
    assert_group_trains_runs_as_alone(tiny_cfg, tmp_path, "fedavg")
    assert passes == [2, 2, 2, 2, 1] * 2  # 3 runs of 3 clients, 2 rounds
