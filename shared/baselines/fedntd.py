"""FedNTD (Lee et al., NeurIPS'22): not-true distillation.

CE + beta * tau^2 * KL(softmax(z_g'/tau) || softmax(z'/tau)), where ' drops the true class's
column from both the global model's and the local model's logits.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shared.config import NonNegative, Positive
from shared.fedavg import GlobalTeacher, kl_div


def not_true_logits(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(B, K) -> (B, K-1): each row without its true class, the others in their order. A gather
    rather than a boolean index, whose data-dependent shape vmap refuses: column j of the result
    is class j for j < y and class j + 1 from y on."""
    columns = torch.arange(logits.shape[1] - 1, device=logits.device)[None, :]
    return logits.gather(1, columns + (columns >= y[:, None]).long())


class FedNTD(GlobalTeacher):
    # FedAvg's capabilities hold: per-sample terms; the teacher is the round's

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
