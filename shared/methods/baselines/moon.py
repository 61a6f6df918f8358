"""MOON (Li et al., CVPR'21): model-contrastive learning.

CE + mu * l_con with l_con = -log( e^{cos(q, q_g)/tau} / (e^{cos(q, q_g)/tau} + e^{cos(q, q_prev)/tau}) ),
q the representation the classifier sees (the projection head's output when the model has one,
as FedSSD and FedGKD run it; FedCSD runs MOON without), q_g from the global model and q_prev
from the client's own previous local model. A client that has not trained before has no
previous model and trains on CE alone: `start_client` weights its l_con by 0 rather than mu.
MOON's code fills every client's slot after the first round, from the nets it initialised, so
where not every client trains in round 1 (100 clients, 10 a round) a client's first round
contrasts with a random network of its own; where all train in round 1 the two agree. The
weight is a float, so that clients with and without a previous model train in one vmapped step:
where a batched step's clients differ in it, the step holds it as a tensor, one value per client
(shared/training/lane_state.py).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shared.config.schema import NonNegative, Positive
from shared.methods.fedavg import Capabilities, FedAvg, frozen_copy
from shared.runs.tensor_files import ClientStates


class MOON(FedAvg):
    # each client's previous local model lives across rounds and enters its loss (per_sample_loss
    # still holds: start_client loads it into a module, which the batched step stacks per client)
    capabilities = Capabilities(independent_clients=False)

    @dataclass
    class Params:
        mu: NonNegative = 5.0
        tau: Positive = 0.5

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.previous = ClientStates("previous")  # client -> its last local model, on the host

    def prepare_round(self, round, global_model):
        self.global_model = frozen_copy(global_model)
        self.previous_model = frozen_copy(global_model)  # a buffer that start_client loads

    def start_client(self, client, model):
        known = client.id in self.previous
        self.contrast_weight = self.params.mu if known else 0.0
        if known:
            self.previous_model.load_state_dict(self.previous.on(client.id, client.index.device))

    def local_loss(self, model, x, y, client):
        q = model.features(x)
        loss = F.cross_entropy(model.classifier(q), y)
        # a weight of 0 skips the term's two forward passes; a batched step whose clients' weights
        # differ computes it for each (a tensor of weights, 0 for some)
        if torch.is_tensor(self.contrast_weight) or self.contrast_weight > 0:
            with torch.no_grad():
                q_global = self.global_model.features(x)
                q_previous = self.previous_model.features(x)
            similarities = torch.stack([F.cosine_similarity(q, q_global), F.cosine_similarity(q, q_previous)], dim=1)
            positive_first = torch.zeros(len(x), dtype=torch.long, device=x.device)
            l_con = F.cross_entropy(similarities / self.params.tau, positive_first)
            loss = loss + self.contrast_weight * l_con
        return loss

    def finish_client(self, client, model, update):
        self.previous[client.id] = update.state

    def state_dict(self):
        return {"previous": self.previous}

    def load_state_dict(self, state):
        self.previous = ClientStates.from_saved("previous", state["previous"])
