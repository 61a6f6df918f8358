"""Testing a model on a whole split: accuracy, loss, per class and per domain."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from shared.config import RunConfig
from shared.data import Split
from shared.federation import Federation
from shared.models import Net


def autocast(cfg: RunConfig, device: torch.device):
    """bf16 autocast where trainer.amp asks for it."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.trainer.amp)


@torch.no_grad()
def evaluate(model: Net, split: Split, federation: Federation, cfg: RunConfig) -> dict:
    """Accuracy (%), mean loss and per-class accuracy (%) on a whole split; on a dataset of
    domains also the accuracy (%) on each domain's part of the split."""
    was_training = model.training
    model.eval()
    k = federation.num_classes
    dataset = federation.dataset
    domains = dataset.groups if dataset.group_kind == "domain" and split.group is not None else []
    correct = torch.zeros(k, device=split.y.device)
    total = torch.zeros(k, device=split.y.device)
    domain_correct = torch.zeros(len(domains), device=split.y.device)
    domain_total = torch.zeros(len(domains), device=split.y.device)
    loss = torch.zeros((), device=split.y.device)
    for start in range(0, len(split), cfg.eval.batch_size):
        x = federation.augmenter.normalize(split.x[start:start + cfg.eval.batch_size])
        y = split.y[start:start + cfg.eval.batch_size]
        with autocast(cfg, federation.device):
            logits = model(x).float()
        loss += F.cross_entropy(logits, y, reduction="sum")
        right = logits.argmax(1) == y
        correct += torch.bincount(y[right], minlength=k)
        total += torch.bincount(y, minlength=k)
        if domains:
            domain = split.group[start:start + cfg.eval.batch_size]
            domain_correct += torch.bincount(domain[right], minlength=len(domains))
            domain_total += torch.bincount(domain, minlength=len(domains))
    model.train(was_training)
    per_class = (100 * correct / total.clamp(min=1)).tolist()
    result = {"acc": 100 * correct.sum().item() / len(split), "loss": loss.item() / len(split), "per_class_acc": per_class}
    if domains:
        result["domain_acc"] = dict(zip(domains, (100 * domain_correct / domain_total.clamp(min=1)).tolist()))
    return result
