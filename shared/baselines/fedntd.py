"""FedNTD (Lee et al., NeurIPS'22): not-true distillation.

CE + beta * tau^2 * KL(softmax(z_g'/tau) || softmax(z'/tau)), where ' drops the true class's
column from both the global model's and the local model's logits.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shared.config import NonNegative, Positive
from shared.fedavg import Capabilities, GlobalTeacher, kl_div


def not_true_logits(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(B, K) -> (B, K-1): each row without its true class."""
    keep = torch.ones_like(logits, dtype=torch.bool).scatter_(1, y[:, None], False)
    return logits[keep].view(len(logits), -1)


class FedNTD(GlobalTeacher):
    capabilities = Capabilities(per_sample_loss=False)  # dropping the true class is a boolean index, which vmap refuses

    @dataclass
    class Params:
        tau: Positive = 1.0
        beta: NonNegative = 1.0

    def local_loss(self, model, x, y, client):
        logits = model(x)
        teacher_logits = self.teacher_logits(x)
        p = self.params
        ntd = kl_div(not_true_logits(teacher_logits, y), not_true_logits(logits, y), p.tau)
        return F.cross_entropy(logits, y) + p.beta * p.tau ** 2 * ntd
