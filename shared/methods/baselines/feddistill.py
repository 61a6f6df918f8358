"""FedDistill+ (Jeong et al. 2018, as run by FedGKD and FedGen): per-class logit distillation
on top of FedAvg.

Clients upload their per-class mean logits; the server averages them per class (weighted by the
clients' sample counts of that class); the local loss is CE + lambda KL(softmax(g[y]) || softmax(z)).
The weights are averaged as in FedAvg (the "+"). A class that none of the last round's clients
held has g[y] = 0, a uniform target, and its samples count in the batch mean like any other, as
in both released codes (FedGen's userFedDistill.py, FedGKD's worker_feddistill.py: zero logits
for a class never seen); each sample's term is then on its own, which vmap needs.
"""

from dataclasses import dataclass

import torch.nn.functional as F

from shared.config.schema import NonNegative
from shared.methods.baselines.class_stats import ClassStatistics
from shared.methods.fedavg import kl_div


class FedDistillPlus(ClassStatistics):
    @dataclass
    class Params:
        lam: NonNegative = 0.1

    weighted_by_samples = True

    @staticmethod
    def embed(model, x):
        return model(x)

    def local_loss(self, model, x, y, client):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if self.class_stats is not None:
            loss = loss + self.params.lam * kl_div(self.class_stats[y], logits)
        return loss
