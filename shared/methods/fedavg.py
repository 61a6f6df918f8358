"""FedAvg (McMahan et al., AISTATS'17) and the hooks through which every other method plugs in.

The loop in `shared.training.trainer` calls, each round:

    prepare_round(round, global_model)           server: teachers, confusion matrices, buffers
    for each sampled client:
        start_client(client, model)              client state that lives across rounds
        for each batch: local_loss(model, x, y, client, **step_inputs(client, len(y), generator))
                                                 the per-batch objective
        finish_client(client, model, update)     what the client sends back besides weights
    aggregate(global_model, updates)             server: weighted average by default
    round_metrics()                              method-specific numbers for the log

A method subclasses `FedAvg`, declares its hyperparameters in a nested `Params` dataclass, and
overrides only the hooks it needs. Cross-round state (MOON's previous models, SCAFFOLD's control
variates, FedGKD's buffer) goes in `state_dict()` so that checkpoints carry it. A method whose
hooks do more than FedAvg's says so in `capabilities` (below), which subclasses inherit.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from shared.config.schema import RunConfig
from shared.data.federation import Client, Federation
from shared.models.nets import Net


@dataclass(frozen=True)
class Capabilities:
    """What the faster ways of training a round's clients may assume of a method
    (shared/training/clients.py checks them, in one place, for every such way).

    per_sample_loss: `local_loss` is a batch mean of per-sample terms (no batch statistics)
        that reads neither the client (it gets client=None) nor state that changes during
        local training, and draws no random numbers (it takes those it needs from
        `step_inputs`): vmap can train several clients, of one run or of a group of runs, in
        one step (trainer.clients_per_step, shared/training/batched.py).
        What it reads of the method's own state are attributes that are tensors, modules or
        floats (or lists of them), which the step stacks per client (shared/training/lane_state.py);
        the step runs every client's `start_client` before training and every
        `finish_client` after, so a `start_client` must not read what another client's
        `finish_client` of the same round writes.
    independent_clients: `start_client` and `finish_client` do nothing that another client's
        training at the same time could disturb, so clients may train at once in threads
        (trainer.client_threads).
    no_global_rng: no hook draws from torch's global random generator, which the batched step
        and client threads cannot reproduce per client.
    why_not: why the method lacks what it lacks, in a few words, for the one-line note that
        says a faster way does not apply.
    """

    per_sample_loss: bool = True
    independent_clients: bool = True
    no_global_rng: bool = True
    why_not: str = ""


class Diverged(RuntimeError):
    """A local model's weights became NaN or infinite."""

    @classmethod
    def client(cls, client: int, round: int) -> Diverged:
        return cls(f"client {client} diverged in round {round + 1} (non-finite weights)")


@dataclass
class ClientUpdate:
    client: int
    state: dict[str, torch.Tensor]  # the local model after training
    num_samples: int
    num_steps: int
    train_loss: float
    extras: dict[str, Any] = field(default_factory=dict)  # method-specific uploads


def weighted_average(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    """sum_i w_i * state_i / sum_i w_i for every entry, BatchNorm running statistics included;
    integer buffers (BatchNorm's step counters) are averaged and rounded."""
    w = torch.tensor(weights, dtype=torch.float64)
    w = w / w.sum()
    averaged = {}
    for key, first in states[0].items():
        stacked = torch.stack([s[key] for s in states]).double()
        mean = torch.tensordot(w.to(stacked.device), stacked, dims=1)
        averaged[key] = mean.to(first.dtype) if first.is_floating_point() else mean.round().to(first.dtype)
    return averaged


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of the model's state (weights and buffers) that later training leaves as it is."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def frozen_copy(model: Net) -> Net:
    """A teacher: a copy in eval mode that takes no gradients."""
    teacher = copy.deepcopy(model).eval()
    teacher.requires_grad_(False)
    return teacher


def kl_per_sample(teacher_logits: torch.Tensor, student_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(softmax(teacher / T) || softmax(student / T)) for each sample. Written out rather
    than F.kl_div, which vmap (the batched trainer) can only run one sample at a time."""
    log_p_teacher = F.log_softmax(teacher_logits / temperature, dim=1)
    log_p_student = F.log_softmax(student_logits / temperature, dim=1)
    return (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(1)


def kl_div(teacher_logits: torch.Tensor, student_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(softmax(teacher / T) || softmax(student / T)), averaged over the batch."""
    return kl_per_sample(teacher_logits, student_logits, temperature).mean()


@torch.no_grad()
def predict(model: Net, images: torch.Tensor, augmenter, batch_size: int) -> torch.Tensor:
    """Float logits of `model` on uint8 images, in batches, without augmentation."""
    return torch.cat(
        [model(augmenter.normalize(images[i : i + batch_size])).float() for i in range(0, len(images), batch_size)]
    )


class FedAvg:
    capabilities = Capabilities()  # cross-entropy per sample, no state, no random draws
    requires_local_sgd = False  # True where the method's arithmetic models SGD steps (local.optimizer=sgd)

    @classmethod
    def implied_config(cls, params) -> dict:
        """Config values the hyperparameters imply (a released-code switch that stands for a
        training loop), merged into the config as it is resolved so that its run id names them."""
        return {}

    @classmethod
    def check_config(cls, params, cfg) -> None:
        """What the method needs of its hyperparameters together and of the rest of the config,
        checked with the config before any data is loaded (each hyperparameter's own range is
        declared with it in Params); raises ConfigError."""

    @dataclass
    class Params:
        pass

    def __init__(self, params: Params, cfg: RunConfig, federation: Federation):
        self.params = params
        self.cfg = cfg
        self.federation = federation

    # --- server, before local training ------------------------------------------------------
    def prepare_round(self, round: int, global_model: Net) -> None:
        pass

    # --- client --------------------------------------------------------------------------
    def start_client(self, client: Client, model: Net) -> None:
        pass

    def step_inputs(self, client: Client, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Per-sample inputs of one step's `local_loss` besides its batch of `size` samples,
        each with `size` rows, which the loss takes as keyword arguments (the batched step
        passes each sample its row). Where a loss needs random numbers (FedGen's generated
        samples), they are drawn here, from the client's own generator of the round right
        after its batch, so that the loss itself draws none. It reads the run's state and the
        client, not what `start_client` sets: in the batched step every client's
        `start_client` has run before the first step."""
        return {}

    def local_loss(self, model: Net, x: torch.Tensor, y: torch.Tensor, client: Client) -> torch.Tensor:
        return F.cross_entropy(model(x), y)

    def finish_client(self, client: Client, model: Net, update: ClientUpdate) -> None:
        pass

    # --- server, after local training ---------------------------------------------------
    def client_weights(self, updates: list[ClientUpdate]) -> list[float]:
        if self.cfg.federation.weighting == "uniform":
            return [1.0] * len(updates)
        return [float(u.num_samples) for u in updates]

    def aggregate(self, global_model: Net, updates: list[ClientUpdate]) -> None:
        global_model.load_state_dict(weighted_average([u.state for u in updates], self.client_weights(updates)))

    def round_metrics(self) -> dict[str, float]:
        return {}

    # --- checkpointing of state that lives across rounds ----------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class GlobalTeacher(FedAvg):
    """FedAvg whose clients distil from the round's global model, frozen (FedLSD, FedNTD,
    FedCAD, FedSSD): the one place the teacher is made and run."""

    def prepare_round(self, round: int, global_model: Net) -> None:
        self.teacher = frozen_copy(global_model)

    @torch.no_grad()
    def teacher_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.teacher(x)
