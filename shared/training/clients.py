"""Training a round's sampled clients: one interface, three ways, chosen once per run.

    OneAfterAnother   the plain loop: each client from the global weights on one local model
    InThreads         trainer.client_threads=k: k clients at once, each on its own model copy
    Batched           trainer.clients_per_step=k: k clients in one vmapped step (shared/training/batched.py)

Each returns, per client, its `ClientUpdate` and, when the round tests local models, that
local model's test accuracy. All three give the same updates up to floating-point rounding,
so which one runs is not part of a run's id. What a faster way assumes of a method is its
`capabilities` (shared/methods/fedavg.py), checked here, in `missing_capabilities`, for every way;
a group of runs in one step (shared/training/group_training.py) needs what `Batched` needs.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from queue import SimpleQueue

import torch

from shared.config.schema import RunConfig
from shared.data.federation import Client, Federation
from shared.methods.fedavg import ClientUpdate, Diverged, FedAvg, snapshot
from shared.models.nets import Net
from shared.runs.seeding import client_generator
from shared.training.batched import BatchedClients, Lane
from shared.training.evaluation import autocast, evaluate_many

# What each faster way needs of a method (fields of shared.methods.fedavg.Capabilities)
NEEDS = {
    "trainer.clients_per_step": ("per_sample_loss", "no_global_rng"),
    "trainer.client_threads": ("independent_clients", "no_global_rng"),
}


def missing_capabilities(method_cls: type[FedAvg], name: str, way: str) -> str | None:
    """Why method `name` cannot be trained the faster `way` (a key of NEEDS), or None."""
    lacking = [need for need in NEEDS[way] if not getattr(method_cls.capabilities, need)]
    if lacking:
        why = f": {method_cls.capabilities.why_not}" if method_cls.capabilities.why_not else ""
        return f"method {name} ({method_cls.__name__}) lacks the capabilities {', '.join(lacking)}{why}"
    return None


def draws_in_forward(model: Net) -> bool:
    """Dropout draws from torch's global generator in every training step."""
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


@dataclass
class ClientResult:
    update: ClientUpdate
    local_acc: float | None  # the local model's test accuracy (%), in rounds that test local models
    local_per_class_acc: list[float] | None = None  # and per class (%), with eval.local=per_class


def with_local_accuracy(
    outcomes: list[list[ClientUpdate] | Diverged],
    test_local: list[bool],
    model: Net,
    federation: Federation,
    cfg: RunConfig,
) -> list[list[ClientResult] | Diverged]:
    """Each run's round as ClientResults (a Diverged as it is): where the run's round tests local
    models, with each one's test accuracy, those of every such run tested together in one pass
    over the test set (`evaluate_many`; `model`: their architecture; `federation`: any of the
    runs', which share the test set)."""
    testing = [
        i for i, (outcome, tests) in enumerate(zip(outcomes, test_local)) if tests and not isinstance(outcome, Diverged)
    ]
    states = [update.state for i in testing for update in outcomes[i]]
    tests = iter(evaluate_many(model, states, federation.test, federation, cfg))
    return [
        outcome
        if isinstance(outcome, Diverged)
        else [tested(update, next(tests)) if i in testing else ClientResult(update, None) for update in outcome]
        for i, outcome in enumerate(outcomes)
    ]


def tested(update: ClientUpdate, test: dict) -> ClientResult:
    return ClientResult(update, test["acc"], test["per_class_acc"])


def local_optimizer(model: Net, loc) -> torch.optim.Optimizer:
    """local.optimizer: SGD with momentum (the CV protocols) or Adam (FedGKD's DistilBERT runs)."""
    if loc.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=loc.lr, weight_decay=loc.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=loc.lr, momentum=loc.momentum, weight_decay=loc.weight_decay)


def check_finite(state: dict[str, torch.Tensor], client: int, round: int) -> None:
    if not all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point()):
        raise Diverged.client(client, round)


def compile_for_full_batches(model: Net, device: torch.device, cuda_graphs: bool) -> torch.nn.Module:
    """`trainer.compile`: torch.compile of the local model, for full training batches only. A
    compiled model records a graph (on CUDA with graphs, a capture and its memory) per input
    shape; clients' last batches have about as many sizes as there are clients, and the test
    set's last batch one more, so only the one shape of a full batch goes through it
    (dynamic=False: no symbolic shapes), and last batches and evaluation run the same weights
    eagerly (`step_model`)."""
    mode = (
        "reduce-overhead" if device.type == "cuda" and cuda_graphs else None
    )  # CUDA graphs pay for many small kernels
    return torch.compile(model, mode=mode, dynamic=False)


def step_model(model: Net, compiled: torch.nn.Module | None, batch: int, batch_size: int) -> torch.nn.Module:
    """The module a training step of `batch` samples runs: the compiled one for a full batch."""
    return compiled if compiled is not None and batch == batch_size else model


def train_client(
    method: FedAvg,
    client: Client,
    model: Net,
    cfg: RunConfig,
    round: int,
    compiled: torch.nn.Module | None = None,
    each_epoch: Callable[[int, Net], None] | None = None,
) -> ClientUpdate:
    """Local training of one client from the model's current (global) weights: the per-batch
    local step of every method, `local.epochs` epochs of the method's `local_loss`; `compiled`:
    the model compiled for full batches (`compile_for_full_batches`); `each_epoch(epoch, model)`
    after each epoch (a figure's probe of local training, epoch 1 first)."""
    loc = cfg.local
    model.train()
    optimizer = local_optimizer(model, loc)
    generator = client_generator(cfg.seed, round, client.id, client.index.device)
    method.start_client(client, model)
    steps, loss_sum = 0, torch.zeros((), device=client.index.device)
    for epoch in range(loc.epochs):
        for x, y in client.batches(loc.batch_size, generator):
            inputs = method.step_inputs(client, len(y), generator)
            with autocast(cfg, client.index.device):
                loss = method.local_loss(step_model(model, compiled, len(y), loc.batch_size), x, y, client, **inputs)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if loc.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), loc.grad_clip)
            optimizer.step()
            loss_sum += loss.detach().float()
            steps += 1
        if each_epoch is not None:
            each_epoch(epoch + 1, model)
    state = snapshot(model)
    check_finite(state, client.id, round)
    update = ClientUpdate(client.id, state, client.num_samples, steps, (loss_sum / max(steps, 1)).item())
    method.finish_client(client, model, update)
    return update


class OneAfterAnother:
    """Each client trains from the global weights on one local model, in the order sampled."""

    def __init__(
        self,
        method: FedAvg,
        model: Net,
        federation: Federation,
        cfg: RunConfig,
        compiled: torch.nn.Module | None = None,
    ):
        self.method, self.model, self.federation, self.cfg = method, model, federation, cfg
        self.compiled = compiled  # `model` compiled for full batches (trainer.compile)

    def train_one(self, client: Client, model: Net, global_state: dict, round: int) -> ClientUpdate:
        model.load_state_dict(global_state)
        compiled = self.compiled if model is self.model else None
        return train_client(self.method, client, model, self.cfg, round, compiled)

    def train(self, clients: list[Client], global_model: Net, round: int, test_local: bool) -> list[ClientResult]:
        global_state = snapshot(global_model)
        updates = [self.train_one(c, self.model, global_state, round) for c in clients]
        return with_local_accuracy([updates], [test_local], self.model, self.federation, self.cfg)[0]


class InThreads(OneAfterAnother):
    """Clients of a round trained at once in `trainer.client_threads` threads, each on a model
    of its own, with torch's CPU threads shared out among them. PyTorch's operators release
    the GIL, and a small model's operators use one core well but two poorly, so two clients on
    one core each beat one client on two. Each client's training is what the sequential loop
    does (its own generator, optimizer and model copy), so results equal it up to the rounding
    that torch's thread count may change."""

    def __init__(self, method: FedAvg, model: Net, federation: Federation, cfg: RunConfig, threads: int):
        super().__init__(method, model, federation, cfg)
        self.threads = threads
        self.models: SimpleQueue[Net] = SimpleQueue()
        for i in range(threads):
            self.models.put(model if i == 0 else copy.deepcopy(model))
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="client")

    def train(self, clients: list[Client], global_model: Net, round: int, test_local: bool) -> list[ClientResult]:
        """The largest clients first (so that no thread is left with a large client at the
        end); results in the order of `clients`."""
        global_state = snapshot(global_model)
        cores = torch.get_num_threads()

        def on_a_free_model(client: Client) -> ClientUpdate:
            torch.set_num_threads(max(1, cores // self.threads))  # this client's share of the cores
            model = self.models.get()
            try:
                return self.train_one(client, model, global_state, round)
            finally:
                self.models.put(model)

        largest_first = sorted(clients, key=lambda c: -c.num_samples)
        try:
            updates = dict(zip((c.id for c in largest_first), self.pool.map(on_a_free_model, largest_first)))
        finally:
            torch.set_num_threads(cores)
        in_order = [updates[c.id] for c in clients]
        return with_local_accuracy([in_order], [test_local], self.model, self.federation, self.cfg)[0]


class Batched:
    """Up to `lanes` clients at a time in one vmapped step (shared/training/batched.py)."""

    def __init__(self, method: FedAvg, model: Net, federation: Federation, cfg: RunConfig, lanes: int):
        self.method, self.model, self.federation, self.cfg = method, model, federation, cfg
        self.clients = BatchedClients(model, federation, cfg, lanes)

    @property
    def lanes_per_step(self) -> int:
        return self.clients.lanes

    def train(self, clients: list[Client], global_model: Net, round: int, test_local: bool) -> list[ClientResult]:
        updates = self.clients.train([Lane(self.method, client, self.cfg, round, global_model) for client in clients])
        for update in updates:
            if isinstance(update, Diverged):
                raise update
        return with_local_accuracy([updates], [test_local], self.model, self.federation, self.cfg)[0]


def unbatchable_reason(method: FedAvg, model: Net, cfg: RunConfig) -> str | None:
    """Why these clients cannot be trained in one vmapped step (None when they can)."""
    cls = type(method)
    if cfg.local.optimizer != "sgd":
        return f"local.optimizer={cfg.local.optimizer} (the batched step implements SGD)"
    if draws_in_forward(model):
        return f"model {cfg.model.name} has dropout (random draws cannot be vmapped)"
    return missing_capabilities(cls, cfg.method["name"], "trainer.clients_per_step")


def unthreadable_reason(method: FedAvg, model: Net, cfg: RunConfig) -> str | None:
    """Why these clients cannot train at once in threads (None when they can)."""
    if draws_in_forward(model):
        return f"model {cfg.model.name} has dropout, which draws from torch's global generator"
    return missing_capabilities(type(method), cfg.method["name"], "trainer.client_threads")


def client_trainer(method: FedAvg, model: Net, federation: Federation, cfg: RunConfig):
    """The way this run trains its clients, chosen once: the faster way the config asks for
    where the method and model allow it (a note on stderr says why not), at most a round's
    clients at a time, else one after another. `model` is the local model the way trains on."""
    t = cfg.trainer
    for key, wanted, reason, way in (
        ("clients_per_step", t.clients_per_step, unbatchable_reason, Batched),
        ("client_threads", t.client_threads, unthreadable_reason, InThreads),
    ):
        if wanted > 1:
            why = reason(method, model, cfg)
            if why is None:
                return way(method, model, federation, cfg, min(wanted, cfg.clients_per_round))
            print(
                f"note: trainer.{key}={wanted} does not apply: {why}; clients train one after another", file=sys.stderr
            )
    compiled = compile_for_full_batches(model, federation.device, t.cuda_graphs) if t.compile else None
    return OneAfterAnother(method, model, federation, cfg, compiled)
