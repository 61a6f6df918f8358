"""FedDistill+ (Jeong et al. 2018, as run by FedGKD and FedGen): per-class logit distillation
on top of FedAvg.

Clients upload their per-class mean logits; the server averages them per class (weighted by the
clients' sample counts of that class); the local loss is CE + lambda KL(softmax(g[y]) || softmax(z)).
The weights are averaged as in FedAvg (the "+"). A class that none of the last round's clients
held has g[y] = 0, a uniform target, and its samples count in the batch mean like any other, as
in both released codes (FedGen's userFedDistill.py, FedGKD's worker_feddistill.py: zero logits
for a class never seen); each sample's term is then on its own, which vmap needs.

Where the released codes differ (neither form is the paper's, which FedGKD and FedGen both
port): the per-class logits here are each client's means after its local training, in eval mode
on its unaugmented data, averaged over the round's clients holding the class, weighted by their
counts. FedGKD's code (master_feddistill.py) accumulates each client's logits of its training
steps (train mode, augmented) across rounds and sends a client the plain mean of every other
client's, zeros for a class one lacks, divided by N - 1; FedGen's averages its round's clients'
trackers uniformly. Both shrink a class's target logits where few clients hold it, so their
targets are softer than ours.
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
