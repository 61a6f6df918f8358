"""FedAvgM (Hsu et al., 2019): server momentum on the averaged update.

form "hsu" (the paper; default):  v <- beta v + (w_old - w_avg);        w <- w_old - eta_s v
form "ema" (MOON's code):         v <- beta v + (1 - beta)(w_old - w_avg); w <- w_old - eta_s v
FedNTD's code uses beta 0.7. The momentum acts on the parameters; BatchNorm's running statistics
take the plain average (momentum on a running variance can push it below zero).
"""

from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from shared.config.schema import Positive, Range
from shared.methods.fedavg import FedAvg, weighted_average


class FedAvgM(FedAvg):
    @dataclass
    class Params:
        beta: Annotated[float, Range(0, 1, high_open=True)] = 0.9
        server_lr: Positive = 1.0
        form: Literal["hsu", "ema"] = "hsu"

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.velocity: dict[str, torch.Tensor] = {}

    def aggregate(self, global_model, updates):
        averaged = weighted_average([u.state for u in updates], self.client_weights(updates))
        old = global_model.state_dict()
        p = self.params
        step = 1.0 if p.form == "hsu" else 1 - p.beta
        for name, _ in global_model.named_parameters():
            delta = old[name] - averaged[name]
            self.velocity[name] = p.beta * self.velocity.get(name, torch.zeros_like(delta)) + step * delta
            averaged[name] = old[name] - p.server_lr * self.velocity[name]
        global_model.load_state_dict(averaged)

    def state_dict(self):
        return {"velocity": self.velocity}

    def load_state_dict(self, state):
        self.velocity = state["velocity"]
