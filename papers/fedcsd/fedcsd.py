"""FedCSD: class prototype similarity distillation (Yan et al., "Rethinking Client Drift in
Federated Learning: A Logit Perspective").

Teacher (Eq. 12, TMA): w_xi <- a w_xi + (1 - a) w_G each round, w_xi = w_G at the start.
Prototypes (Eq. 7, Alg. 1 lines 3-6): every client k averages the teacher's logits per class,
P_k[c]; the server averages them into P_G. Per sample, during local training (Eqs. 8-15):

    delta_c   = cos(z, P_G[c])                  z the local model's logits (detached)
    z_hat     = softmax(delta) * z_xi           the teacher's logits, refined by similarity
    M         = 1[softmax(z_xi)[y] > 1/K]       adaptive mask (Table IV's forcible mask: argmax z_xi = y)
    L_CSD     = mean_batch M * tau^2 * KL(softmax(z_hat / tau) || softmax(z / tau))
    L         = CE + mu * L_CSD                 mu 0.001, tau 10 (CIFAR-100, FEMNIST); 0.5, 4 (Office)

Ablations (Table III): `similarity`, `mask`, `tma`; "Base" turns all three off (plain
distillation from the last global model). `released_code=true` trains as IAMJackYan/FedCSD's
train_ours.py does: (1 - mu) CE + mu L_CSD with mu 0.5 and tau 4 unless set; no server average:
each client refines by its OWN prototypes P_k, taken at the start of its local training from
one epoch of its augmented batches (the last, partial one dropped), zero for a class it lacks;
the teacher is never put in eval mode (BatchNorm normalises by each batch); the mask is taken on
the refined logits and delta is not detached.
Each round logs the share of the wrong soft labels (the teacher's argmax not the true class) the
mask removes, `wrong_label_filter_rate`, Fig. 5's "filter rate for wrong soft labels", and the
share of all samples it removes, `mask_filter_rate`.
"""

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from shared.config.schema import NonNegative, Positive, Probability
from shared.methods.baselines.class_stats import average_per_class, class_means
from shared.methods.class_sums import count_by_class, sum_by_class
from shared.methods.fedavg import Capabilities, FedAvg, frozen_copy, kl_per_sample, snapshot, weighted_average
from shared.runs.seeding import derive_seed

PROTOTYPE_STREAM = 0xC5D  # the released prototypes' pass over a client's data draws from its own stream


def similarity_refined(z: torch.Tensor, z_teacher: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """Eqs. 8-10: z_hat = softmax_c(cos(z, P_G[c])) * z_teacher."""
    delta = F.cosine_similarity(z[:, None, :], prototypes[None, :, :], dim=2)  # (B, K)
    return F.softmax(delta, dim=1) * z_teacher


def adaptive_mask(z_teacher: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Eq. 13: keep a sample when the teacher gives its true class more than 1/K."""
    p_true = F.softmax(z_teacher.float(), dim=1).gather(1, y[:, None]).squeeze(1)
    return (p_true > 1 / z_teacher.shape[1]).float()


def forcible_mask(z_teacher: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Table IV: keep a sample only when the teacher classifies it correctly."""
    return (z_teacher.argmax(1) == y).float()


MASKS = {
    "adaptive": adaptive_mask,
    "forcible": forcible_mask,
    "none": lambda z, y: torch.ones_like(y, dtype=torch.float),
}


@torch.no_grad()
def own_prototypes(teacher, client, batch_size: int, num_classes: int, generator: torch.Generator) -> torch.Tensor:
    """The released code's P_k: the teacher's mean logits per class over one epoch of the
    client's augmented batches, full batches only (a drop-last loader), zero for a class absent."""
    sums = torch.zeros(num_classes, num_classes, device=client.index.device)
    counts = torch.zeros(num_classes, device=client.index.device)
    for x, y in client.batches(batch_size, generator):
        if len(y) == batch_size:
            sums += sum_by_class(teacher(x).float(), y, num_classes)
            counts += count_by_class(y, num_classes)
    return sums / counts.clamp(min=1)[:, None]


class FedCSD(FedAvg):
    capabilities = Capabilities(
        per_sample_loss=False,
        independent_clients=False,
        why_not="its loss counts the samples its mask removes (its filter rates, Fig. 5) into the method's own "
        "counters, an in-place side effect that vmap cannot carry; and with released_code its teacher, "
        "in train mode, normalises BatchNorm by the whole batch",
    )

    @dataclass
    class Params:
        mu: NonNegative | None = None  # None: 0.001 (the paper), 0.5 with released_code
        tau: Positive | None = None  # None: 10 (the paper), 4 with released_code
        tma: Probability = 0.9  # a, the teacher's momentum
        use_tma: bool = True
        similarity: bool = True  # refine the teacher's logits by prototype similarity
        mask: Literal["adaptive", "forcible", "none"] = "adaptive"
        released_code: bool = False
        # P_G[c] = mean_k P_k[c]: over the clients holding class c (a client without it has no
        # P_k[c]), or over all clients with a zero for those without it
        prototypes_over: Literal["holders", "all_clients"] = "holders"

        def __post_init__(self):  # resolved into the config, so a run id names the values used
            if self.mu is None:
                self.mu = 0.5 if self.released_code else 0.001
            if self.tau is None:
                self.tau = 4.0 if self.released_code else 10.0

    def __init__(self, params, cfg, federation):
        super().__init__(params, cfg, federation)
        self.teacher_state: dict[str, torch.Tensor] | None = None
        # the round's samples masked, wrong soft labels and wrong ones masked (on the device: no
        # sync per batch), and samples seen (a count the host knows)
        self.counts = torch.zeros(3, device=federation.device)
        self.seen = 0

    def prepare_round(self, round, global_model):
        global_state = global_model.state_dict()
        if self.teacher_state is None or not self.params.use_tma:
            self.teacher_state = snapshot(global_model)
        else:
            a = self.params.tma
            self.teacher_state = weighted_average([self.teacher_state, global_state], [a, 1 - a])
        self.teacher = frozen_copy(global_model)
        self.teacher.load_state_dict(self.teacher_state)
        self.round = round
        if self.params.released_code:
            self.teacher.train()
        elif self.params.similarity:
            per_client = [
                class_means(self.teacher, c, self.cfg.eval.batch_size, self.federation.num_classes, lambda m, x: m(x))
                for c in self.federation.clients
            ]
            means = [m for m, _ in per_client]
            if self.params.prototypes_over == "holders":
                self.prototypes, _ = average_per_class(means, [n for _, n in per_client], weighted=False)
            else:
                self.prototypes = torch.stack(means).mean(0)  # class_means is zero where a client lacks the class

    def start_client(self, client, model):
        if self.params.released_code and self.params.similarity:
            generator = torch.Generator(client.index.device).manual_seed(
                derive_seed(self.cfg.seed, self.round, client.id, PROTOTYPE_STREAM)
            )
            self.prototypes = own_prototypes(
                self.teacher, client, self.cfg.local.batch_size, self.federation.num_classes, generator
            )

    def local_loss(self, model, x, y, client):
        z = model(x)
        with torch.no_grad():
            z_teacher = self.teacher(x).float()
        p = self.params
        target = z_teacher
        if p.similarity:
            target = similarity_refined(z if p.released_code else z.detach(), z_teacher, self.prototypes)
        masked_on = target.detach() if p.released_code else z_teacher
        mask = MASKS[p.mask](masked_on, y)
        self.count(mask, (masked_on.argmax(1) != y).float())
        csd = (mask * p.tau**2 * kl_per_sample(target, z, p.tau)).mean()
        ce = F.cross_entropy(z, y)
        return ((1 - p.mu) if p.released_code else 1.0) * ce + p.mu * csd

    def count(self, mask: torch.Tensor, wrong: torch.Tensor) -> None:
        removed = 1 - mask
        self.counts += torch.stack([removed, wrong, removed * wrong]).sum(1)
        self.seen += len(mask)

    def round_metrics(self):
        masked, wrong, wrong_masked = self.counts.tolist()
        seen, self.seen = self.seen, 0
        self.counts.zero_()
        return {
            "mask_filter_rate": masked / max(seen, 1),
            "wrong_label_filter_rate": wrong_masked / max(wrong, 1),  # none wrong: none to filter
        }

    def state_dict(self):
        return {"teacher": self.teacher_state}

    def load_state_dict(self, state):
        self.teacher_state = state["teacher"]
