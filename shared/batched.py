"""Several clients' local training in one step: `trainer.clients_per_step=k`.

With models as small as FedAvg-CNN (62k parameters) or ResNet-8 (78k), one client's step is a
few hundred tiny kernels and the GPU waits on Python and kernel launches. This trainer keeps
the k clients' weights stacked, one tensor of shape (k, *shape) per parameter, and runs every
client's step at once:

    x, y      each client's next batch from its own `Client.batches` (the sequential trainer's
              samples and augmentation, drawn from the same per-client generator), stacked to
              (k, B, ...); a shorter last batch is padded, a client that has taken all its
              steps keeps a stale batch
    weight    (k, B): 1/s on the s real samples of a client's batch, 0 on padding
    loss      vmap over clients of  sum_i weight_i * local_loss(model_c, x_i, y_i),  the inner
              vmap over samples: the mean of the method's own loss over each client's own batch
    update    torch.optim.SGD's arithmetic on the stacks, applied only to clients that had a
              batch, so a client with fewer steps keeps its weights and momentum as they were

Why the inner vmap over samples: it lets every step have one shape, padding included, without
touching the method's loss. Each sample's loss is taken alone and weighted, so a padded batch
gives exactly the mean over its real samples; vmap folds the sample dimension back into the
batch, so the kernels are those of an ordinary batch (the clients' convolutions become one
grouped convolution, the teacher's forward pass one batch of k * B images).

On CUDA (`trainer.cuda_graphs`, on by default) the whole step (forward, backward, SGD) is
captured once per round into a CUDA graph and replayed: a step then costs one launch. On a
CPU the small convolutions are compute-bound and grouped ones are slower than k separate
ones, so there the sequential trainer is the faster (README, Performance).

What it covers: SGD (with momentum, weight decay and gradient clipping), models without
buffers or dropout (no BatchNorm statistics: FedAvg-CNN and ResNet-8; ResNet-50 trains
sequentially), and methods with all of FedAvg's `capabilities` (shared/fedavg.py) that keep
its `start_client` and `finish_client`; shared/client_training.py checks this and trains
anything else one client after another, with a note on stderr saying why.

The results equal the sequential trainer's up to floating-point rounding (tests/test_batched.py
checks weights after a round in float64), so `trainer.clients_per_step` is not part of a run's id.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from shared.config import LocalConfig, RunConfig
from shared.fedavg import ClientUpdate, Diverged, FedAvg
from shared.federation import Client, Federation
from shared.seeding import client_generator
from shared.models import Net


def view_per_client(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(clients,) -> (clients, 1, 1, ...), to broadcast over a stacked tensor like `like`."""
    return values.view(-1, *[1] * (like.dim() - 1))


class StackedSGD:
    """torch.optim.SGD (momentum, weight decay, no dampening or Nesterov) for many clients at
    once, on stacks of shape (clients, *shape), with SGD's operations in SGD's order, so each
    client's weights and momentum are what its own torch.optim.SGD would give. A client that is
    not active at a step keeps both exactly: its step is multiplied by 0 and its momentum by 1."""

    def __init__(self, params: list[torch.Tensor], local: LocalConfig):
        self.params = params
        self.momentum_buffers = [torch.zeros_like(p) for p in params]
        self.lr, self.momentum, self.weight_decay, self.grad_clip = (
            local.lr, local.momentum, local.weight_decay, local.grad_clip)

    def reset(self) -> None:
        """Fresh optimisers, as every client starts one each round."""
        for buffer in self.momentum_buffers:
            buffer.zero_()

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor], active: torch.Tensor) -> None:
        if self.grad_clip:  # clip_grad_norm_ per client: the norm over all of its gradients
            norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])
            scale = (self.grad_clip / (torch.linalg.vector_norm(norms, dim=0) + 1e-6)).clamp(max=1.0)
            grads = [g * view_per_client(scale, g) for g in grads]
        if self.weight_decay:
            grads = [g.add(p, alpha=self.weight_decay) for g, p in zip(grads, self.params)]
        on = active.to(self.params[0].dtype)
        grads = [g * view_per_client(on, g) for g in grads]
        if self.momentum:  # SGD's first step sets the buffer to the gradient: 0 * m + g is that
            keep = torch.where(active, self.momentum, 1.0).to(on.dtype)
            for buffer, g in zip(self.momentum_buffers, grads):
                buffer.mul_(view_per_client(keep, buffer)).add_(g)
            grads = [buffer * view_per_client(on, buffer) for buffer in self.momentum_buffers]
        for p, g in zip(self.params, grads):
            p.add_(g, alpha=-self.lr)


class MethodLoss(nn.Module):
    """The method's `local_loss` as a module whose only submodule is the model, so that
    functional_call runs it with one client's weights; the method's teachers are not
    submodules and keep their own."""

    def __init__(self, method: FedAvg, model: Net):
        super().__init__()
        self.model = model
        self.method = method

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.method.local_loss(self.model, x, y, None)


class BatchedClients:
    """Trains up to `slots` clients at once; `train` takes them a group at a time."""

    def __init__(self, method: FedAvg, model: Net, federation: Federation, cfg: RunConfig, slots: int):
        self.model, self.cfg = model, cfg
        self.device = federation.device
        names_params = [(f"model.{name}", p) for name, p in model.named_parameters()]
        self.names = [name for name, _ in names_params]
        self.params = [p.detach().unsqueeze(0).repeat(slots, *[1] * p.dim()) for _, p in names_params]
        self.optimizer = StackedSGD(self.params, cfg.local)
        sample = federation.augmenter.normalize(federation.train_x[:1])  # dtype and layout of a batch
        batch = cfg.local.batch_size
        self.x = torch.zeros(slots, batch, *sample.shape[1:], dtype=sample.dtype, device=self.device)
        self.y = torch.zeros(slots, batch, dtype=federation.train_y.dtype, device=self.device)
        self.sizes = torch.zeros(slots, dtype=torch.long, device=self.device)  # this step's batch sizes
        self.loss_sums = torch.zeros(slots, device=self.device)
        self.positions = torch.arange(batch, device=self.device)
        loss = MethodLoss(method, model)

        def client_loss(params, x, y, weight):
            per_sample = vmap(lambda xi, yi: functional_call(loss, params, (xi[None], yi[None])))(x, y)
            return (per_sample * weight).sum()

        self.loss_and_grads = vmap(grad_and_value(client_loss))
        self.use_graph = self.device.type == "cuda" and cfg.trainer.cuda_graphs
        self.graph, self.graph_round, self.graph_pool = None, None, None

    @property
    def slots(self) -> int:
        return len(self.sizes)

    def step(self) -> None:
        """One SGD step of every client with a batch in self.x / self.y / self.sizes; no host
        synchronisation, so that it can be captured in a CUDA graph."""
        active = self.sizes > 0
        weight = (self.positions < self.sizes[:, None]).to(self.params[0].dtype)
        weight = weight / self.sizes.clamp(min=1)[:, None].to(weight.dtype)
        params = dict(zip(self.names, self.params))
        # cache_enabled=False: autocast's weight cache cannot live across CUDA graph replays
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.trainer.amp, cache_enabled=False):
            grads, losses = self.loss_and_grads(params, self.x, self.y, weight)
        self.optimizer.step([grads[name] for name in self.names], active)
        self.loss_sums += losses.detach().float()  # 0 for a client without a batch

    def capture(self) -> None:
        """Record `step` into a CUDA graph. The method's state for the round (its teacher) is
        captured with it, hence once per round. Warm-up steps run with every client inactive,
        which changes no weight, momentum or loss."""
        self.graph = None
        self.sizes.zero_()
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self.step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.graph_pool = self.graph_pool or torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # a stream of its own and thread_local: runs in other threads of the process
        # (shared/multirun.py) capture and run meanwhile
        with torch.cuda.graph(graph, pool=self.graph_pool, stream=side, capture_error_mode="thread_local"):
            self.step()
        self.graph = graph

    def schedule(self, clients: list[Client]) -> np.ndarray:
        """(steps, slots) batch sizes: client c's epochs of `num_batches` each, then zeros."""
        loc = self.cfg.local
        per_client = []
        for client in clients:
            length, count = client.epoch_length(loc.batch_size), client.num_batches(loc.batch_size)
            per_client.append([min(loc.batch_size, length - loc.batch_size * i) for i in range(count)] * loc.epochs)
        table = np.zeros((max(map(len, per_client), default=0), self.slots), dtype=np.int64)
        for c, sizes in enumerate(per_client):
            table[:len(sizes), c] = sizes
        return table

    def local_batches(self, client: Client, round: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """All of a client's batches of the round, from the generator `train_client` seeds."""
        generator = client_generator(self.cfg.seed, round, client.id, self.device)
        for _ in range(self.cfg.local.epochs):
            yield from client.batches(self.cfg.local.batch_size, generator)

    def train(self, clients: list[Client], global_model: Net, round: int) -> list[ClientUpdate]:
        """Local training of up to `slots` clients from the global weights; the same updates as
        `shared.client_training.train_client` for each, up to floating-point rounding."""
        loc = self.cfg.local
        self.model.train()
        with torch.no_grad():
            for stack, p in zip(self.params, global_model.parameters()):
                stack.copy_(p.detach().expand_as(stack))
        self.optimizer.reset()
        self.loss_sums.zero_()
        if self.use_graph and self.graph_round != round:
            self.capture()
            self.graph_round = round
        table = self.schedule(clients)
        table_on_device = torch.as_tensor(table, device=self.device)
        batches = [self.local_batches(client, round) for client in clients]
        for t, sizes in enumerate(table):
            self.sizes.copy_(table_on_device[t])
            full = [next(batches[c]) for c in range(len(clients))] if (sizes == loc.batch_size).all() else None
            if full is not None:  # the common step: one copy for every client's batch
                torch.stack([x for x, _ in full], out=self.x)
                torch.stack([y for _, y in full], out=self.y)
            else:
                for c, size in enumerate(sizes[:len(clients)]):
                    if size:
                        x, y = next(batches[c])
                        self.x[c, :size].copy_(x)
                        self.y[c, :size].copy_(y)
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step()

        steps = (table > 0).sum(0)
        finite = torch.stack([p.flatten(1).isfinite().all(1) for p in self.params]).all(0).tolist()
        loss_sums = self.loss_sums.tolist()
        updates = []
        for c, client in enumerate(clients):
            if not finite[c]:
                raise Diverged(f"client {client.id} diverged in round {round + 1} (non-finite weights)")
            state = {name.removeprefix("model."): p[c].clone() for name, p in zip(self.names, self.params)}
            updates.append(ClientUpdate(client.id, state, client.num_samples, int(steps[c]),
                                        loss_sums[c] / max(int(steps[c]), 1)))
        return updates
