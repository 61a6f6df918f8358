"""FedSSD: selective self distillation (He et al., "Learning Critically").

The server measures how credible the global model is, per class, on its auxiliary data
(64 samples per class): A is the global model's row-normalised confusion matrix,
A[k1, k2] = P(predict k2 | true class k1), and

    M_class[k]  = A[k, k] * (1 - max_{j != k} A[j, k])      right on k, and rarely predicts k wrongly
    M_sample(x) = 1 - (1 - p_g(x)[y]) ** 0.5                 confident on this sample's true class
    M(x)[k]     = M_max * relu(M_class[k] * M_sample(x) - 0.1)

and each client minimises  CE(z, y) + mean_batch || M(x) * z_g(x) - M(x) * z(x) ||^2.

As written, M sits inside the square: the squared difference is weighted by M^2 <= M_max^2
(at most 1e-4 at M_max = 0.01), which leaves FedSSD within noise of FedAvg on real CIFAR-10
(benchmarks/README.md). `mask_weight=m` is a reading that is NOT the paper's text: it weights
the squared difference by M, sum_k M[k] (z_g[k] - z[k])^2. Unset (the default) is the paper's.

Table III's variants replace the selective term by a constant-weight one (`loss=kl`:
alpha * KL(p_g || p); `loss=mse`: alpha * ||z_g - z||^2), with alpha = `m_max`.
No official code exists; the ambiguities are listed in papers/fedssd/README.md.
"""

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from shared.config.schema import NonNegative, Probability, check
from shared.methods.fedavg import GlobalTeacher, kl_div, predict


def confusion_counts(pred: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """C[k1, k2]: the samples of true class k1 predicted as k2 (float: whole numbers)."""
    counts = torch.zeros(num_classes, num_classes, device=y.device)
    counts.index_put_((y, pred), torch.ones_like(y, dtype=counts.dtype), accumulate=True)
    return counts


def credibility_matrix(pred: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Row-normalised confusion matrix: A[k1, k2] = P(predict k2 | true class k1)."""
    counts = confusion_counts(pred, y, num_classes)
    return counts / counts.sum(1, keepdim=True).clamp(min=1)


def class_credibility(A: torch.Tensor) -> torch.Tensor:
    """M_class[k] = A[k, k] * (1 - max_{j != k} A[j, k])."""
    off_diagonal = A - torch.diag(torch.diagonal(A))
    return torch.diagonal(A) * (1 - off_diagonal.max(0).values)


def sample_credibility(teacher_logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """M_sample(x) = 1 - (1 - p_g(x)[y]) ** 0.5."""
    p_true = F.softmax(teacher_logits.float(), dim=1).gather(1, y[:, None]).squeeze(1)
    return 1 - (1 - p_true).clamp(min=0).sqrt()


def selective_mask(m_class: torch.Tensor, m_sample: torch.Tensor, m_max: float, threshold: float = 0.1) -> torch.Tensor:
    """M(x)[k] = M_max * relu(M_class[k] * M_sample(x) - threshold), shape (B, K)."""
    return m_max * F.relu(m_class[None, :] * m_sample[:, None] - threshold)


class FedSSD(GlobalTeacher):
    # FedAvg's capabilities hold: per-sample terms; the teacher and M_class are the round's

    @dataclass
    class Params:
        m_max: NonNegative = 0.01  # 0.01 on CIFAR-10, 0.001 on CIFAR-100 and Tiny-ImageNet
        threshold: Probability = 0.1
        loss: Literal["ssd", "kl", "mse"] = "ssd"  # ssd | kl | mse (Table III; the constant weight is m_max)
        # ||.||^2 sums the squared logit differences over classes (the paper's norm); "mean"
        # divides by K, as torch's MSELoss would (a K-times smaller distillation weight)
        class_reduction: Literal["sum", "mean"] = "sum"
        # None: the paper's ||M z_g - M z||^2 (weight M^2); "m": M (z_g - z)^2, not the paper's
        # text. None rather than a named default keeps the key out of run ids while unset.
        mask_weight: Literal["m"] | None = None

    @classmethod
    def check_config(cls, params, cfg):
        check(
            params.loss != "ssd" or cfg.aux.per_class > 0,
            "FedSSD's credibility needs the server's auxiliary data: set aux.per_class (64)",
        )

    def prepare_round(self, round, global_model):
        super().prepare_round(round, global_model)
        if self.params.loss == "ssd":
            aux = self.federation.aux
            pred = predict(self.teacher, aux.x, self.federation.augmenter, self.cfg.eval.batch_size).argmax(1)
            self.m_class = class_credibility(credibility_matrix(pred, aux.y, self.federation.num_classes))

    def local_loss(self, model, x, y, client):
        z = model(x)
        z_g = self.teacher_logits(x)
        p = self.params
        if p.loss == "kl":
            return F.cross_entropy(z, y) + p.m_max * kl_div(z_g, z)
        reduce = (lambda d: d.sum(1)) if p.class_reduction == "sum" else (lambda d: d.mean(1))
        if p.loss == "mse":
            return F.cross_entropy(z, y) + p.m_max * reduce((z_g - z) ** 2).mean()
        mask = selective_mask(self.m_class, sample_credibility(z_g, y), p.m_max, p.threshold)
        if p.mask_weight == "m":
            return F.cross_entropy(z, y) + reduce(mask * (z_g - z) ** 2).mean()
        return F.cross_entropy(z, y) + reduce((mask * z_g - mask * z) ** 2).mean()
