"""FedCAD: class-wise adaptive self distillation (He et al., FL-AAAI-22; student abstract AAAI-22).

Per sample, with the round's global model as teacher (Eq. 5):

    L = (1 - a_y) CE(z, y) + a_y KL(p_g || p)            p = softmax(z / T), p_g = softmax(z_g / T)

with class-wise weights (Eq. 6), estimated on the server's auxiliary data each round:

    a_y = (gamma - beta) / 2 * E_{x|y}[ phi(y, p_g(x)) ] + (gamma + beta) / 2
    phi(y, p_g) = p_g[y] - sum_{k != y} p_g[k]  (in [-1, 1], so a_y lies in [beta, gamma])

The loss is FedLSD's with a_y in place of a constant, so beta = gamma = c is FedLSD with weight c,
and beta = gamma = 0 is FedAvg.
Switches: `estimate_on=local` estimates E_{x|y} on the client's own data (the student abstract);
`phi_at_temperature=false` takes p_g at T = 1 in phi (the paper defines p_g at temperature T).
"""

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from shared.config.schema import Positive, Probability, check
from shared.methods.baselines.fedlsd import FedLSD
from shared.methods.class_sums import count_by_class, sum_by_class
from shared.methods.fedavg import predict


def class_wise_weights(p: torch.Tensor, y: torch.Tensor, beta: float, gamma: float) -> torch.Tensor:
    """Eq. 6 from the teacher's class probabilities p (N, K) on labelled samples."""
    num_classes = p.shape[1]
    p_true = p.gather(1, y[:, None]).squeeze(1)
    phi = p_true - (1 - p_true)  # p_y - sum of the others
    expected_phi = sum_by_class(phi, y, num_classes) / count_by_class(y, num_classes).clamp(min=1)
    return (gamma - beta) / 2 * expected_phi + (gamma + beta) / 2


class FedCAD(FedLSD):
    @dataclass
    class Params:
        beta: Probability = 0.3  # lower bound of a_y; the paper tunes it in {0, 0.3, 0.5, 0.7}
        gamma: Probability = 0.5  # upper bound of a_y
        temperature: Positive = 2.0  # not stated for FedCAD; FedLSD's T
        estimate_on: Literal["aux", "local"] = (
            "aux"  # aux: the server's auxiliary data (the paper) | local (student abstract)
        )
        phi_at_temperature: bool = True  # p_g at temperature T in phi (the paper's p_g), else at T = 1

    @classmethod
    def check_config(cls, params, cfg):
        check(
            params.beta <= params.gamma,
            f"method.beta={params.beta} must be <= method.gamma={params.gamma}: a_y lies in [beta, gamma]",
        )
        check(
            params.estimate_on != "aux" or cfg.aux.per_class > 0,
            "FedCAD estimates its weights on the server's auxiliary data: set aux.per_class (32)",
        )

    def estimate(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        p = self.params
        t = p.temperature if p.phi_at_temperature else 1.0
        logits = predict(self.teacher, images, self.federation.augmenter, self.cfg.eval.batch_size)
        return class_wise_weights(F.softmax(logits / t, dim=1), labels, p.beta, p.gamma)

    def prepare_round(self, round, global_model):
        super().prepare_round(round, global_model)
        if self.params.estimate_on == "aux":
            self.server_weights = self.estimate(self.federation.aux.x, self.federation.aux.y)

    def class_weights(self, client):
        if self.params.estimate_on == "aux":
            return self.server_weights
        fed = self.federation
        return self.estimate(fed.train_x[client.index], fed.train_y[client.index])
