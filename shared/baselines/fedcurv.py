"""FedCurv (Shoham et al., 2019): an EWC penalty from the other clients' Fisher information.

After local training a client sends u = the mean over minibatches (about `fisher_samples`
samples) of the squared batch-mean gradient, and v = u * theta. The server keeps each client's
latest (u, v). Client i adds lambda * (<P, theta^2> - 2 <Q, theta>), P and Q the sums of the
other clients' u and v. FedNTD's released code subtracts the client's own terms in place,
modifying the server's sums (an aliasing bug); here P and Q are fresh tensors each time.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shared.client_state import ClientStates
from shared.config import Count, NonNegative
from shared.fedavg import Capabilities, FedAvg


class FedCurv(FedAvg):
    # each client's Fisher information lives across rounds and enters its loss
    capabilities = Capabilities(per_sample_loss=False, independent_clients=False)

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
            self.P = [s - own for s, own in zip(self.u_sum, self.u.on(client.id, device))]
            self.Q = [s - own for s, own in zip(self.v_sum, self.v.on(client.id, device))]
        else:
            self.P, self.Q = self.u_sum, self.v_sum

    def local_loss(self, model, x, y, client):
        loss = F.cross_entropy(model(x), y)
        if self.P is not None:
            penalty = sum((P * w * w).sum() - 2 * (Q * w).sum() for P, Q, w in zip(self.P, self.Q, model.parameters()))
            loss = loss + self.params.lam * penalty
        return loss

    def finish_client(self, client, model, update):
        u = diagonal_fisher(model, client, self.cfg.local.batch_size, self.params.fisher_samples)
        self.u[client.id] = u
        self.v[client.id] = [f * w.detach() for f, w in zip(u, model.parameters())]

    def state_dict(self):
        return {"u": self.u, "v": self.v}

    def load_state_dict(self, state):
        self.u, self.v = ClientStates.from_saved("u", state["u"]), ClientStates.from_saved("v", state["v"])


def summed(states: ClientStates, device: torch.device) -> list[torch.Tensor] | None:
    """Per parameter, the sum over clients (in the order they first trained) of their tensors,
    on `device`; a client's tensors move there one client at a time."""
    total = None
    for client in states:
        tensors = states.on(client, device)
        total = tensors if total is None else [s + t for s, t in zip(total, tensors)]
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
