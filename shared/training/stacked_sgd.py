"""torch.optim.SGD for many clients at once, on stacks of their weights (shared/training/batched.py's
update: every lane's SGD step in a few kernels)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from shared.config.schema import LocalConfig


def view_per_client(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(clients,) -> (clients, 1, 1, ...), to broadcast over a stacked tensor like `like`."""
    return values.view(-1, *[1] * (like.dim() - 1))


def stacks_in(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """Views of `flat` shaped as `like`, one after another, each contiguous."""
    views, start = [], 0
    for t in like:
        views.append(flat[start : start + t.numel()].view(t.shape))
        start += t.numel()
    return views


class StackedSGD:
    """torch.optim.SGD (momentum, weight decay, no dampening or Nesterov) for many clients at
    once, on stacks of shape (clients, *shape), with SGD's operations in SGD's order, so each
    client's weights and momentum are what its own torch.optim.SGD would give.

    The stacks (`params`, `momentum_buffers`) are views into one flat tensor each, one stack
    after another, so that each of SGD's operations is one kernel over every parameter of every
    client (one per parameter tensor and operation before: about 50 of a FedAvg-CNN step's
    137). Which clients a step updates is a mask laid out like the parameters, written by
    `select` only when it changes (a few times a round, as clients run out of batches): a
    client that is not selected keeps its weights and momentum exactly (where(), not a
    multiplication by 0)."""

    def __init__(self, params: list[torch.Tensor], local: LocalConfig):
        self.flat = torch.cat([p.detach().reshape(-1) for p in params])
        self.params = stacks_in(self.flat, params)
        self.flat_momentum = torch.zeros_like(self.flat)
        self.momentum_buffers = stacks_in(self.flat_momentum, params)
        self.selected_mask = torch.zeros_like(self.flat, dtype=torch.bool)
        self.masks = stacks_in(self.selected_mask, params)
        self.selected: object = None  # the host's key of what the mask holds
        self.lr, self.momentum, self.weight_decay, self.grad_clip = (
            local.lr,
            local.momentum,
            local.weight_decay,
            local.grad_clip,
        )

    def reset(self) -> None:
        """Fresh optimisers, as every client starts one each round."""
        self.flat_momentum.zero_()

    @torch.no_grad()
    def select(self, key: object, active: Callable[[], torch.Tensor]) -> None:
        """The clients the next steps update: `key` a value the host knows them by, `active()`
        them as a (clients,) bool on the device, made and written only when the key changes (no
        host synchronisation, and no kernel at a step whose clients are the last step's)."""
        if key == self.selected:
            return
        selected = active()
        for mask in self.masks:
            mask.copy_(view_per_client(selected, mask).expand_as(mask))
        self.selected = key

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor]) -> None:
        """One SGD step of the selected clients, `grads` a stack per parameter."""
        if self.grad_clip:  # clip_grad_norm_ per client: the norm over all of its gradients
            norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])
            scale = (self.grad_clip / (torch.linalg.vector_norm(norms, dim=0) + 1e-6)).clamp(max=1.0)
            grads = [g * view_per_client(scale, g) for g in grads]
        grad = torch.cat([g.reshape(-1) for g in grads])
        if self.weight_decay:
            grad = grad.add(self.flat, alpha=self.weight_decay)
        if self.momentum:  # SGD's first step sets the buffer to the gradient: 0 * m + g is that
            momentum = self.flat_momentum
            momentum.copy_(torch.where(self.selected_mask, momentum * self.momentum + grad, momentum))
            grad = momentum
        self.flat.add_(torch.where(self.selected_mask, grad, 0.0), alpha=-self.lr)

    @torch.no_grad()
    def step_rows(self, rows: torch.Tensor, grads: list[torch.Tensor], key: object) -> None:
        """A step of the clients `rows` alone (`grads`: theirs, in the order of `rows`; `key`: the
        rows as the host knows them, as for `select`): the same step, their gradients in their
        rows and zeros elsewhere, the others not selected."""
        self.select(
            key,
            lambda: torch.zeros(len(self.params[0]), dtype=torch.bool, device=rows.device).index_fill_(0, rows, True),
        )
        self.step([torch.zeros_like(p).index_copy_(0, rows, g) for p, g in zip(self.params, grads)])
