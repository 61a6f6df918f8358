"""FedProx (Li et al., MLSys'20): CE + mu/2 * ||w - w_g||^2 over the parameters."""

from dataclasses import dataclass

import torch.nn.functional as F

from shared.config.schema import NonNegative
from shared.methods.fedavg import FedAvg, frozen_copy


class FedProx(FedAvg):
    # FedAvg's capabilities hold: the proximal term is the same for every sample of the batch

    @dataclass
    class Params:
        mu: NonNegative = 0.01

    def prepare_round(self, round, global_model):
        # a module rather than a list of tensors: the batched step stacks a module per run
        self.global_model = frozen_copy(global_model)

    def local_loss(self, model, x, y, client):
        proximal = sum(((w - w_g) ** 2).sum() for w, w_g in zip(model.parameters(), self.global_model.parameters()))
        return F.cross_entropy(model(x), y) + self.params.mu / 2 * proximal
