"""One step of a group's batched training, recorded operator by operator, for the methods of
any tables: what `python -m benchmarks.dispatch` counts for FedSSD's Table II and what
tests/training/test_group_step.py checks for every method of the campaign's targets.

    method_cases(targets)     (shared/campaign/gate_cases.py, the GPU session gate's cases)
                              case id -> a run of each method the targets' rows declare,
                              one per method, model and code path (its switches, not its
                              numbers), named by the first table and row that declares it
    small_group(cfg)          a group of two runs of that method, shrunk to seconds on a CPU
    record_group_step(cfgs)   the aten operators of the first batched step of the group's
                              second round (the method's state of a trained round in play)
    non_view(ops)             those that are not views: each is at least one kernel on a GPU

The group trains batched on the CPU (trainer.clients_per_step=2 asks for it) and eagerly, so
every operator the step would put into its CUDA graph passes through the recorder.
"""

from __future__ import annotations

import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from shared.config.dotted import deep_merge
from shared.config.schema import RunConfig, identity
from shared.runs.directory import RunDirectory
from shared.targets.configs import load_config
from shared.training.group_training import DatasetCache, GroupClients
from shared.training.timed_rounds import train_members
from shared.training.trainer import Member, start_member

# A group of two runs (two seeds) of 2 clients of 16x16 synthetic images for two rounds, each
# client a batch or two a round: the step's operators are those of the paper's settings (the
# images' side and the clients' numbers change shapes, not operators); evaluation at the end.
SMALL = {
    "dataset": {"name": "synthetic", "synthetic": {"train_per_class": 10, "test_per_class": 2, "image_size": 16}},
    "partition": {"clients": 2},
    "federation": {"rounds": 2, "participation": 1.0},
    "local": {"epochs": 1, "batch_size": 32},
    "eval": {"every": 2, "local": False},
    "trainer": {"device": "cpu", "clients_per_step": 2, "progress": False, "tensorboard": False},
}
SMALL_AUX = 2  # auxiliary samples per class on the server, where a method has them
# A method's server-side work that a client's step does not see, cut where a method has it:
# FedGen's generator trains 50 steps a round (minutes on a CPU), each client's step the same
SERVER_WORK = {"generator_steps": 2}
SEEDS = (0, 1)
# A view in all but its schema: a reshape that needs no copy (no kernel either)
VIEW_LIKE = {torch.ops.aten._unsafe_view.default}


def small_group(cfg: RunConfig, **trainer) -> list[RunConfig]:
    """The run's method, model and method state on SMALL data, as a group of two seeds;
    `trainer`: keys of SMALL's trainer section to change (device="cuda")."""
    small = deep_merge(deep_merge(identity(cfg), SMALL), {"trainer": trainer})
    if cfg.aux.per_class:
        small = deep_merge(small, {"aux": {"per_class": SMALL_AUX}})
    small = deep_merge(small, {"method": {k: v for k, v in SERVER_WORK.items() if k in cfg.method}})
    return [load_config(None, deep_merge(small, {"seed": seed})) for seed in SEEDS]


class Recorder(TorchDispatchMode):
    """Every aten operator dispatched while it is on, in order."""

    def __init__(self):
        super().__init__()
        self.ops: list[torch._ops.OpOverload] = []
        self.calls: list[tuple] = []  # (operator, args, kwargs) of each, for checks on arguments

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops.append(func)
        self.calls.append((func, args, kwargs))
        return func(*args, **kwargs)


def start_members(cfgs: list[RunConfig], root: Path, alone: bool = False) -> list[Member]:
    """The runs set up under `root`, sharing their datasets' loads; `alone`: each with its own
    way of training its clients (else a group trains them)."""
    datasets = DatasetCache()
    members = []
    for i, cfg in enumerate(cfgs):
        directory = RunDirectory(root / f"run{i}", cfg)
        directory.path.mkdir(parents=True, exist_ok=True)
        members.append(start_member(cfg, directory, datasets.get(cfg), alone=alone))
    return members


def record_group_step(cfgs: list[RunConfig], default: str | None = None) -> Recorder:
    """The operators of the first batched step of the group's last round; `default`: torch's
    default device while the group's clients train (every round's hooks, batches and steps)."""
    recorder = Recorder()
    with tempfile.TemporaryDirectory() as root:
        members = start_members(cfgs, Path(root))
        group = GroupClients(members)
        batched, step = group.clients, group.clients.step

        def recorded_step():
            last_round = members[0].round == cfgs[0].federation.rounds - 1
            with recorder if last_round and not recorder.ops else nullcontext():
                step()

        def train_clients(training: list[Member], sampled: list[list[int]]):
            with torch.device(default) if default else nullcontext():  # what set_default_device sets
                return group(training, sampled)

        batched.step = recorded_step
        train_members(members, train_clients)
    return recorder


def non_view(ops: list[torch._ops.OpOverload]) -> list[torch._ops.OpOverload]:
    return [op for op in ops if not op.is_view and op not in VIEW_LIKE]
