"""FedDistill+ (Jeong et al. 2018, as run by FedGKD and FedGen): per-class logit distillation
on top of FedAvg.

Clients upload their per-class mean logits; the server averages them per class (weighted by the
clients' sample counts of that class); the local loss is CE + lambda KL(softmax(g[y]) || softmax(z)).
The weights are averaged as in FedAvg (the "+").
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shared.baselines.fedproto import average_per_class, class_means
from shared.fedavg import FedAvg, kl_div


class FedDistillPlus(FedAvg):
    @dataclass
    class Params:
        lam: float = 0.1

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.class_logits: torch.Tensor | None = None  # classes x classes
        self.known: torch.Tensor | None = None

    def local_loss(self, model, x, y, client):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if self.class_logits is not None:
            known = self.known[y]
            if known.any():
                loss = loss + self.params.lam * kl_div(self.class_logits[y[known]], logits[known])
        return loss

    def finish_client(self, client, model, update):
        means, counts = class_means(model, client, self.cfg.eval.batch_size, self.federation.num_classes,
                                    lambda m, x: m(x))
        update.extras.update(class_logits=means, class_counts=counts)

    def aggregate(self, global_model, updates):
        super().aggregate(global_model, updates)
        self.class_logits, self.known = average_per_class(
            [u.extras["class_logits"] for u in updates], [u.extras["class_counts"] for u in updates], weighted=True)

    def state_dict(self):
        return {"class_logits": self.class_logits, "known": self.known}

    def load_state_dict(self, state):
        self.class_logits, self.known = state["class_logits"], state["known"]
