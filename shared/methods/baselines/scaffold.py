"""SCAFFOLD (Karimireddy et al., ICML'20), option II, global learning rate 1.

Local steps use the corrected gradient g + c - c_i, written here as the loss term <w, c - c_i>
(whose gradient is exactly c - c_i; the same for every sample, so it is added to each sample's
loss). c - c_i is one vector over all parameters (parameters_to_vector's order), a tensor that the
batched step stacks per client. A term per parameter would save a few operators a step
(FedAvg-CNN, forward and backward: 104 vs 118) only against a list of per-parameter views, which
the batched step's rules refuse (docs/runs.md, Methods); splitting the vector at every step costs more.
After K local steps with learning rate lr:
c_i+ = c_i - c + (w_g - w_i) / (K lr); the server averages the models and sets
c <- c + |S|/N * mean_i (c_i+ - c_i).

Deviation: the papers train with SGD momentum (0.9), under which K steps move the weights about
1/(1 - momentum) times further than K plain steps, so (w_g - w_i) / (K lr) overstates the
gradient tenfold and the corrections diverge (measured: 10% accuracy on CIFAR-10). K is
therefore replaced by FedNova's effective step count a(K, momentum), which is K for plain SGD.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from shared.methods.baselines.fednova import normaliser
from shared.methods.fedavg import Capabilities, FedAvg
from shared.runs.tensor_files import ClientStates


class SCAFFOLD(FedAvg):
    requires_local_sgd = True  # its arithmetic models plain local SGD steps
    # each client's control variate lives across rounds and enters its steps (per_sample_loss
    # holds: start_client sets the correction, a tensor)
    capabilities = Capabilities(independent_clients=False)

    @dataclass
    class Params:
        pass

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.c: list[torch.Tensor] | None = None  # server control variate, per parameter
        self.c_client = ClientStates("c_client")  # client -> its control variate c_i, on the host

    def prepare_round(self, round, global_model):
        if self.c is None:
            self.c = [torch.zeros_like(p) for p in global_model.parameters()]
        self.global_params = [p.detach().clone() for p in global_model.parameters()]

    def own_control_variate(self, client) -> list[torch.Tensor]:
        """c_i on the server's device (zero before the client's first round)."""
        if client.id in self.c_client:
            return self.c_client.on(client.id, self.c[0].device)
        return [torch.zeros_like(c) for c in self.c]

    def start_client(self, client, model):
        self.correction = parameters_to_vector(self.c) - parameters_to_vector(self.own_control_variate(client))

    def local_loss(self, model, x, y, client):
        linear = (parameters_to_vector(model.parameters()) * self.correction).sum()
        return F.cross_entropy(model(x), y) + linear

    def finish_client(self, client, model, update):
        c_i = self.own_control_variate(client)
        scale = 1.0 / (normaliser(update.num_steps, self.cfg.local.momentum) * self.cfg.local.lr)
        new_c_i = [
            ci - c + (wg - w.detach()) * scale
            for ci, c, wg, w in zip(c_i, self.c, self.global_params, model.parameters())
        ]
        update.extras["delta_c"] = [n - o for n, o in zip(new_c_i, c_i)]
        self.c_client[client.id] = new_c_i

    def aggregate(self, global_model, updates):
        super().aggregate(global_model, updates)
        fraction = len(updates) / len(self.federation.clients)
        for j, c in enumerate(self.c):
            c += fraction * torch.stack([u.extras["delta_c"][j] for u in updates]).mean(0)

    def state_dict(self):
        return {"c": self.c, "c_client": self.c_client}

    def load_state_dict(self, state):
        self.c, self.c_client = state["c"], ClientStates.from_saved("c_client", state["c_client"])
