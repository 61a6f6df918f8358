"""FedCurv (Shoham et al., 2019): an EWC penalty from the other clients' Fisher information.

After local training a client sends u = the mean over minibatches (about `fisher_samples`
samples) of the squared batch-mean gradient, and v = u * theta. The server keeps each client's
latest (u, v). Client i adds lambda * (<P, theta^2> - 2 <Q, theta>), P and Q the sums of the
other clients' u and v. FedNTD's released code subtracts the client's own terms in place,
modifying the server's sums (an aliasing bug); here P and Q are fresh tensors each time.
P and Q are single vectors over all parameters (in parameters_to_vector's order) rather than one
tensor per parameter: a tensor attribute is what the batched step stacks per client. One
concatenation of the weights per step is also the cheaper form: per-parameter terms against
pre-split views of P and Q dispatch more operators (FedAvg-CNN, forward and backward: 204 vs 148).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from shared.config.schema import Count, NonNegative
from shared.methods.fedavg import Capabilities, FedAvg
from shared.runs.tensor_files import ClientStates


class FedCurv(FedAvg):
    # each client's Fisher information lives across rounds and enters its loss (per_sample_loss
    # holds: the penalty is the same for every sample, and P, Q are tensors set in start_client)
    capabilities = Capabilities(independent_clients=False)

    @dataclass
    class Params:
        lam: NonNegative = 1e-3
        fisher_samples: Count = 500

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.u = ClientStates("u")  # client -> diagonal Fisher per parameter, on the host
        self.v = ClientStates("v")  # client -> Fisher * its weights, on the host

    def prepare_round(self, round, global_model):
        device = self.federation.device
        self.u_sum, self.v_sum = summed(self.u, device), summed(self.v, device)

    def start_client(self, client, model):
        if self.u_sum is None:
            self.P = self.Q = None
        elif client.id in self.u:
            device = self.federation.device
            self.P = self.u_sum - parameters_to_vector(self.u.on(client.id, device))
            self.Q = self.v_sum - parameters_to_vector(self.v.on(client.id, device))
        else:
            self.P, self.Q = self.u_sum, self.v_sum

    def local_loss(self, model, x, y, client):
        loss = F.cross_entropy(model(x), y)
        if self.P is not None:
            w = parameters_to_vector(model.parameters())
            loss = loss + self.params.lam * ((self.P * w * w).sum() - 2 * (self.Q * w).sum())
        return loss

    def finish_client(self, client, model, update):
        u = diagonal_fisher(model, client, self.cfg.local.batch_size, self.params.fisher_samples)
        self.u[client.id] = u
        self.v[client.id] = [f * w.detach() for f, w in zip(u, model.parameters())]

    def state_dict(self):
        return {"u": self.u, "v": self.v}

    def load_state_dict(self, state):
        self.u, self.v = ClientStates.from_saved("u", state["u"]), ClientStates.from_saved("v", state["v"])


def summed(states: ClientStates, device: torch.device) -> torch.Tensor | None:
    """The sum over clients (in the order they first trained) of their tensors, as one vector
    over all parameters, on `device`; a client's tensors move there one client at a time."""
    total = None
    for client in states:
        vector = parameters_to_vector(states.on(client, device))
        total = vector if total is None else total + vector
    return total


def diagonal_fisher(model, client, batch_size: int, samples: int) -> list[torch.Tensor]:
    """Mean over minibatches of the squared gradient of the batch-mean loss."""
    squares = [torch.zeros_like(p) for p in model.parameters()]
    generator = torch.Generator(client.index.device).manual_seed(client.id)
    batches = 0
    for x, y in client.batches(batch_size, generator, augment=False):
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        for s, p in zip(squares, model.parameters()):
            s += p.grad.detach() ** 2
        batches += 1
        if batches >= math.ceil(samples / batch_size):
            break
    model.zero_grad(set_to_none=True)
    return [s / batches for s in squares]
