"""Each baseline's loss or update against values worked out by hand in the test, its reduction
to FedAvg, and a 2-round run through `python -m shared.run`."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from shared.methods.fedavg import ClientUpdate
from shared.methods.registry import method_class, method_names
from shared.models.nets import Net
from shared.run import main
from shared.targets.configs import load_config
from shared.training import trainer

E = math.e


def linear_net(weight, bias=None, features=2, classes=3) -> Net:
    """features = x itself; logits = W x + b."""
    net = Net(nn.Identity(), features, classes)
    with torch.no_grad():
        net.classifier.weight.copy_(torch.tensor(weight, dtype=torch.float64))
        net.classifier.bias.copy_(torch.tensor(bias or [0.0] * classes, dtype=torch.float64))
    return net.double()


def make(name, counts=((1, 1, 1), (1, 1, 1)), **params):
    cls = method_class(name)
    cfg = load_config(None, [f"method={name}", *(f"method.{k}={v}" for k, v in params.items())])
    federation = SimpleNamespace(
        num_classes=3,
        device=torch.device("cpu"),
        clients=[None, None],
        counts=[list(row) for row in counts],
        aux=None,
        val=None,
    )
    return cls(cls.Params(**params), cfg, federation)


CLIENT = SimpleNamespace(id=0, index=torch.zeros(1))
X = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
Y = torch.tensor([0])
W = [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]  # logits of X: [1, 0, 0]
CE = math.log(E + 2) - 1  # -log(e / (e + 1 + 1))


def softmax(v):
    m = [math.exp(a) for a in v]
    return [a / sum(m) for a in m]


def kl(p, q):
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def test_fedprox_adds_half_mu_squared_distance():
    method = make("fedprox", mu=0.1)
    method.prepare_round(0, linear_net([[0.0] * 2] * 3))  # global model: all zeros
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)
    assert loss.item() == pytest.approx(CE + 0.1 / 2 * 2)  # ||W - 0||^2 = 2


def test_fedlsd_mixes_ce_and_tempered_kl():
    method = make("fedlsd", alpha=0.3, temperature=2.0)
    method.prepare_round(0, linear_net([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))  # teacher logits [0, 1, 0]
    method.start_client(CLIENT, None)
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)
    expected = 0.7 * CE + 0.3 * kl(softmax([0, 0.5, 0]), softmax([0.5, 0, 0]))
    assert loss.item() == pytest.approx(expected)


def test_fedntd_distils_only_the_not_true_classes():
    method = make("fedntd", tau=2.0, beta=0.5)
    method.prepare_round(0, linear_net([[5.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))  # teacher [5, 1, 0]
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)  # student [1, 0, 0], true class 0
    expected = CE + 0.5 * 4 * kl(softmax([0.5, 0.0]), softmax([0.0, 0.0]))  # the true column is gone
    assert loss.item() == pytest.approx(expected)


def test_moon_contrastive_term():
    method = make("moon", mu=2.0, tau=0.5)
    # Three models that share the classifier and differ in a linear backbone, so q = B x.
    student, global_, previous = (Net(nn.Linear(2, 2, bias=False), 2, 3).double() for _ in range(3))
    with torch.no_grad():
        student.backbone.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))  # q = (1, 0)
        global_.backbone.weight.copy_(torch.tensor([[1.0, 0.0], [1.0, 0.0]]))  # q_g = (1, 1)
        previous.backbone.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 0.0]]))  # q_prev = (0, 1)
        for net in (student, global_, previous):
            net.classifier.weight.copy_(torch.tensor(W))
            net.classifier.bias.zero_()
    method.prepare_round(0, global_)
    method.previous[0] = previous.state_dict()
    method.start_client(CLIENT, student)
    cos_g, cos_prev = 1 / math.sqrt(2), 0.0
    l_con = -math.log(math.exp(cos_g / 0.5) / (math.exp(cos_g / 0.5) + math.exp(cos_prev / 0.5)))
    assert method.local_loss(student, X, Y, CLIENT).item() == pytest.approx(CE + 2.0 * l_con)
    fresh = SimpleNamespace(id=1, index=torch.zeros(1))  # no previous model: CE alone
    method.start_client(fresh, student)
    assert method.local_loss(student, X, Y, fresh).item() == pytest.approx(CE)


def test_fedcurv_penalty_uses_the_other_clients_sums():
    method = make("fedcurv", lam=0.5)
    zeros = [torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)]
    method.u[0] = [torch.ones(3, 2, dtype=torch.float64), zeros[1]]
    method.u[1] = [torch.full((3, 2), 2.0, dtype=torch.float64), zeros[1]]
    method.v[0] = [torch.ones(3, 2, dtype=torch.float64), zeros[1]]
    method.v[1] = [torch.full((3, 2), 3.0, dtype=torch.float64), zeros[1]]
    method.prepare_round(0, None)
    method.start_client(CLIENT, None)  # client 0 sees only client 1's (u, v): P = 2, Q = 3
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)
    # <P, W^2> = 2 * 2 ; <Q, W> = 3 * 2
    assert loss.item() == pytest.approx(CE + 0.5 * (2 * 2 - 2 * 3 * 2))


def test_fedcurv_fisher_is_the_mean_squared_batch_gradient():
    from shared.methods.baselines.fedcurv import diagonal_fisher

    batches = [
        (torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64), torch.tensor([0, 1])),
        (torch.tensor([[1.0, 1.0]], dtype=torch.float64), torch.tensor([2])),
    ]
    client = SimpleNamespace(id=0, index=torch.zeros(1), batches=lambda *a, **k: iter(batches))
    model = linear_net(W)
    u = diagonal_fisher(model, client, batch_size=2, samples=4)
    # by hand: dCE/dW = mean_i (softmax(W x_i) - onehot(y_i)) x_i^T ; dCE/db = mean_i (softmax - onehot)
    expected_w, expected_b = torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    for x, y in batches:
        gw, gb = torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
        for xi, yi in zip(x, y):
            logits = [sum(W[k][j] * xi[j].item() for j in range(2)) for k in range(3)]
            err = torch.tensor(softmax(logits), dtype=torch.float64) - torch.eye(3, dtype=torch.float64)[yi]
            gw += torch.outer(err, xi) / len(x)
            gb += err / len(x)
        expected_w += gw**2 / 2
        expected_b += gb**2 / 2
    torch.testing.assert_close(u[0], expected_w)
    torch.testing.assert_close(u[1], expected_b)


def test_fednova_normalised_averaging_by_hand():
    from shared.methods.baselines.fednova import normaliser

    assert normaliser(3, 0.0) == 3
    assert normaliser(2, 0.5) == pytest.approx((2 - 0.5 * (1 - 0.25) / 0.5) / 0.5)  # = 2.5
    method = make("fednova")
    method.cfg.local.momentum = 0.0
    global_model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        global_model.weight.zero_()
    updates = [
        ClientUpdate(0, {"weight": torch.tensor([[-2.0]])}, 10, 2, 0.0),
        ClientUpdate(1, {"weight": torch.tensor([[-6.0]])}, 10, 3, 0.0),
    ]
    method.aggregate(global_model, updates)
    # a = (2, 3); d = (1, 2); tau_eff = 2.5; w = 0 - 2.5 * (0.5 * 1 + 0.5 * 2) = -3.75
    assert global_model.weight.item() == pytest.approx(-3.75)


def test_fedavgm_server_momentum_over_two_rounds():
    method = make("fedavgm", beta=0.9, server_lr=1.0)
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    method.aggregate(model, [ClientUpdate(0, {"weight": torch.tensor([[0.5]])}, 1, 1, 0.0)])
    assert model.weight.item() == pytest.approx(0.5)  # v = 0.5; w = 1 - 0.5
    method.aggregate(model, [ClientUpdate(0, {"weight": torch.tensor([[0.4]])}, 1, 1, 0.0)])
    assert model.weight.item() == pytest.approx(0.5 - (0.9 * 0.5 + 0.1))  # v = 0.55


def test_scaffold_control_variates_by_hand():
    method = make("scaffold")
    method.cfg.local.lr, method.cfg.local.momentum = 0.1, 0.0
    global_model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        global_model.weight.fill_(1.0)
    method.prepare_round(0, global_model)
    local = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        local.weight.fill_(0.8)
    client = SimpleNamespace(id=0)
    method.start_client(client, local)
    update = ClientUpdate(0, {"weight": local.weight.detach().clone()}, 1, num_steps=2, train_loss=0.0)
    method.finish_client(client, local, update)
    # c_i+ = c_i - c + (w_g - w_i) / (K lr) = 0 - 0 + 0.2 / 0.2 = 1
    assert method.c_client[0][0].item() == pytest.approx(1.0)
    method.aggregate(global_model, [update])
    assert method.c[0].item() == pytest.approx(0.5)  # c += |S|/N * mean(delta c) = 1/2 * 1
    # the next local step follows g + c - c_i: the loss carries <w, c - c_i> = 0.8 * (0.5 - 1)
    method.start_client(client, local)
    assert sum((w * k).sum() for w, k in zip(local.parameters(), method.correction)).item() == pytest.approx(-0.4)


def test_scaffold_with_momentum_counts_effective_steps():
    method = make("scaffold")
    method.cfg.local.lr, method.cfg.local.momentum = 0.1, 0.5
    global_model, local = nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        global_model.weight.fill_(1.0)
        local.weight.fill_(0.8)
    method.prepare_round(0, global_model)
    client = SimpleNamespace(id=0)
    method.start_client(client, local)
    method.finish_client(client, local, ClientUpdate(0, {}, 1, num_steps=2, train_loss=0.0))
    # a(2, 0.5) = (2 - 0.5 * (1 - 0.25) / 0.5) / 0.5 = 2.5 effective steps: c_i = 0.2 / (0.1 * 2.5)
    assert method.c_client[0][0].item() == pytest.approx(0.8)


def test_fedproto_prototype_average_and_loss():
    from shared.methods.baselines.class_stats import average_per_class

    means = [torch.tensor([[1.0, 1.0], [0.0, 0.0], [9.0, 9.0]]), torch.tensor([[3.0, 1.0], [2.0, 4.0], [0.0, 0.0]])]
    counts = [torch.tensor([5.0, 0.0, 1.0]), torch.tensor([1.0, 2.0, 0.0])]
    protos, known = average_per_class(means, counts, weighted=False)
    torch.testing.assert_close(protos, torch.tensor([[2.0, 1.0], [2.0, 4.0], [9.0, 9.0]]))  # over holders only
    assert known.tolist() == [True, True, True]
    method = make("fedproto", lam=0.5)
    method.class_stats, method.known = torch.tensor([[0.0, 2.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64), known
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)  # f(x) = (1, 0) vs P[0] = (0, 2)
    assert loss.item() == pytest.approx(CE + 0.5 * (1 + 4) / 2)


def test_feddistill_per_class_logit_distillation():
    method = make("feddistill", lam=0.1)
    method.class_stats = torch.tensor([[0.0, 2.0, 0.0], [0.0] * 3, [0.0] * 3], dtype=torch.float64)
    method.known = torch.tensor([True, False, False])
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)
    assert loss.item() == pytest.approx(CE + 0.1 * kl(softmax([0, 2, 0]), softmax([1, 0, 0])))


def test_feddistill_with_uniform_targets_distils_toward_zero_logits_as_fedgkds_code_trains():
    """FedGKD's clients receive the server's logits into a copy and keep their zeros: from the
    second round on, every sample's target is uniform, whatever the averaged logits say."""
    method = make("feddistill", lam=0.1, soft_labels="uniform")
    assert method.local_loss(linear_net(W), X, Y, CLIENT).item() == pytest.approx(CE)  # round 0: no statistics
    method.class_stats = torch.tensor([[0.0, 2.0, 0.0], [0.0] * 3, [0.0] * 3], dtype=torch.float64)
    method.known = torch.tensor([True, False, False])
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)
    assert loss.item() == pytest.approx(CE + 0.1 * kl(softmax([0, 0, 0]), softmax([1, 0, 0])))


def test_fedgen_diversity_loss_by_hand():
    from shared.methods.baselines.fedgen import diversity_loss

    noise = torch.tensor([[0.0], [1.0]])
    output = torch.tensor([[0.0, 0.0], [1.0, 3.0]])
    # pairs (0,1) and (1,0): noise distance 1, output l1 distance (1 + 3) / 2 = 2; diagonal 0
    assert diversity_loss(noise, output).item() == pytest.approx(math.exp(-(2 + 2) / 4))


def test_fedgen_pairs_each_real_sample_with_a_generated_one_drawn_from_the_clients_generator(float64):
    """step_inputs: per real sample, a label of the training data (one the client lacks too, as
    FedGen's code draws from every user's labels) and noise, from the client's own
    generator (torch's global one untouched, the same draws again from the same seed); the loss:
    the batch mean of CE(z_i, y_i) + alpha CE(h(G(y_hat_i, noise_i)), y_hat_i)."""
    method = make("fedgen", counts=((0, 3, 1), (1, 1, 1)), alpha=0.5, noise_dim=2, hidden=4)
    net = linear_net(W)
    method.prepare_round(0, net)
    assert method.step_inputs(CLIENT, 2, torch.Generator()) == {}  # no generated samples before G trains
    method.trained = True
    method.start_client(CLIENT, net)
    global_state = torch.random.get_rng_state()
    inputs = method.step_inputs(CLIENT, 500, torch.Generator().manual_seed(3))
    assert torch.equal(torch.random.get_rng_state(), global_state)
    assert set(inputs["y_hat"].tolist()) == {0, 1, 2} and inputs["noise"].shape == (500, 2)  # client 0 lacks 0
    held = make("fedgen", counts=((0, 3, 1), (1, 1, 1)), generated_labels="held")  # the former draw
    assert held.labels[0].tolist() == [1, 2] and held.labels[1].tolist() == [0, 1, 2]
    again = method.step_inputs(CLIENT, 500, torch.Generator().manual_seed(3))
    assert all(torch.equal(inputs[k], again[k]) for k in inputs)

    x, y = torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 1])
    y_hat, noise = inputs["y_hat"][:2], inputs["noise"][:2]
    features = method.generator(y_hat, noise)
    expected = (
        nn.functional.cross_entropy(net(x), y, reduction="none")
        + 0.5 * nn.functional.cross_entropy(net.classifier(features), y_hat, reduction="none")
    ).mean()
    torch.testing.assert_close(method.local_loss(net, x, y, CLIENT, y_hat=y_hat, noise=noise), expected)


def test_fedgen_with_uniform_label_weights_trains_its_generator_as_if_every_client_held_every_label(float64):
    """FedGKD's port (`label_weights=uniform`): its clients' label counts stay at ones, so every
    head counts alike for every label, and every label is drawn; by default a client's head
    counts by its share of the label, and only labels the round's clients hold are drawn."""

    def generator_after_training(counts, **params):
        torch.manual_seed(0)
        method = make("fedgen", counts=counts, noise_dim=2, hidden=4, generator_steps=3, generator_batch=8, **params)
        method.federation.counts = np.array(counts)  # as a federation holds them
        method.prepare_round(0, linear_net(W))
        heads = [linear_net(W, bias=[0.1 * k, 0.0, -0.1 * k]).state_dict() for k in range(2)]
        method.train_generator([SimpleNamespace(client=k, state=heads[k]) for k in range(2)])
        return method.generator.state_dict()

    skewed = ((5, 0, 1), (1, 2, 0))
    uniform = generator_after_training(skewed, label_weights="uniform")
    as_if_every_label = generator_after_training(((1, 1, 1), (1, 1, 1)))
    by_counts = generator_after_training(skewed)
    assert all(torch.equal(uniform[k], as_if_every_label[k]) for k in uniform)
    assert not all(torch.equal(uniform[k], by_counts[k]) for k in uniform)


def test_fedgen_generator_trains_with_the_released_adam():
    """FedGen's port in FedGKD's code: Adam(lr=1e-4, weight_decay=1e-2), the rate times 0.98 per round."""
    method = make("fedgen")
    method.federation.counts = [[1, 1, 1]]
    method.build(linear_net(W))
    (group,) = method.optimizer.param_groups
    assert isinstance(method.optimizer, torch.optim.Adam)
    assert (group["lr"], group["weight_decay"]) == (1e-4, 1e-2) and method.schedule.gamma == 0.98


# --- reductions to FedAvg --------------------------------------------------------------

REDUCTIONS = [
    ("fedprox", ["method.mu=0"]),
    ("fedlsd", ["method.alpha=0"]),
    ("fednova", ["local.momentum=0", "partition=iid"]),  # plain SGD, equal local steps
    ("fedavgm", ["method.beta=0", "method.server_lr=1"]),
    ("moon", ["method.mu=0"]),
]


@pytest.mark.parametrize("name, overrides", REDUCTIONS)
def test_reduces_to_fedavg(name, overrides, tiny_cfg, tmp_path):
    extra = [o for o in overrides if not o.startswith("method.")]
    reference = trainer.run(tiny_cfg(*extra), tmp_path / "fedavg")
    reduced = trainer.run(tiny_cfg(f"method={name}", *overrides), tmp_path / name)
    assert reduced["global_acc"] == reference["global_acc"]
    assert reduced["local_acc"] == reference["local_acc"]
    wa, wb = torch.load(tmp_path / "fedavg" / "model.pt"), torch.load(tmp_path / name / "model.pt")
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-4, atol=1e-5)  # float32 rounding of another formula


@pytest.mark.parametrize("name", sorted(set(method_names()) - {"fedavg"}))
def test_two_round_smoke_run_through_the_cli(name, tmp_path, capsys):
    from tests.conftest import TINY

    args = [
        *TINY,
        f"method={name}",
        f"data_root={tmp_path}",
        "model.projection_dim=16",
        "aux.per_class=5",
        "--out",
        str(tmp_path / name),
    ]
    assert main(args) == 0
    assert '"status": "completed"' in capsys.readouterr().out
