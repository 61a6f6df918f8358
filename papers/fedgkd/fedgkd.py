"""FedGKD: local-global knowledge distillation (Yao et al.).

The server keeps the last M global models; the teacher is their weight average w_bar, and each
client minimises (Eq. 3)

    CE(z, y) + gamma / 2 * KL( h(w_bar, x) || h(w, x) ).

FedGKD-VOTE distils from each buffered model separately, weighted by how well it does on the
server's validation split (images: 10% of the training data, `dataset.val_fraction=0.1`; text:
data the clients do not train on, `dataset.val_source`):

    CE(z, y) + sum_m gamma_m / 2 * KL( h(w_m, x) || h(w, x) ),  gamma_m / 2 = lambda * softmax_m(-L_m / beta),

L_m the validation loss of model m and beta = 1 / M. FedGKD+ is FedGKD on a model with a
projection head (`model.projection_dim=256`). Table IX's regulariser is `regulariser=kl|mse|none`;
its MSE is a mean squared error over the logits (averaged over the classes, as its name says and
the released code computes it; `class_reduction=sum` sums them, K times larger).

The buffer holds every global model the server sends, from the initial one w_0 (Algorithm 1
buffers each round's global model and Eq. 4 applies from the first round). `released_code=true`
runs CGCL-codes/FedGKD's loop instead: only aggregated models enter the buffer (so the first
round does not distil), the KL is multiplied by T^2, and it implies the code's
`local.grad_clip=10` and `federation.weighting=uniform`. Its coefficient, 0.1 in the README's
command, is our gamma / 2 at gamma = 0.2.
"""

from collections import deque
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from shared.config.schema import Count, NonNegative, Positive, check
from shared.methods.fedavg import FedAvg, frozen_copy, kl_div, predict, snapshot, weighted_average


class FedGKD(FedAvg):
    # FedAvg's capabilities hold: per-sample terms; the teachers are the round's

    @dataclass
    class Params:
        gamma: NonNegative = 0.2  # 0.2 for ResNet-8 and DistilBERT, 0.1 for ResNet-50
        buffer: Count = 5  # M, the number of past global models
        regulariser: Literal["kl", "mse", "none"] = "kl"  # kl | mse | none (Table IX)
        vote: bool = False  # FedGKD-VOTE
        vote_lambda: NonNegative = 0.1
        vote_beta: Positive | None = None  # the softmax temperature over validation losses; None: 1 / M
        temperature: Positive = 1.0
        released_code: bool = False
        # the MSE regulariser over the classes: "mean" (MSE, the released code) or "sum"; None
        # with the other regularisers, which it does not concern
        class_reduction: Literal["mean", "sum"] | None = None

        def __post_init__(self):  # resolved into the config, so a run id names the values used
            if self.regulariser == "mse" and self.class_reduction is None:
                self.class_reduction = "mean"

    @classmethod
    def implied_config(cls, params):
        """The released code's training loop: gradient norms clipped at 10, uniform averaging."""
        if params.released_code:
            return {"local": {"grad_clip": 10.0}, "federation": {"weighting": "uniform"}}
        return {}

    @classmethod
    def check_config(cls, params, cfg):
        check(
            not params.vote or cfg.dataset.has_validation,
            "FedGKD-VOTE weighs its buffer by validation loss: set dataset.val_fraction (0.1) or "
            "dataset.val_source=dev",
        )

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.buffer: deque[dict[str, torch.Tensor]] = deque(maxlen=params.buffer)

    def prepare_round(self, round, global_model):
        p = self.params
        if not (p.released_code and round == 0):  # the released buffer holds aggregated models only
            self.buffer.append(snapshot(global_model))
        self.distil = p.regulariser != "none" and len(self.buffer) > 0
        if not self.distil:
            return
        weight = p.gamma / 2 * (p.temperature**2 if p.released_code else 1.0)
        # the teachers in a ModuleList, not a list: the batched step stacks modules, per run
        if p.vote:
            self.teachers = nn.ModuleList(self.load(global_model, state) for state in self.buffer)
            val = self.federation.val
            losses = torch.stack(
                [
                    F.cross_entropy(predict(t, val.x, self.federation.augmenter, self.cfg.eval.batch_size), val.y)
                    for t in self.teachers
                ]
            )
            beta = p.vote_beta or 1 / len(self.buffer)
            self.teacher_weights = (p.vote_lambda * F.softmax(-losses / beta, dim=0)).tolist()
        else:
            average = weighted_average(list(self.buffer), [1.0] * len(self.buffer))
            self.teachers, self.teacher_weights = nn.ModuleList([self.load(global_model, average)]), [weight]
        # what the loss reads: the same numbers in a tensor, which the batched step stacks per run
        # (VOTE's differ between runs), each rounded once per round from the Python number to the
        # model's precision, that of the loss's terms, as arithmetic with the number rounds it
        self.weights = torch.tensor(
            self.teacher_weights, dtype=next(global_model.parameters()).dtype, device=self.federation.device
        )

    @staticmethod
    def load(model, state):
        teacher = frozen_copy(model)
        teacher.load_state_dict(state)
        return teacher

    def local_loss(self, model, x, y, client):
        z = model(x)
        loss = F.cross_entropy(z, y)
        if not self.distil:
            return loss
        for teacher, weight in zip(self.teachers, self.weights):
            with torch.no_grad():
                z_teacher = teacher(x)
            if self.params.regulariser == "kl":
                term = kl_div(z_teacher, z, self.params.temperature)
            else:
                squared = (z_teacher - z) ** 2
                term = squared.mean() if self.params.class_reduction == "mean" else squared.sum(1).mean()
            # in the term's precision, as a Python number is: no cast where the term is in the
            # model's (a bf16 term of CPU autocast casts here)
            loss = loss + weight.to(term.dtype) * term
        return loss

    def state_dict(self):
        return {"buffer": list(self.buffer)}

    def load_state_dict(self, state):
        self.buffer.extend(state["buffer"])
