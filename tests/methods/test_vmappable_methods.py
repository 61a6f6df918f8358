"""Every method that declares `per_sample_loss` keeps its promise (shared/methods/fedavg.py, Capabilities):
its `local_loss` on a batch equals the mean over the batch of `local_loss` on each sample alone,
run under `torch.func.vmap` with the weights passed through `functional_call` and client=None,
each sample with its row of the step's `step_inputs` (FedGen's generated samples), in loss and
in gradient; and what `local_loss` reads of the method is a tensor, a module or a float (which
the batched step stacks per (run, client) lane) or a value that is the same for every client of
every run of a group, never a list of tensors or another number that the lanes would share wrongly.

The method's state is one trained round old (two of four clients trained, so that MOON's previous
models, FedCurv's Fisher terms, SCAFFOLD's controls and the class statistics exist for some
clients and not others), and the local model has moved away from the global one, so that no
distillation term is at its minimum, where its gradient would vanish and prove nothing."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from shared.data.federation import build_federation
from shared.methods.registry import build_method, method_class, method_names
from shared.models.registry import model_for
from shared.training.clients import missing_capabilities, train_client

# Methods whose loss is not a batch mean of per-sample terms, and why (each class's
# `capabilities` says so too): a change that makes one batchable, or one unbatchable, fails here.
NOT_PER_SAMPLE = {
    "fedcsd": "its loss counts the samples its mask removes (its filter rates), a side effect vmap cannot carry",
}

# Overrides each method needs to run at all, then the variants of its loss worth covering.
NEEDS = {
    "fedcad": ["aux.per_class=2"],
    "fedssd": ["aux.per_class=2", "method.threshold=0", "method.m_max=1"],
    "moon": ["model.projection_dim=8"],
}
VARIANTS = {
    "fedcad": [[], ["method.estimate_on=local"]],
    "fedssd": [[], ["method.loss=kl"], ["method.loss=mse"], ["method.mask_weight=m", "method.class_reduction=mean"]],
    "fedgkd": [
        [],
        ["method.vote=true", "dataset.val_fraction=0.1"],
        ["method.regulariser=mse"],
        ["method.released_code=true", "method.temperature=2"],
    ],
}
FEDAVG_LOSS = {"fedavg", "fednova", "fedavgm"}  # methods whose local loss is plain cross-entropy

TINY_ROUND = [
    "dataset.synthetic.image_size=16",
    "dataset.synthetic.train_per_class=8",
    "local.batch_size=6",
    "local.lr=0.1",
]


def per_sample_methods() -> list[str]:
    return [name for name in method_names() if method_class(name).capabilities.per_sample_loss]


def cases():
    return [
        pytest.param(name, [*NEEDS.get(name, []), *variant], id=" ".join([name, *variant]))
        for name in per_sample_methods()
        for variant in VARIANTS.get(name, [[]])
    ]


class LocalLoss(nn.Module):
    """`method.local_loss` with the model as the only submodule, so that functional_call swaps
    its weights, called as the batched step calls it: without the client."""

    def __init__(self, method, model):
        super().__init__()
        self.model = model
        self.method = method

    def forward(self, x, y, inputs):
        return self.method.local_loss(self.model, x, y, None, **inputs)


def one_round_old(cfg):
    """(method, federation, global model) at the start of round 2, after clients 0 and 1 trained."""
    federation = build_federation(cfg, torch.device("cpu"))
    torch.manual_seed(0)
    global_model = model_for(cfg, federation)
    method = build_method(cfg, federation)
    method.prepare_round(0, global_model)
    updates = [train_client(method, client, copy.deepcopy(global_model), cfg, 0) for client in federation.clients[:2]]
    method.aggregate(global_model, updates)
    method.prepare_round(1, global_model)
    return method, federation, global_model


def moved_local_model(global_model):
    """The global model a few local steps later, roughly: its weights plus small noise."""
    model = copy.deepcopy(global_model).train()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return model


def attributes_local_loss_reads(method, *args, **inputs) -> dict:
    """The method's own attributes that `local_loss(*args, **inputs)` reads, by name, with their values."""
    names, cls = set(), type(method)

    class Recording(cls):
        def __getattribute__(self, name):
            names.add(name)
            return super().__getattribute__(name)

    method.__class__ = Recording
    try:
        method.local_loss(*args, **inputs)
    finally:
        method.__class__ = cls
    return {name: value for name, value in vars(method).items() if name in names}


def shared_by_lanes(values: dict) -> dict:
    """Those that the batched step does not stack per lane: all but tensors, modules and floats
    (stacked where lanes differ in them, shared/training/lane_state.py), and None, which says a term is
    off for every lane. A container of tensors or modules would be shared by every lane: the
    test refuses it outright."""
    shared = {
        k: v
        for k, v in values.items()
        if v is not None and not isinstance(v, (torch.Tensor, nn.Module)) and type(v) is not float
    }
    for name, value in shared.items():
        inside = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else []
        assert not any(isinstance(v, (torch.Tensor, nn.Module)) for v in inside), (
            f"local_loss reads {name}, a {type(value).__name__} of tensors or modules: make it one tensor or module"
        )
    return shared


def test_the_methods_without_per_sample_losses_are_the_known_ones():
    assert sorted(set(method_names()) - set(per_sample_methods())) == sorted(NOT_PER_SAMPLE)


@pytest.mark.parametrize("name", NOT_PER_SAMPLE)
def test_the_note_for_a_method_that_cannot_batch_says_why_in_one_line(name):
    note = missing_capabilities(method_class(name), name, "trainer.clients_per_step")
    assert "lacks the capabilities per_sample_loss: " in note and "\n" not in note
    assert NOT_PER_SAMPLE[name].split(" (")[0] in note


def batch_of(method, client, cfg):
    """A batch of the client's, and the method's step inputs for it, as a trainer draws them."""
    generator = torch.Generator().manual_seed(2)
    x, y = next(client.batches(cfg.local.batch_size, generator))
    assert len(y) > 1 and len(set(y.tolist())) > 1  # several samples of several classes
    return x, y, method.step_inputs(client, len(y), generator)


def mean_of_per_sample_losses(wrapper, x, y, inputs):
    """The batch's mean loss as a function of the parameters, each sample's loss taken under vmap."""

    def mean_loss(params):
        def one_sample(xi, yi, row):
            return functional_call(wrapper, params, (xi[None], yi[None], {k: v[None] for k, v in row.items()}))

        per_sample = vmap(one_sample)(x, y, inputs)
        return per_sample.mean()

    return mean_loss


@pytest.mark.parametrize("name, overrides", cases())
def test_local_loss_is_the_mean_of_its_per_sample_losses_under_vmap(tiny_cfg, float64, name, overrides):
    cfg = tiny_cfg(*TINY_ROUND, f"method={name}", *overrides)
    method, federation, global_model = one_round_old(cfg)
    trained, fresh = federation.clients[0], federation.clients[2]  # client 2 has not trained yet

    # another run of the group (another seed: other data, other global model), and other clients
    other_run, other_federation, other_global = one_round_old(
        tiny_cfg(*TINY_ROUND, f"method={name}", *overrides, "seed=1")
    )
    other_run.start_client(other_federation.clients[0], copy.deepcopy(other_global))
    other_x, other_y, other_inputs = batch_of(other_run, other_federation.clients[0], cfg)
    other = shared_by_lanes(
        attributes_local_loss_reads(other_run, moved_local_model(other_global), other_x, other_y, None, **other_inputs)
    )
    for client in (fresh, trained):
        method.start_client(client, copy.deepcopy(global_model))
        model = moved_local_model(global_model)
        x, y, inputs = batch_of(method, client, cfg)
        read = shared_by_lanes(attributes_local_loss_reads(method, model, x, y, None, **inputs))
        # only what both read: a lane that reads less took a branch on a float that the step,
        # where lanes differ in it, stacks (MOON's l_con weight, 0 for a client without a previous model)
        differ = sorted(k for k in read.keys() & other.keys() if read[k] != other[k])
        assert not differ, f"local_loss reads values that differ between clients or runs but are not tensors: {differ}"

        batch_loss = method.local_loss(model, x, y, client, **inputs)
        batch_grads = torch.autograd.grad(batch_loss, list(model.parameters()))
        if name not in FEDAVG_LOSS and client is trained:  # the method's own term is in play
            assert not torch.allclose(batch_loss, F.cross_entropy(model(x), y), rtol=1e-6, atol=0)

        wrapper = LocalLoss(method, model)
        params = {f"model.{k}": p.detach() for k, p in model.named_parameters()}
        grads, loss = grad_and_value(mean_of_per_sample_losses(wrapper, x, y, inputs))(params)
        torch.testing.assert_close(loss, batch_loss.detach(), rtol=1e-10, atol=1e-10)
        for (k, _), batch_grad in zip(model.named_parameters(), batch_grads):
            torch.testing.assert_close(grads[f"model.{k}"], batch_grad, rtol=1e-10, atol=1e-10, msg=k)


def test_a_class_no_client_uploaded_counts_in_the_batch_mean_as_in_the_released_codes():
    """Per sample, a class that none of the last round's clients held (known = False, its
    statistics zero): FedProto's MSE adds zero for it but still divides by the whole batch
    (FedProto's code: the sample's target is its own feature); FedDistill+ distils it towards
    the uniform distribution of zero logits (FedGen's and FedGKD's code)."""
    from tests.methods.test_baselines import linear_net, make

    model = linear_net([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # features = x, logits = W x
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    y = torch.tensor([0, 1])
    logits = model(x)
    ce = F.cross_entropy(logits, y)

    proto = make("fedproto", lam=0.5)
    proto.class_stats = torch.tensor([[0.0, 2.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    proto.known = torch.tensor([True, False, True])
    expected = ce + 0.5 * ((1 + 4) / 2 + 0) / 2  # sample 0: ((1 - 0)^2 + (0 - 2)^2) / 2; sample 1: nothing
    torch.testing.assert_close(proto.local_loss(model, x, y, None), expected)

    distill = make("feddistill", lam=0.1)
    distill.class_stats = torch.tensor([[0.0, 2.0, 0.0], [0.0] * 3, [0.0] * 3], dtype=torch.float64)
    distill.known = torch.tensor([True, False, True])
    targets = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64).softmax(1)
    kl = (targets * (targets.log() - logits.log_softmax(1))).sum(1)
    torch.testing.assert_close(distill.local_loss(model, x, y, None), ce + 0.1 * kl.mean())
