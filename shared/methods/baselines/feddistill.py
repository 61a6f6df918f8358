"""FedDistill+ (Jeong et al. 2018, as run by FedGKD and FedGen): per-class logit distillation
on top of FedAvg.

Clients upload their per-class mean logits; the server averages them per class (weighted by the
clients' sample counts of that class); the local loss is CE + lambda KL(softmax(g[y]) || softmax(z)).
The weights are averaged as in FedAvg (the "+"). A class that none of the last round's clients
held has g[y] = 0, a uniform target, and its samples count in the batch mean like any other, as
in FedGen's userFedDistill.py (zero logits for a class never seen); each sample's term is then on
its own, which vmap needs.

Where the released codes differ (neither is the paper's, which FedGKD and FedGen both port):
the per-class logits here are each client's means after its local training, in eval mode on its
unaugmented data, averaged over the round's clients holding the class, weighted by their counts.
FedGen's code averages its round's clients' trackers of training-step logits uniformly. FedGKD's
server (master_feddistill.py) computes, for each client, the plain mean of every other client's
training-step logits, but its clients receive them into a copy (worker_feddistill.py's
`dist.recv(tensor=self.global_logits.clone().detach().cpu(), src=0)`) and keep the zero logits
they started with: from the second round on, every sample's target is the uniform distribution,
a confidence penalty of weight lambda. `method.soft_labels=uniform` trains that form, the server's
statistics computed and unused as in that code; the tables train the method as described.
"""

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from shared.config.schema import NonNegative
from shared.methods.baselines.class_stats import ClassStatistics
from shared.methods.fedavg import kl_div


class FedDistillPlus(ClassStatistics):
    @dataclass
    class Params:
        lam: NonNegative = 0.1
        # the soft labels distilled: unset, the class's averaged logits (the method as described);
        # `uniform`, zero logits for every class, the form FedGKD's released code trains
        soft_labels: Literal["uniform"] | None = None

    weighted_by_samples = True

    @staticmethod
    def embed(model, x):
        return model(x)

    def local_loss(self, model, x, y, client):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if self.class_stats is not None:  # from the second round on
            soft = torch.zeros_like(logits) if self.params.soft_labels == "uniform" else self.class_stats[y]
            loss = loss + self.params.lam * kl_div(soft, logits)
        return loss
