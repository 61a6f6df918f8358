"""Per-class statistics that clients upload and the server averages (FedProto's feature
prototypes, FedDistill+'s class logits, FedCSD's logit prototypes)."""

from __future__ import annotations

import torch

from shared.methods.class_sums import count_by_class, sum_by_class
from shared.methods.fedavg import FedAvg


@torch.no_grad()
def class_means(model, client, batch_size: int, num_classes: int, embed) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class mean of embed(model, x) over a client's unaugmented data, in eval mode, and
    the per-class sample counts."""
    was_training = model.training
    model.eval()
    sums, counts = None, torch.zeros(num_classes, device=client.index.device)
    for x, y in client.in_order(batch_size):
        e = embed(model, x).float()
        if sums is None:
            sums = torch.zeros(num_classes, e.shape[1], device=e.device)
        sums += sum_by_class(e, y, num_classes)
        counts += count_by_class(y, num_classes)
    model.train(was_training)
    return sums / counts.clamp(min=1)[:, None], counts


def average_per_class(
    means: list[torch.Tensor], counts: list[torch.Tensor], weighted: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Average each class's vectors over the clients holding it (uniformly, or by sample count)."""
    held = torch.stack([(c > 0).to(means[0].dtype) for c in counts])  # clients x classes
    w = torch.stack(counts).to(means[0].dtype) if weighted else held
    total = w.sum(0)
    average = torch.einsum("kc,kcd->cd", w, torch.stack(means)) / total.clamp(min=1)[:, None]
    return average, total > 0


class ClassStatistics(FedAvg):
    """FedAvg plus a per-class mean of `embed(model, x)` that each client computes after local
    training and the server averages per class into `self.class_stats` (classes x dim);
    `self.known` marks the classes some client holds. A subclass sets `embed` and
    `weighted_by_samples`, and uses the statistics in its loss."""

    weighted_by_samples = False
    # FedAvg's capabilities hold: the statistics are the round's, the losses per-sample terms,
    # and finish_client only uploads (into the update) what the trained model computes

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.class_stats: torch.Tensor | None = None
        self.known: torch.Tensor | None = None

    @staticmethod
    def embed(model, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def finish_client(self, client, model, update):
        means, counts = class_means(model, client, self.cfg.eval.batch_size, self.federation.num_classes, self.embed)
        update.extras.update(class_means=means, class_counts=counts)

    def aggregate(self, global_model, updates):
        super().aggregate(global_model, updates)
        self.class_stats, self.known = average_per_class(
            [u.extras["class_means"] for u in updates],
            [u.extras["class_counts"] for u in updates],
            weighted=self.weighted_by_samples,
        )

    def state_dict(self):
        return {"class_stats": self.class_stats, "known": self.known}

    def load_state_dict(self, state):
        self.class_stats, self.known = state["class_stats"], state["known"]
