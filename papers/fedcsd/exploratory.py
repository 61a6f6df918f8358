"""FedCSD Fig. 1, the exploratory experiment (Section III): "each client receives a proficiently
trained global model from the server ... we train a round with 50 local epochs involving 10
non-IID clients", ResNet-50 on CIFAR-100. After each local epoch: (a) the logit distance (KL) and
(b) the feature distance (l2) between each local model and the global model it started from,
(c) the test accuracy of the local models (their mean, "local") and of their parameter average
("global"), with logit distillation (Eq. 4, mu 0.001, tau 10) and feature distillation (Eq. 5,
mu 0.01) beside plain local training; (d) the accuracy on the test set and on the local training
data.

Ours: the global model is the final one of Table I's FedAvg run at beta = 0.5, seed 0 (the
paper's is "proficiently trained", from no stated run); the round's 50 local epochs are 3 at a
reduced scale, which checks the probe's path, not its curves; the distances are measured on the
test set (the paper does not say on which data), KL(p_start || p) and ||h - h_start||_2 per
sample, averaged; the accuracy on local training data is a model's mean over the clients of its
accuracy on each one's own data, unaugmented (the global model's and the local models' the same
quantity), measured for FedAvg alone, which panel (d) draws; the average weights the clients by
their samples. Logit distillation is Table III's "Base" (FedCSD with its three components off:
the same gradients as Eq. 4's cross-entropy with the teacher); feature distillation's MSE is the
mean over the feature's 2048 values (nn.MSELoss's), which the paper's "MSE loss" suggests. The
probe is a GPU job of its own (`Figure.probe`): 3 x 10 clients x 50 epochs of ResNet-50, each
epoch evaluated.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from shared.config.dotted import deep_merge
from shared.config.schema import NonNegative, RunConfig, to_dict
from shared.data.federation import Client, Federation
from shared.methods.fedavg import FedAvg, frozen_copy, kl_per_sample
from shared.methods.registry import build_method
from shared.models.nets import Net
from shared.targets.configs import load_config
from shared.targets.table_declarations import Row
from shared.training.clients import train_client
from shared.training.evaluation import autocast
from shared.training.probe import final_model

EPOCHS = {"paper": 50}  # "we train a round with 50 local epochs"
REDUCED_EPOCHS = 3  # at a reduced scale: enough to check the probe's path, in seconds at smoke
MEASURES = ["logit_distance", "feature_distance", "test_acc", "train_acc"]
PROBE_COLUMNS = {"variant": "text", "model": "text", "epoch": "number", **{m: "number" for m in MEASURES}}


class FeatureDistillation(FedAvg):
    """Eq. 5: CE + mu * MSE(h_k, h_G), h the latent features (ResNet-50's 2048), the round's
    global model the teacher."""

    @dataclass
    class Params:
        mu: NonNegative = 0.01  # "the optimal mu of ... feature distillation is empirically set to ... 0.01"

    def prepare_round(self, round, global_model):
        self.teacher = frozen_copy(global_model)

    def local_loss(self, model, x, y, client):
        h = model.features(x)
        with torch.no_grad():
            h_global = self.teacher.features(x)
        return F.cross_entropy(model.classifier(h), y) + self.params.mu * F.mse_loss(h, h_global)


@torch.no_grad()
def outputs(model: Net, images: torch.Tensor, federation: Federation, cfg: RunConfig, features: bool = True):
    """(features or None, logits) of `model` in eval mode on uint8 images, in float, as the run
    evaluates."""
    was_training = model.training
    model.eval()
    hs, logits = [], []
    with autocast(cfg, federation.device):
        for i in range(0, len(images), cfg.eval.batch_size):
            h = model.features(federation.augmenter.normalize(images[i : i + cfg.eval.batch_size]))
            hs += [h.float()] if features else []
            logits.append(model.classifier(h).float())
    model.train(was_training)
    return torch.cat(hs) if features else None, torch.cat(logits)


def measured(model: Net, reference, federation: Federation, cfg: RunConfig, clients: list[Client] | None) -> dict:
    """MEASURES of `model` against the start's (features, logits) on the test set; train_acc the
    mean over `clients` of its accuracy on each one's own training data (None: not measured)."""
    h, z = outputs(model, federation.test.x, federation, cfg)
    h_start, z_start = reference
    return {
        "logit_distance": kl_per_sample(z_start, z).mean().item(),
        "feature_distance": (h - h_start).norm(dim=1).mean().item(),
        "test_acc": accuracy(z, federation.test.y),
        "train_acc": float("nan") if clients is None else own_data_accuracy(model, clients, federation, cfg),
    }


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Percent right, from the count (exact where the count is)."""
    return 100 * (logits.argmax(1) == labels).sum().item() / len(labels)


def own_data_accuracy(model: Net, clients: list[Client], federation: Federation, cfg: RunConfig) -> float:
    """The mean over `clients` of `model`'s accuracy (%) on each one's training data, unaugmented
    (the local models' curve and the global model's are the same quantity)."""
    rows = torch.cat([c.index for c in clients])
    _, z = outputs(model, federation.train_x[rows], federation, cfg, features=False)
    right = (z.argmax(1) == federation.train_y[rows]).split([c.num_samples for c in clients])
    return sum(100 * r.sum().item() / len(r) for r in right) / len(clients)


def variants(cfg: RunConfig, federation: Federation, logit_distillation: Row) -> dict[str, FedAvg]:
    """The three local objectives of Fig. 1, each a method on the run's federation."""
    distilling = load_config(None, deep_merge(to_dict(cfg), {"method": logit_distillation.method}))
    return {
        "FedAvg": build_method(cfg, federation),
        "logit distillation": build_method(distilling, federation),
        "feature distillation": FeatureDistillation(FeatureDistillation.Params(), cfg, federation),
    }


def local_round(
    method: FedAvg, global_model: Net, federation: Federation, cfg: RunConfig, reference, epochs: int, own_data: bool
) -> list[dict]:
    """Per epoch: the local models' mean MEASURES ("local") and those of their average weighted
    by the clients' samples, as FedAvg aggregates ("global"); train_acc where `own_data`."""
    round = cfg.federation.rounds  # the round after the run's last
    local_cfg = replace(cfg, local=replace(cfg.local, epochs=epochs))
    method.prepare_round(round, global_model)
    total = sum(c.num_samples for c in federation.clients)
    averages: dict[int, dict[str, torch.Tensor]] = {}  # a running sum: 50 epochs' averages, not 500 models
    local: dict[int, list[dict]] = {}

    def each_epoch(epoch: int, model: Net, client: Client) -> None:
        local.setdefault(epoch, []).append(measured(model, reference, federation, cfg, [client] if own_data else None))
        state = model.state_dict()
        if epoch not in averages:
            averages[epoch] = {k: torch.zeros_like(v, dtype=torch.float) for k, v in state.items()}
        for key, value in state.items():
            averages[epoch][key] += value.float() * (client.num_samples / total)

    for client in federation.clients:  # each client's batches are drawn from its own seeded generator
        model = copy.deepcopy(global_model)
        train_client(method, client, model, local_cfg, round, each_epoch=lambda e, m, c=client: each_epoch(e, m, c))
    points, model, like = [], copy.deepcopy(global_model), global_model.state_dict()
    for epoch, average in sorted(averages.items()):
        model.load_state_dict({k: v if like[k].is_floating_point() else v.round() for k, v in average.items()})
        clients = federation.clients if own_data else None
        points.append({"model": "global", "epoch": epoch, **measured(model, reference, federation, cfg, clients)})
        points.append({"model": "local", "epoch": epoch, **pd.DataFrame(local[epoch]).mean().to_dict()})
    return points


def probe_local_training(cfg: RunConfig, run_dir: Path, scale: str, logit_distillation: Row) -> pd.DataFrame:
    """variant, model, epoch and MEASURES: epoch 0 the global model the clients start from, the
    final one of the run in `run_dir`. train_acc is FedAvg's alone (panel d)."""
    federation, global_model = final_model(cfg, run_dir)
    reference = outputs(global_model, federation.test.x, federation, cfg)
    start = measured(global_model, reference, federation, cfg, federation.clients)
    start_points = [{"model": m, "epoch": 0, **start} for m in ("global", "local")]
    epochs, frames = EPOCHS.get(scale, REDUCED_EPOCHS), []
    for name, method in variants(cfg, federation, logit_distillation).items():
        points = start_points + local_round(
            method, global_model, federation, cfg, reference, epochs, own_data=name == "FedAvg"
        )
        frames.append(pd.DataFrame(points).assign(variant=name))
    return pd.concat(frames)[list(PROBE_COLUMNS)]
