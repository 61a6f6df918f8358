"""FedProto (Tan et al., AAAI'22): CE + lambda * MSE(f(x), P_g[y]).

f(x) is the feature vector the classifier sees; a client's prototypes are its per-class feature
means; the server averages each class's prototypes over the clients that hold the class. FedProto
itself shares no weights; FedCSD's table compares global models, so the weights are averaged as
in FedAvg too. Prototypes are computed after local training, in eval mode, on the client's
unaugmented data (FedProto's code collects them from the last epoch's training batches).
A sample of a class that none of the last round's clients held adds zero, and the MSE is the mean
over the whole batch, as in FedProto's code (whose target for it is the feature itself): a mean
of per-sample terms, written as a 0/1 weight rather than a boolean index, whose shape vmap refuses.
"""

from dataclasses import dataclass

import torch.nn.functional as F

from shared.config.schema import NonNegative
from shared.methods.baselines.class_stats import ClassStatistics


class FedProto(ClassStatistics):
    @dataclass
    class Params:
        lam: NonNegative = 1.0

    weighted_by_samples = False  # each holder of a class counts once

    @staticmethod
    def embed(model, x):
        return model.features(x)

    def local_loss(self, model, x, y, client):
        f = model.features(x)
        loss = F.cross_entropy(model.classifier(f), y)
        if self.class_stats is not None:
            squared_error = ((f - self.class_stats[y]) ** 2).mean(1)
            loss = loss + self.params.lam * (self.known[y] * squared_error).mean()
        return loss
