"""FedGen (Zhu et al., ICML'21): data-free knowledge distillation through a server-side generator.

The generator G(noise, y) produces a sample in the classifier's feature space. Each round, after
averaging, the server trains G so that the received classifier heads, weighted per label by the
clients' label counts, classify G(noise, y) as y, plus a diversity term
exp(-mean(|noise_i - noise_j|^2 * |G_i - G_j|_1)). Clients then add
alpha_t * CE(h(G(y_hat)), y_hat), y_hat drawn from the client's own labels, alpha_t = alpha * decay^t.

Deviation (METHODS.md's choice, after FedGKD's port): FedGen's released code also matches the
local model's output on real data to the generator's ("latent loss", beta); it is omitted here.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from shared.config import Count, NonNegative, NonNegativeInt, Positive, Probability
from shared.fedavg import Capabilities, FedAvg


class Generator(nn.Module):
    def __init__(self, num_classes: int, noise_dim: int, hidden: int, latent: int):
        super().__init__()
        self.num_classes, self.noise_dim = num_classes, noise_dim
        self.body = nn.Sequential(nn.Linear(num_classes + noise_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU())
        self.out = nn.Linear(hidden, latent)

    def forward(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        noise = torch.rand(len(y), self.noise_dim, device=y.device)
        h = self.body(torch.cat([F.one_hot(y, self.num_classes).float(), noise], dim=1))
        return self.out(h), noise


def diversity_loss(noise: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """exp(-mean over pairs of (squared-l2 noise distance x l1 output distance)), both per-dim means."""
    noise_dist = (noise[:, None] - noise[None]).pow(2).mean(-1)
    output_dist = (output[:, None] - output[None]).abs().mean(-1)
    return torch.exp(-(noise_dist * output_dist).mean())


class FedGen(FedAvg):
    # the loss draws labels and noise for generated samples from torch's global generator (vmap
    # refuses random draws); drawing from a per-client generator instead would change the draws,
    # hence every finished run's result, so it stays as it is
    capabilities = Capabilities(per_sample_loss=False, no_global_rng=False)

    @dataclass
    class Params:
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
        self.labels = [torch.nonzero(torch.as_tensor(row) > 0).flatten().to(federation.device)
                       for row in federation.counts]

    def build(self, global_model):
        p = self.params
        self.generator = Generator(self.federation.num_classes, p.noise_dim, p.hidden, global_model.feature_dim)
        self.generator.to(self.federation.device)
        self.optimizer = torch.optim.Adam(self.generator.parameters(), lr=p.generator_lr,
                                          weight_decay=p.generator_weight_decay)
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
        self.alpha = self.params.alpha * self.params.alpha_decay ** round

    def start_client(self, client, model):
        self.generator.eval()  # frozen while clients train

    def local_loss(self, model, x, y, client):
        loss = F.cross_entropy(model(x), y)
        if self.trained and self.alpha > 0:
            labels = self.labels[client.id]
            y_hat = labels[torch.randint(len(labels), (len(y),), device=y.device)]
            with torch.no_grad():
                features, _ = self.generator(y_hat)
            loss = loss + self.alpha * F.cross_entropy(model.classifier(features), y_hat)
        return loss

    def aggregate(self, global_model, updates):
        super().aggregate(global_model, updates)
        self.train_generator(updates)

    def train_generator(self, updates):
        p, device = self.params, self.federation.device
        counts = torch.as_tensor(self.federation.counts[[u.client for u in updates]], dtype=torch.float32, device=device)
        label_weight = counts / counts.sum(0).clamp(min=1)  # clients x classes: who knows class y
        available = torch.nonzero(counts.sum(0) > 0).flatten()
        heads = [(u.state["classifier.weight"], u.state["classifier.bias"]) for u in updates]
        self.generator.train()
        for _ in range(p.generator_steps):
            y = available[torch.randint(len(available), (p.generator_batch,), device=device)]
            features, noise = self.generator(y)
            teacher = sum((label_weight[k, y] * F.cross_entropy(F.linear(features, w, b), y, reduction="none")).mean()
                          for k, (w, b) in enumerate(heads))
            loss = teacher + p.diversity * diversity_loss(noise, features)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        self.schedule.step()
        self.trained = True

    def state_dict(self):
        if self.generator is None:
            return {}
        return {"generator": self.generator.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(), "trained": self.trained}

    def load_state_dict(self, state):
        self.restored = state or None  # applied in prepare_round, once the generator is built
