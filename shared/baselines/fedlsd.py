"""FedLSD (Lee et al., first version of FedNTD; FedCAD's baseline):
(1 - a) CE + a KL(p_g || p) at temperature T, the teacher being the round's global model.

FedCAD with beta = gamma = a is this method. The FedCAD paper tunes a in {0.1, 0.3, 0.5} and
does not report its choice; 0.3 is the default here.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shared.fedavg import FedAvg, frozen_copy, kl_div


class FedLSD(FedAvg):
    @dataclass
    class Params:
        alpha: float = 0.3
        temperature: float = 2.0

    def prepare_round(self, round, global_model):
        self.teacher = frozen_copy(global_model)

    def local_loss(self, model, x, y, client):
        logits = model(x)
        with torch.no_grad():
            teacher_logits = self.teacher(x)
        a = self.params.alpha
        return (1 - a) * F.cross_entropy(logits, y) + a * kl_div(teacher_logits, logits, self.params.temperature)
