"""FedLSD (Lee et al., first version of FedNTD; FedCAD's baseline):
(1 - a) CE + a KL(p_g || p) at temperature T, the teacher being the round's global model.

The loss is written per sample with a per-class weight a_y so that FedCAD, which only changes
how a_y is set, reuses it unchanged (FedCAD with beta = gamma = a is exactly this method).
The FedCAD paper tunes a in {0.1, 0.3, 0.5} and does not report its choice; 0.3 is the default.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shared.config.schema import Positive, Probability
from shared.methods.fedavg import Capabilities, GlobalTeacher, kl_per_sample


class FedLSD(GlobalTeacher):
    # the loss reads a_y, a tensor start_client sets for each client (per_sample_loss still
    # holds: the batched step stacks it per client)
    capabilities = Capabilities(independent_clients=False)

    @dataclass
    class Params:
        alpha: Probability = 0.3
        temperature: Positive = 2.0

    def class_weights(self, client) -> torch.Tensor:
        """a_y for every class y: one constant here; FedCAD's class-wise estimate overrides it."""
        return torch.full((self.federation.num_classes,), self.params.alpha, device=self.federation.device)

    def start_client(self, client, model):
        self.alpha_y = self.class_weights(client)

    def local_loss(self, model, x, y, client):
        logits = model(x)
        teacher_logits = self.teacher_logits(x)
        a = self.alpha_y[y]
        ce = F.cross_entropy(logits, y, reduction="none")
        kd = kl_per_sample(teacher_logits, logits, self.params.temperature)
        return ((1 - a) * ce + a * kd).mean()
