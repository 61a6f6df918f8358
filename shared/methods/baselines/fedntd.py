"""FedNTD (Lee et al., NeurIPS'22): not-true distillation.

CE + beta * tau^2 * KL(softmax(z_g'/tau) || softmax(z'/tau)), where ' drops the true class's
column from both the global model's and the local model's logits.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shared.config.schema import NonNegative, Positive
from shared.methods.fedavg import GlobalTeacher, kl_div


def not_true_index(y: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """(B,) -> (B, K-1): each row's classes without its true one, in their order, as an index
    for gather (`columns`: arange(K - 1)). A gather rather than a boolean index, whose
    data-dependent shape vmap refuses: column j is class j for j < y and class j + 1 from y on."""
    return columns[None, :] + (columns[None, :] >= y[:, None]).long()


class FedNTD(GlobalTeacher):
    # FedAvg's capabilities hold: per-sample terms; the teacher is the round's

    @dataclass
    class Params:
        tau: Positive = 1.0
        beta: NonNegative = 1.0

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.columns = torch.arange(federation.num_classes - 1, device=federation.device)  # once, not per batch

    def local_loss(self, model, x, y, client):
        logits = model(x)
        teacher_logits = self.teacher_logits(x)
        p = self.params
        not_true = not_true_index(y, self.columns)  # one index for both models' logits
        ntd = kl_div(teacher_logits.gather(1, not_true), logits.gather(1, not_true), p.tau)
        return F.cross_entropy(logits, y) + p.beta * p.tau**2 * ntd
