"""FedProto (Tan et al., AAAI'22): CE + lambda * MSE(f(x), P_g[y]).

f(x) is the feature vector the classifier sees; a client's prototypes are its per-class feature
means; the server averages each class's prototypes over the clients that hold the class. FedProto
itself shares no weights; FedCSD's table compares global models, so the weights are averaged as
in FedAvg too. Prototypes are computed after local training, in eval mode, on the client's
unaugmented data (FedProto's code collects them from the last epoch's training batches).
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shared.fedavg import FedAvg


@torch.no_grad()
def class_means(model, client, batch_size: int, num_classes: int, embed) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class mean of embed(model, x) over a client's data, and the per-class counts."""
    was_training = model.training
    model.eval()
    sums, counts = None, torch.zeros(num_classes, device=client.index.device)
    for x, y in client.batches(batch_size, None, augment=False, shuffle=False):
        e = embed(model, x).float()
        if sums is None:
            sums = torch.zeros(num_classes, e.shape[1], device=e.device)
        sums.index_add_(0, y, e)
        counts += torch.bincount(y, minlength=num_classes)
    model.train(was_training)
    return sums / counts.clamp(min=1)[:, None], counts


def average_per_class(means: list[torch.Tensor], counts: list[torch.Tensor], weighted: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Average each class's vectors over the clients holding it (uniformly, or by sample count)."""
    held = torch.stack([(c > 0).float() for c in counts])  # clients x classes
    w = torch.stack(counts) if weighted else held
    total = w.sum(0)
    average = torch.einsum("kc,kcd->cd", w, torch.stack(means)) / total.clamp(min=1)[:, None]
    return average, total > 0


class FedProto(FedAvg):
    @dataclass
    class Params:
        lam: float = 1.0

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.prototypes: torch.Tensor | None = None  # classes x features
        self.known: torch.Tensor | None = None  # classes that have a prototype

    def local_loss(self, model, x, y, client):
        f = model.features(x)
        loss = F.cross_entropy(model.classifier(f), y)
        if self.prototypes is not None:
            known = self.known[y]
            if known.any():
                loss = loss + self.params.lam * F.mse_loss(f[known], self.prototypes[y[known]])
        return loss

    def finish_client(self, client, model, update):
        means, counts = class_means(model, client, self.cfg.eval.batch_size, self.federation.num_classes,
                                    lambda m, x: m.features(x))
        update.extras.update(prototypes=means, class_counts=counts)

    def aggregate(self, global_model, updates):
        super().aggregate(global_model, updates)
        self.prototypes, self.known = average_per_class(
            [u.extras["prototypes"] for u in updates], [u.extras["class_counts"] for u in updates], weighted=False)

    def state_dict(self):
        return {"prototypes": self.prototypes, "known": self.known}

    def load_state_dict(self, state):
        self.prototypes, self.known = state["prototypes"], state["known"]
