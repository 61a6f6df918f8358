"""Testing models on a whole split: accuracy, loss, per class and per domain. `evaluate` tests
one model; `evaluate_many` tests many models of one architecture (the local models of a round,
the global models of runs trained together) in one pass over the split, each batch through all
of them at once (torch.func.vmap), so that a pass dispatches as many operators as one model's."""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from shared.config.schema import RunConfig
from shared.data.datasets import Split
from shared.data.federation import Federation
from shared.models.nets import Net

# What one pass of evaluate_many may hold, beyond what evaluating one model holds anyway (one
# model always goes, with its eval.batch_size samples): its models' inputs, counted as if each
# model had its own copy of the batch (models x eval.batch_size x values per sample), at most
# PASS_INPUT_VALUES: 21 models' batches of 1000 CIFAR images (3x32x32). A network's activations
# are a small multiple of its input, so a pass's memory is about 21 one-model passes at most.
PASS_INPUT_VALUES = 1 << 26
# and the stacked copy of its models' states (parameters and buffers), at most this many bytes:
# a thousand FedAvg-CNNs, two ResNet-50s, one DistilBERT or AlexNet-BN (such models go one at a
# time, as before: their evaluation is heavy enough that launching kernels is not what costs)
PASS_STATE_BYTES = 1 << 28
# Layers whose models evaluate_many takes one at a time on a CPU (models_per_pass)
ALONE_ON_CPU = (torch.nn.GroupNorm, torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm)


def autocast(cfg: RunConfig, device: torch.device):
    """bf16 autocast where trainer.amp asks for it."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.trainer.amp)


class Tally:
    """Right answers per class and per domain, and the summed loss, of `models` models on a
    split, added batch by batch."""

    def __init__(self, models: int, split: Split, federation: Federation):
        dataset, device = federation.dataset, split.y.device
        self.split, self.k = split, federation.num_classes
        self.domains = dataset.groups if dataset.group_kind == "domain" and split.group is not None else []
        self.correct = torch.zeros(models, self.k, device=device)
        self.total = torch.bincount(split.y, minlength=self.k).to(self.correct.dtype)
        self.domain_correct = torch.zeros(models, len(self.domains), device=device)
        self.loss = torch.zeros(models, device=device)

    def add(self, logits: torch.Tensor, start: int) -> None:
        """`logits`: (models, batch, classes) for the split's samples from `start` on."""
        models, batch = logits.shape[:2]
        y = self.split.y[start : start + batch]
        self.loss += F.cross_entropy(logits.transpose(1, 2), y.expand(models, batch), reduction="none").sum(1)
        right = logits.argmax(2) == y
        self.correct += self.count(right, y, self.k)
        if self.domains:
            self.domain_correct += self.count(right, self.split.group[start : start + batch], len(self.domains))

    @staticmethod
    def count(right: torch.Tensor, label: torch.Tensor, labels: int) -> torch.Tensor:
        """(models, labels): each model's right answers per label, counted by comparing with
        every label rather than by bincount of the right answers' labels: how many those are
        the host would have to wait for in every batch."""
        is_label = label.unsqueeze(1) == torch.arange(labels, device=label.device)  # (batch, labels)
        return (right.unsqueeze(2) & is_label).sum(1)

    def results(self) -> list[dict]:
        """Each model's numbers; accuracies from the counts in float64, so that 6,849 right of
        10,000 is 68.49 (float32 made it 68.48999786376953, and a mean of two seeds' could print
        its last digit off by one)."""
        n = len(self.split)
        correct = self.correct.double()
        accs = (100 * correct.sum(1) / n).tolist()
        losses = (self.loss / n).tolist()
        per_class = (100 * correct / self.total.clamp(min=1)).tolist()
        results = [{"acc": acc, "loss": loss, "per_class_acc": pc} for acc, loss, pc in zip(accs, losses, per_class)]
        if self.domains:
            domain_total = torch.bincount(self.split.group, minlength=len(self.domains)).clamp(min=1)
            for result, by_domain in zip(results, (100 * self.domain_correct.double() / domain_total).tolist()):
                result["domain_acc"] = dict(zip(self.domains, by_domain))
        return results


@torch.no_grad()
def evaluate(model: Net, split: Split, federation: Federation, cfg: RunConfig) -> dict:
    """Accuracy (%), mean loss and per-class accuracy (%) on a whole split; on a dataset of
    domains also the accuracy (%) on each domain's part of the split."""
    return evaluate_many(model, [model.state_dict()], split, federation, cfg)[0]


@torch.no_grad()
def evaluate_many(
    model: Net, states: list[dict[str, torch.Tensor]], split: Split, federation: Federation, cfg: RunConfig
) -> list[dict]:
    """`evaluate`'s results for each of `states` (state dicts of `model`'s architecture:
    parameters and buffers, as shared.methods.fedavg.snapshot gives them) loaded into `model`, up to
    floating-point rounding; `model` itself is left as it was. The states go in passes of as
    many as PASS_INPUT_VALUES and PASS_STATE_BYTES allow; each pass goes once over the split,
    every batch (eval.batch_size samples, as for one model) through all of its models in one
    vmapped call of the model on their stacked states (BatchNorm's running statistics are
    buffers, stacked too). A pass of one model calls it without vmap, as `evaluate` does: so
    go the models that the bounds let no two of into a pass, DistilBERT (its 67M parameters)
    and AlexNet-BN (its 57M, and Office-Caltech-10's 256x256 images). Every other model of the
    zoo runs under vmap (in eval mode nothing draws and no buffer is updated)."""
    if not states:
        return []
    was_training = model.training
    model.eval()
    results = []
    try:
        per_pass = models_per_pass(model, len(states), split, states[0], cfg)
        for first in range(0, len(states), per_pass):
            results += evaluate_pass(model, states[first : first + per_pass], split, federation, cfg)
    finally:
        model.train(was_training)
    return results


def models_per_pass(model: Net, models: int, split: Split, state: dict[str, torch.Tensor], cfg: RunConfig) -> int:
    """How many models a pass takes: as many as the bounds allow (at least one), spread evenly
    over the passes that all `models` need. On a CPU a model with normalisation layers goes
    alone: vmapped, its GroupNorm or BatchNorm and grouped convolutions copy layouts and cost
    more than the launches they save (ResNet-8: 1.5x slower, benchmarks/README.md)."""
    if split.y.device.type == "cpu" and any(isinstance(m, ALONE_ON_CPU) for m in model.modules()):
        return 1
    values_per_sample = split.x[0].numel() if len(split) else 1
    state_bytes = sum(v.numel() * v.element_size() for v in state.values())
    fit = min(
        PASS_INPUT_VALUES // (min(cfg.eval.batch_size, max(len(split), 1)) * values_per_sample),
        PASS_STATE_BYTES // max(state_bytes, 1),
    )
    passes = math.ceil(models / max(fit, 1))
    return math.ceil(models / passes)


def evaluate_pass(
    model: Net, states: list[dict[str, torch.Tensor]], split: Split, federation: Federation, cfg: RunConfig
) -> list[dict]:
    tally = Tally(len(states), split, federation)
    forward = stacked_forward(model, states)
    for start in range(0, len(split), cfg.eval.batch_size):
        x = federation.augmenter.normalize(split.x[start : start + cfg.eval.batch_size])
        with autocast(cfg, federation.device):
            logits = forward(x)
        tally.add(logits.to(torch.promote_types(logits.dtype, torch.float32)), start)  # autocast's bf16 up
    return tally.results()


def stacked_forward(model: Net, states: list[dict[str, torch.Tensor]]) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> (models, batch, classes): the logits of `model` with each of `states`."""
    if len(states) == 1:
        return lambda x: functional_call(model, states[0], (x,)).unsqueeze(0)
    # in the default layout: vmap cannot ask a tensor whether it is channels_last
    # (trainer.channels_last), which convolutions and GroupNorm do of their inputs and weights
    stacked = {
        key: torch.stack([state[key] for state in states]).clone(memory_format=torch.contiguous_format)
        for key in states[0]
    }
    in_all = vmap(lambda state, x: functional_call(model, state, (x,)), in_dims=(0, None))
    return lambda x: in_all(stacked, x.contiguous())
