"""The batched trainer (trainer.clients_per_step) against the sequential one."""

import copy
import json

import pytest
import torch
import torch.nn.functional as F

from shared.campaign.run_schema import records_problem
from shared.config.schema import LocalConfig, run_id
from shared.data import federation as federation_module
from shared.data.federation import build_federation
from shared.methods.fedavg import FedAvg, frozen_copy
from shared.methods.registry import build_method
from shared.models.registry import build_model
from shared.training import batched as batched_module
from shared.training import trainer
from shared.training.batched import BatchedClients, Lane
from shared.training.clients import train_client, unbatchable_reason
from shared.training.stacked_sgd import StackedSGD

# Clients of different sizes (Dirichlet), batches that do not divide them, two epochs: clients
# run out of steps at different times and take short last batches. 16x16 images keep float64
# convolutions (no fast CPU kernels) to seconds.
ROUND = [
    "dataset.synthetic.image_size=16",
    "dataset.synthetic.train_per_class=24",
    "partition.beta=0.5",
    "local.epochs=2",
    "local.batch_size=16",
    "local.momentum=0.9",
    "local.weight_decay=5e-4",
    "local.grad_clip=5",
]


def one_round_both_ways(cfg):
    """Every client's weights after round 1 (round index 0), trained one after another and all in
    one batched step, from the same global model, each way with a method of its own (MOON: half
    of the clients with a previous local model, so that one step holds l_con's weights 0 and mu)."""
    federation = build_federation(cfg, torch.device("cpu"))
    torch.manual_seed(0)
    global_model = build_model(cfg.model.name, federation.num_classes, 3, federation.input_shape[-1])
    clients = federation.clients
    assert len({c.num_batches(cfg.local.batch_size) for c in clients}) > 1  # the test needs unequal clients

    def method_for_round():
        torch.manual_seed(1)  # FedGen's generator: the same initial weights both ways
        method = build_method(cfg, federation)
        method.prepare_round(0, global_model)
        if cfg.method["name"] == "fedgen":
            method.trained = True  # its generated samples (step_inputs, drawn between batches) in play
        if cfg.method["name"] == "moon":
            for client in clients[::2]:
                method.previous[client.id] = {
                    k: v + 0.1 * (client.id + 1) for k, v in global_model.state_dict().items()
                }
        return method

    method = method_for_round()
    sequential = [train_client(method, client, copy.deepcopy(global_model), cfg, 0) for client in clients]
    method = method_for_round()
    batched = BatchedClients(copy.deepcopy(global_model), federation, cfg, lanes=len(clients))
    return sequential, batched.train([Lane(method, client, cfg, 0, global_model) for client in clients])


def assert_same_updates(sequential, batched):
    for seq, bat in zip(sequential, batched, strict=True):
        assert (seq.client, seq.num_samples, seq.num_steps) == (bat.client, bat.num_samples, bat.num_steps)
        assert seq.train_loss == pytest.approx(bat.train_loss, abs=1e-9)
        assert seq.state.keys() == bat.state.keys()
        assert max((seq.state[k] - bat.state[k]).abs().max().item() for k in seq.state) < 1e-6
    # and training moved the weights, by different amounts for different clients
    assert not torch.equal(sequential[0].state["classifier.weight"], sequential[1].state["classifier.weight"])


@pytest.mark.parametrize(
    "method",
    [["method=fedavg"], ["method=fedssd", "aux.per_class=5"], ["method=moon"]],
    ids=["fedavg", "fedssd", "moon"],
)
def test_batched_round_gives_the_sequential_weights_in_float64(tiny_cfg, float64, method):
    assert_same_updates(*one_round_both_ways(tiny_cfg(*ROUND, *method)))


@pytest.mark.parametrize(
    "method", [["method=fedavg"], ["method=fedgen", "method.hidden=16", "method.noise_dim=4"]], ids=["fedavg", "fedgen"]
)
@pytest.mark.parametrize("window_steps", [1, 3])
def test_batches_laid_out_a_few_steps_at_a_time_give_the_sequential_weights(
    tiny_cfg, float64, monkeypatch, window_steps, method
):
    """Windows of 1 or 3 steps (WINDOW_VALUES) and augmentation in chunks of 2 batches
    (AUGMENT_CHUNK, on both sides), so that windows, chunks and epochs end at different steps
    and a lane's run of batches breaks at each of them; FedGen draws its step inputs from the
    same generator between those batches."""
    cfg = tiny_cfg(*ROUND, *method)
    batch_values = cfg.local.batch_size * 3 * 16 * 16
    monkeypatch.setattr(federation_module, "AUGMENT_CHUNK", 2 * batch_values)
    monkeypatch.setattr(batched_module, "WINDOW_VALUES", window_steps * cfg.partition.clients * batch_values)
    assert_same_updates(*one_round_both_ways(cfg))


def test_stacked_sgd_is_torch_sgd_per_client_and_leaves_inactive_clients_alone():
    torch.manual_seed(0)
    local = LocalConfig(lr=0.1, momentum=0.9, weight_decay=0.01)
    shapes = [(4, 3), (4,)]
    start = [torch.randn(3, *s) for s in shapes]  # 3 clients
    stacked = StackedSGD([p.clone() for p in start], local)
    models = [[p[c].clone().requires_grad_() for p in start] for c in range(3)]
    optimizers = [torch.optim.SGD(m, lr=0.1, momentum=0.9, weight_decay=0.01) for m in models]
    active_per_step = [[True, True, True], [True, False, True], [False, False, True], [True, True, False]]
    for active in active_per_step:
        grads = [torch.randn(3, *s) for s in shapes]
        stacked.select(tuple(active), lambda active=active: torch.tensor(active))
        stacked.step(grads)
        for c in range(3):
            if active[c]:
                for p, g in zip(models[c], grads):
                    p.grad = g[c].clone()
                optimizers[c].step()
    for c in range(3):
        for j, p in enumerate(models[c]):
            assert torch.equal(stacked.params[j][c], p.detach())
            assert torch.equal(stacked.momentum_buffers[j][c], optimizers[c].state[p]["momentum_buffer"])


def test_a_batched_run_matches_a_sequential_run_and_keeps_its_id(tiny_cfg, tmp_path):
    small = ["dataset.synthetic.image_size=16", "federation.participation=0.75"]
    sequential_cfg = tiny_cfg(*small)
    batched_cfg = tiny_cfg(*small, "trainer.clients_per_step=2")
    assert run_id(sequential_cfg) == run_id(batched_cfg)
    sequential = trainer.run(sequential_cfg, tmp_path / "sequential")
    batched = trainer.run(batched_cfg, tmp_path / "batched")
    assert batched["status"] == "completed" and batched["rounds_completed"] == 2
    assert batched["global_acc"] == pytest.approx(sequential["global_acc"], abs=2.0)  # float32 rounding
    rows = [json.loads(line) for line in (tmp_path / "batched" / "metrics.jsonl").read_text().splitlines()]
    assert all(len(r["local_accs"]) == 3 for r in rows)  # 3 clients a round, in groups of 2 and 1


@pytest.mark.parametrize("step", [[], ["trainer.clients_per_step=2"]])
def test_eval_local_per_class_records_each_local_models_accuracy_per_class(tiny_cfg, tmp_path, step):
    """eval.local=per_class: each tested local model's per-class accuracy, in the order of the
    round's clients, its accuracy their mean weighted by the test set's classes; a new run id,
    the same training; the schema that imported runs pass holds it."""
    small = ["dataset.synthetic.image_size=16", "federation.participation=0.75", *step]
    plain, per_class = tiny_cfg(*small), tiny_cfg(*small, "eval.local=per_class")
    assert run_id(tiny_cfg(*small, "eval.local=true")) == run_id(plain) != run_id(per_class)
    trainer.run(plain, tmp_path / "plain")
    trainer.run(per_class, tmp_path / "per_class")
    read = {
        name: [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        for name in ("plain", "per_class")
    }
    test_counts = torch.bincount(build_federation(plain, torch.device("cpu")).test.y).double()
    for before, record in zip(read["plain"], read["per_class"]):
        assert "local_per_class_acc" not in before
        assert record["local_accs"] == before["local_accs"] and record["clients"] == before["clients"]
        assert len(record["local_per_class_acc"]) == len(record["clients"])
        for acc, per_class_acc in zip(record["local_accs"], record["local_per_class_acc"]):
            weighted = torch.tensor(per_class_acc, dtype=torch.float64) @ test_counts / test_counts.sum()
            assert float(weighted) == pytest.approx(acc, abs=1e-4)
    assert records_problem(read["per_class"], per_class) is None
    *before, last = read["per_class"]
    lists, accs = last["local_per_class_acc"], last["local_accs"]
    forged = {
        "short of its clients": {**last, "local_per_class_acc": lists[:-1], "local_accs": accs[:-1]},
        "of the wrong length": {**last, "local_per_class_acc": [[*per_class, 50.0] for per_class in lists]},
        "outside its per-class": {**last, "local_accs": [max(per_class) + 1 for per_class in lists]},
        "not recorded": {key: value for key, value in last.items() if key != "local_per_class_acc"},
    }
    for why, record in forged.items():
        assert records_problem([*before, record], per_class), why


def test_methods_and_models_the_batched_step_cannot_take_fall_back_with_a_note(tiny_cfg, tmp_path, capsys):
    cfg = tiny_cfg(
        "method=fedcsd", "trainer.clients_per_step=4", "federation.rounds=1", "dataset.synthetic.image_size=16"
    )
    federation = build_federation(cfg, torch.device("cpu"))
    model = build_model("fedavg_cnn", 10)
    assert "lacks the capabilities per_sample_loss" in unbatchable_reason(build_method(cfg, federation), model, cfg)
    with_dropout = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    assert "dropout" in unbatchable_reason(build_method(tiny_cfg(), federation), with_dropout, cfg)
    assert trainer.run(cfg, tmp_path / "run")["status"] == "completed"
    assert "clients train one after another" in capsys.readouterr().err


def test_the_batched_step_has_a_batching_rule_for_every_op(tiny_cfg, recwarn):
    """An op without one makes vmap loop over clients and samples, one kernel each: correct, and
    hundreds of times slower on a GPU (F.kl_div was one; FedGKD distils with KL on ResNet-8)."""
    cfg = tiny_cfg(*ROUND, "method=fedgkd", "model=resnet8", "partition.clients=2", "local.epochs=1")
    federation = build_federation(cfg, torch.device("cpu"))
    model = build_model("resnet8", federation.num_classes)
    method = build_method(cfg, federation)
    method.prepare_round(0, model)
    BatchedClients(copy.deepcopy(model), federation, cfg, lanes=2).train(
        [Lane(method, c, cfg, 0, model) for c in federation.clients]
    )
    assert not [w for w in recwarn if "batching rule" in str(w.message)]


@pytest.mark.parametrize("method", [["method=fedavg"], ["method=fedssd", "aux.per_class=5"]])
def test_clients_in_threads_give_the_sequential_run_and_keep_its_id(tiny_cfg, tmp_path, method):
    """With one torch thread per client on both sides the operators are the same, so the runs
    agree bit for bit (a client's metrics in the sampled order, the final weights)."""
    small = ["dataset.synthetic.image_size=16", "federation.participation=0.75", "trainer.progress=false", *method]
    sequential_cfg, threads_cfg = tiny_cfg(*small), tiny_cfg(*small, "trainer.client_threads=2")
    assert run_id(sequential_cfg) == run_id(threads_cfg)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer.run(sequential_cfg, tmp_path / "sequential")
        threaded = trainer.run(threads_cfg, tmp_path / "threads")
        assert torch.get_num_threads() == 1  # the clients' share of the cores is undone after each round
    finally:
        torch.set_num_threads(previous)
    assert threaded["status"] == "completed" and threaded["rounds_completed"] == 2
    rows = {
        name: [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        for name in ("sequential", "threads")
    }
    for seq, thr in zip(rows["sequential"], rows["threads"]):
        assert len(thr["local_accs"]) == 3
        for key in ("clients", "train_loss", "global_acc", "global_loss", "local_accs"):
            assert thr[key] == seq[key]
    final = {name: torch.load(tmp_path / name / "model.pt") for name in ("sequential", "threads")}
    assert all(torch.equal(final["sequential"][k], final["threads"][k]) for k in final["sequential"])


def test_client_threads_fall_back_for_methods_with_per_client_state(tiny_cfg, tmp_path, capsys):
    cfg = tiny_cfg(
        "method=scaffold", "trainer.client_threads=2", "federation.rounds=1", "dataset.synthetic.image_size=16"
    )
    assert trainer.run(cfg, tmp_path / "run")["status"] == "completed"
    assert "trainer.client_threads=2 does not apply" in capsys.readouterr().err


class PerClientState(FedAvg):
    """A method whose hooks leave per-client state of every kind the batched step stacks per
    lane: a module (a frozen copy of the global model), a tensor, a float and a list of
    tensors; finish_client records what each client's trained model gives."""

    def prepare_round(self, round, global_model):
        self.anchor = frozen_copy(global_model)
        self.finished = {}

    def start_client(self, client, model):
        self.class_weight = torch.linspace(0.5, 1.5, self.federation.num_classes) * (1 + client.id)
        self.pull = 0.01 * (client.id + 1)
        self.start_params = [p.detach().clone() for p in model.parameters()]

    def local_loss(self, model, x, y, client):
        z = model(x)
        ce = (F.cross_entropy(z, y, reduction="none") * self.class_weight[y]).mean()
        distil = ((self.anchor(x) - z) ** 2).sum(1).mean()
        prox = sum(((w - w0) ** 2).sum() for w, w0 in zip(model.parameters(), self.start_params))
        return ce + self.pull * distil + 0.01 * prox

    def finish_client(self, client, model, update):
        self.finished[client.id] = (sum(p.sum() for p in model.parameters()).item(), update.num_steps)


def test_client_hooks_run_batched_with_each_clients_own_state(tiny_cfg, float64):
    cfg = tiny_cfg(*ROUND)
    federation = build_federation(cfg, torch.device("cpu"))
    torch.manual_seed(0)
    global_model = build_model(cfg.model.name, federation.num_classes, 3, federation.input_shape[-1])
    method = PerClientState(PerClientState.Params(), cfg, federation)
    method.prepare_round(0, global_model)
    sequential = [train_client(method, client, copy.deepcopy(global_model), cfg, 0) for client in federation.clients]
    finished_sequentially = method.finished
    method.prepare_round(0, global_model)
    batched = BatchedClients(copy.deepcopy(global_model), federation, cfg, lanes=len(federation.clients))
    updates = batched.train([Lane(method, client, cfg, 0, global_model) for client in federation.clients])
    for seq, bat in zip(sequential, updates):
        assert seq.train_loss == pytest.approx(bat.train_loss, abs=1e-9)
        assert max((seq.state[k] - bat.state[k]).abs().max().item() for k in seq.state) < 1e-9
    assert method.finished.keys() == finished_sequentially.keys()
    for client, (total, steps) in finished_sequentially.items():
        assert method.finished[client] == (pytest.approx(total, abs=1e-9), steps)
    assert len({round(u.train_loss, 6) for u in updates}) == len(updates)  # the clients' losses differ
