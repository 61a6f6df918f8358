"""FedGen (Zhu et al., ICML'21): data-free knowledge distillation through a server-side generator.

The generator G(noise, y) produces a sample in the classifier's feature space. Each round, after
averaging, the server trains G so that the received classifier heads, weighted per label by the
clients' label counts, classify G(noise, y) as y, plus a diversity term
exp(-mean(|noise_i - noise_j|^2 * |G_i - G_j|_1)). Clients then add
alpha_t * CE(h(G(y_hat)), y_hat), y_hat drawn uniformly from the labels some client holds
(the released code's `available_labels`, classes the client lacks included: the generated samples
are what tells a client about them), alpha_t = alpha * decay^t.

Each real sample of a step is paired with one generated sample, drawn (label and noise) from the
client's own generator right after the batch (`step_inputs`), so that the loss is the batch mean
of per-sample terms CE(z_i, y_i) + alpha_t CE(h(G(y_hat_i)), y_hat_i) and draws nothing itself:
the batched step trains FedGen too. A short last batch of s samples thus has s generated samples,
as before here; FedGen's released code (gen_batch_size, scaled by gen_batch_size / batch_size)
and FedGKD's port (batch_size) draw a full generated batch, the same term in expectation. The
server draws the generator's training batches from a stream of the run's own per round.

FedGKD's port weighs every client's head alike for every label (its workers send label counts
that stay at their initial ones: `update_label_counts` is never called) and trains the generator
on every label (its server's `qualified_labels`); `method.label_weights=uniform` trains that form.

Deviation (as FedGKD's port of FedGen does): FedGen's released code also matches the
local model's output on real data to the generator's ("latent loss", beta); it is omitted here.
"""

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from shared.config.schema import Count, NonNegative, NonNegativeInt, Positive, Probability
from shared.methods.class_sums import one_hot
from shared.methods.fedavg import FedAvg
from shared.runs.seeding import derive_seed

# the server's draws for training the generator: a stream of the run's own per round, seeded by
# (seed, round, 0, SERVER_STREAM), a tuple longer than any client's (seed, round, client)
SERVER_STREAM = 0xF6E


class Generator(nn.Module):
    def __init__(self, num_classes: int, noise_dim: int, hidden: int, latent: int):
        super().__init__()
        self.num_classes = num_classes
        self.body = nn.Sequential(nn.Linear(num_classes + noise_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU())
        self.out = nn.Linear(hidden, latent)

    def forward(self, y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        h = self.body(torch.cat([one_hot(y, self.num_classes, noise.dtype), noise], dim=1))
        return self.out(h)


def diversity_loss(noise: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """exp(-mean over pairs of (squared-l2 noise distance x l1 output distance)), both per-dim means."""
    noise_dist = (noise[:, None] - noise[None]).pow(2).mean(-1)
    output_dist = (output[:, None] - output[None]).abs().mean(-1)
    return torch.exp(-(noise_dist * output_dist).mean())


class FedGen(FedAvg):
    # FedAvg's capabilities hold: the generated samples are drawn before the loss (step_inputs),
    # from the client's generator, and the server's from a stream of the run's own

    @dataclass
    class Params:
        # where the generated samples' labels and noise come from: each client's own generator
        # (step_inputs) and the server's stream per round. Runs before 2026-11-24 drew them from
        # torch's global generator; their ids lack this key, and no run trains that way any more
        draws: Literal["own_streams"] = "own_streams"
        # the generated samples' labels: every label some client holds, as FedGen's code draws
        # them, or the classes the client holds (runs before 2026-11-30, whose ids lack this key)
        generated_labels: Literal["training_data", "held"] = "training_data"
        # the generator's teachers, per label: unset, each client's head weighted by its share of
        # the label's samples (FedGen's code); `uniform`, every head alike, every label trained,
        # as FedGKD's port has it (module docstring)
        label_weights: Literal["uniform"] | None = None
        alpha: NonNegative = 0.1  # weight of the generated-sample CE at round 0
        alpha_decay: Probability = 0.98  # per round
        noise_dim: Count = 64
        hidden: Count = 512
        generator_steps: NonNegativeInt = 50  # per round (FedGen: 10 epochs x 5 teacher iterations)
        generator_batch: Count = 64
        # the generator's Adam as FedGen's port in FedGKD's code (and FedGen's own EMNIST setting)
        generator_lr: Positive = 1e-4
        generator_weight_decay: NonNegative = 1e-2
        diversity: NonNegative = 1.0

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.generator: Generator | None = None  # built once the feature size is known
        self.trained = False  # no generated samples before the generator's first training
        self.restored = None  # generator state from a checkpoint
        # client -> the labels its generated samples take; a dict, which the batched step does not
        # stack per lane (only step_inputs reads it, outside the loss)
        held = torch.as_tensor(federation.counts) > 0
        if params.generated_labels == "training_data":  # every label some client holds
            held[:] = held.any(0)
        self.labels = {client: torch.nonzero(row).flatten().to(federation.device) for client, row in enumerate(held)}

    def build(self, global_model):
        p = self.params
        self.generator = Generator(self.federation.num_classes, p.noise_dim, p.hidden, global_model.feature_dim)
        self.generator.to(self.federation.device)
        self.optimizer = torch.optim.Adam(
            self.generator.parameters(), lr=p.generator_lr, weight_decay=p.generator_weight_decay
        )
        self.schedule = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=0.98)

    def prepare_round(self, round, global_model):
        if self.generator is None:
            if self.restored:  # resumed: building draws nothing from the round's seeded stream, as
                with torch.random.fork_rng(devices=[]):  # an uninterrupted run built it in round 1
                    self.build(global_model)
            else:
                self.build(global_model)
            if self.restored:
                self.generator.load_state_dict(self.restored["generator"])
                self.optimizer.load_state_dict(self.restored["optimizer"])
                self.schedule.load_state_dict(self.restored["schedule"])
                self.trained = self.restored["trained"]
        self.alpha = self.params.alpha * self.params.alpha_decay**round
        # a generator object, not the round (an int, which would split a group's batched step
        # into one pass per round)
        self.server_draws = torch.Generator(self.federation.device).manual_seed(
            derive_seed(self.cfg.seed, round, 0, SERVER_STREAM)
        )

    def start_client(self, client, model):
        # frozen while clients train, its BatchNorm on running statistics: each generated sample
        # alone gives what it gives in a batch
        self.generator.eval()

    @property
    def generating(self) -> bool:
        """Whether clients add the generated-sample term: not before the generator's first
        training, nor at alpha = 0, which then draws nothing and trains as FedAvg does."""
        return self.trained and self.params.alpha > 0

    def step_inputs(self, client, size, generator):
        """A generated sample's label (one of `labels[client]`: `generated_labels`) and noise for
        each real sample."""
        if not self.generating:
            return {}
        labels = self.labels[client.id]
        y_hat = labels[torch.randint(len(labels), (size,), generator=generator, device=labels.device)]
        noise = torch.rand(size, self.params.noise_dim, generator=generator, device=labels.device)
        return {"y_hat": y_hat, "noise": noise}

    def local_loss(self, model, x, y, client, y_hat=None, noise=None):
        loss = F.cross_entropy(model(x), y)
        if y_hat is None:
            if self.generating:  # a trainer that passed no step_inputs would drop the term unseen
                raise RuntimeError("FedGen's local_loss needs its step_inputs (y_hat, noise) once the generator trains")
            return loss
        with torch.no_grad():
            features = self.generator(y_hat, noise)
        return loss + self.alpha * F.cross_entropy(model.classifier(features), y_hat)

    def aggregate(self, global_model, updates):
        super().aggregate(global_model, updates)
        self.train_generator(updates)

    def train_generator(self, updates):
        p, device = self.params, self.federation.device
        counts = torch.as_tensor(
            self.federation.counts[[u.client for u in updates]], dtype=torch.float32, device=device
        )
        if p.label_weights == "uniform":
            counts = torch.ones_like(counts)
        label_weight = counts / counts.sum(0).clamp(min=1)  # clients x classes: who knows class y
        available = torch.nonzero(counts.sum(0) > 0).flatten()
        heads = [(u.state["classifier.weight"], u.state["classifier.bias"]) for u in updates]
        self.generator.train()
        for _ in range(p.generator_steps):
            drawn = torch.randint(len(available), (p.generator_batch,), generator=self.server_draws, device=device)
            y = available[drawn]
            noise = torch.rand(p.generator_batch, p.noise_dim, generator=self.server_draws, device=device)
            features = self.generator(y, noise)
            teacher = sum(
                (label_weight[k, y] * F.cross_entropy(F.linear(features, w, b), y, reduction="none")).mean()
                for k, (w, b) in enumerate(heads)
            )
            loss = teacher + p.diversity * diversity_loss(noise, features)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        self.schedule.step()
        self.trained = True

    def state_dict(self):
        if self.generator is None:
            return {}
        return {
            "generator": self.generator.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "trained": self.trained,
        }

    def load_state_dict(self, state):
        self.restored = state or None  # applied in prepare_round, once the generator is built
