"""A group of runs trained together in one process, every (run, client) pair of a round in one
batched step:

    python -m shared.run --json A --out DIR_A --json B --out DIR_B ...

A group is runs with one `shared.targets.run_groups.group_key`: one method, model, optimizer and step
shape (a table row across its settings and seeds). Each run keeps its own federation (the
dataset is loaded once per process and shared), partition, global model, method instance,
random streams, evaluation, checkpoint, metrics and tensorboard files; `shared.training.timed_rounds`'
round loop takes the group's runs a round of each at a time, and `GroupClients` trains all
their sampled clients in `shared.training.batched.BatchedClients` (one CUDA graph for the group; a
model with BatchNorm too, each (run, client) lane with its own batch and running statistics). A
run's results equal the run trained alone up to floating-point rounding, so its run id is the
same (tests/training/test_group_training.py checks this in float64 per method).

Runs may be at different rounds (one resumed further than another): each lane carries its own
run's round, batches and generator. A run whose rounds end, or that diverges, leaves the group;
the others go on. A deadline stops the whole group between rounds (OutOfTime), every run's
last round checkpointed.

When a group trains batched: when it has two runs or more and the device is CUDA, or when
every run asks for `trainer.clients_per_step` > 1 (on any device). On a CPU the batched step
turns convolutions into grouped ones, which were 5.4x slower per run than clients one after
another with ten steps a round on a quiet machine (benchmarks/README.md, "Runs in groups"),
so there a group's runs train one after another unless asked for: the CPU's
default path stays what it was. A run alone keeps its own way (`trainer.clients_per_step` as before).
Runs that cannot share a step (different group keys, a method without the capabilities
per_sample_loss and no_global_rng, a model with dropout) train one after another,
with a one-line note saying why.
"""

from __future__ import annotations

import copy
import json
from contextlib import ExitStack
from pathlib import Path

from shared.config.schema import RunConfig, to_dict
from shared.data.catalog import data_root
from shared.data.datasets import Dataset, load_dataset
from shared.methods.fedavg import Diverged
from shared.runs.directory import RunDirectory
from shared.runs.numerics import resolve_device
from shared.targets.run_groups import group_key
from shared.training.batched import BatchedClients, Lane
from shared.training.clients import ClientResult, unbatchable_reason, with_local_accuracy
from shared.training.timed_rounds import Deadline, train_members
from shared.training.trainer import Member, start_member


class GroupRefused(ValueError):
    """These runs cannot train in one batched step (the message says why); raised before any
    training, so that a caller trains them one after another instead."""


def group_reason(cfgs: list[RunConfig]) -> str | None:
    """Why these runs do not train in one batched step (None when they do); the method and
    model are checked when the runs are set up (`unbatchable_reason`)."""
    if len(cfgs) < 2:
        return "a single run"
    if len({group_key(cfg) for cfg in cfgs}) > 1:
        return "the runs differ in more than seed, data, federation and local epochs (shared/targets/run_groups.py)"
    asked = all(cfg.trainer.clients_per_step > 1 for cfg in cfgs)
    if resolve_device(cfgs[0].trainer.device).type != "cuda" and not asked:
        return (
            "on a CPU the batched step is slower than clients one after another "
            "(trainer.clients_per_step=2 or more asks for it)"
        )
    return None


class DatasetCache:
    """Each dataset loaded once per process: a group's runs share its tensors."""

    def __init__(self):
        self.loaded: dict[str, Dataset] = {}

    def get(self, cfg: RunConfig) -> Dataset:
        key = json.dumps(
            [to_dict(cfg)["dataset"], str(data_root(cfg.data_root)), cfg.model.pretrained], sort_keys=True, default=str
        )
        if key not in self.loaded:
            self.loaded[key] = load_dataset(cfg)
        return self.loaded[key]


class GroupClients:
    """Every sampled client of every member of a group, in batched steps of (run, client) lanes:
    as many lanes as the members' clients per round, so one step a round (for models as large
    as ResNet-50, as many as fit: shared/training/batched.py, `lanes_that_fit`)."""

    def __init__(self, members: list[Member]):
        first = members[0]
        self.model = copy.deepcopy(first.setup.global_model)
        wanted = sum(m.cfg.clients_per_round for m in members)
        self.clients = BatchedClients(self.model, first.setup.federation, first.cfg, wanted)

    @property
    def lanes_per_step(self) -> int:
        return self.clients.lanes

    def __call__(self, members: list[Member], sampled: list[list[int]]) -> list[list[ClientResult] | Diverged]:
        lanes = [
            Lane(m.setup.method, m.setup.federation.clients[c], m.cfg, m.round, m.setup.global_model)
            for m, clients in zip(members, sampled)
            for c in clients
        ]
        updates = self.clients.train(lanes)
        outcomes, start = [], 0
        for _member, clients in zip(members, sampled):
            mine, start = updates[start : start + len(clients)], start + len(clients)
            diverged = [u for u in mine if isinstance(u, Diverged)]
            outcomes.append(diverged[0] if diverged else mine)
        first = members[0]
        return with_local_accuracy(
            outcomes, [m.test_local for m in members], self.model, first.setup.federation, first.cfg
        )


def run_group(
    cfgs: list[RunConfig], outs: list[str | Path], restore: bool = False, deadline: Deadline = None, keep: bool = False
) -> list[dict]:
    """Train these runs as one group (each resumed from its checkpoint; a finished one is
    skipped, its metrics.json returned); raises GroupRefused with the reason where they cannot
    train in one step: `group_reason` before any run is set up, the method and model's
    (`unbatchable_reason`) once they are, before any training. `restore` and `keep` as
    trainer.run's, each run's holding its lock."""
    why = group_reason(cfgs)
    if why:
        raise GroupRefused(why)
    with ExitStack() as stack:
        directories, summaries = [], {}
        for i, (cfg, out) in enumerate(zip(cfgs, outs)):
            directory = RunDirectory(out, cfg, keep)
            directory.lock()
            stack.callback(directory.unlock)
            finished = directory.claim(restore)
            if finished is not None:
                summaries[i] = finished
            else:
                directories.append((i, directory))
        if directories:
            summaries.update(
                train_group(
                    [cfgs[i] for i, _ in directories],
                    [d for _, d in directories],
                    deadline,
                    [i for i, _ in directories],
                )
            )
    return [summaries[i] for i in range(len(cfgs))]


def train_group(
    cfgs: list[RunConfig], directories: list[RunDirectory], deadline: Deadline, indices: list[int]
) -> dict[int, dict]:
    datasets = DatasetCache()
    members = [start_member(cfg, d, datasets.get(cfg), alone=False) for cfg, d in zip(cfgs, directories)]
    why = unbatchable_reason(members[0].setup.method, members[0].setup.global_model, cfgs[0])
    if why:
        raise GroupRefused(why)
    return dict(zip(indices, train_members(members, GroupClients(members), deadline)))
