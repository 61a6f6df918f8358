"""One run's federated loop (`train_rounds`), each round as named steps:

    sample      the round's clients (seeded by seed and round)                    begin_round
    prepare     the method's server-side step: teachers, buffers, confusion matrices
    train       the sampled clients' local training (shared/training/clients.py)  train_sampled
    aggregate   the method's aggregation of their updates (FedAvg: a weighted average)
    evaluate    the global model on the test set, and the round's local models' mean
    checkpoint  the round's state and record, so that a killed run resumes where it was   end_round

then its metrics.json and final model (`finish_member`). The steps take a `Member`, a run being
trained, so that the rounds of several runs at a time share them: shared/training/timed_rounds.py
(a group of runs in one batched step, shared/training/group_training.py; a campaign's run
timed and stopped before a deadline). A run is one resolved config in one output directory
(shared/runs/directory.py lists its files).
"""

from __future__ import annotations

import copy
import math
import sys
import time
import traceback
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from shared.config.dotted import flatten
from shared.config.schema import RUNTIME_KEYS, ConfigError, RunConfig, to_dict
from shared.data.catalog import DataError
from shared.data.datasets import Dataset
from shared.data.federation import Federation, build_federation
from shared.methods.fedavg import Diverged, FedAvg
from shared.methods.registry import build_method
from shared.models.nets import Net
from shared.models.registry import count_parameters, model_for
from shared.runs.directory import RunDirectory, RunDirectoryError, is_disk_full
from shared.runs.metrics import judge, summarize
from shared.runs.numerics import device_name, resolve_device, select_device, set_numerics
from shared.runs.provenance import environment
from shared.runs.seeding import derive_seed
from shared.training.clients import ClientResult, client_trainer
from shared.training.evaluation import evaluate
from shared.training.round_timing import RoundTiming
from shared.training.tensorboard_log import tensorboard_log


def sample_clients(cfg: RunConfig, round: int) -> list[int]:
    rng = np.random.default_rng([cfg.seed, round, 0x5A3])
    return sorted(rng.choice(cfg.partition.clients, cfg.clients_per_round, replace=False).tolist())


@dataclass
class Setup:
    """What a run trains with, built once."""

    device: torch.device
    federation: Federation
    global_model: Net
    method: FedAvg
    clients: object  # the way clients train (shared/training/clients.py)


def set_up(cfg: RunConfig, dataset: Dataset | None = None, train_clients: bool = True) -> Setup:
    """`dataset`: cfg's, already loaded (a group's runs share one load); `train_clients=False`:
    no way of training clients of its own (a group trains them, shared/training/group_training.py)."""
    device = resolve_device(cfg.trainer.device)
    select_device(device)
    set_numerics(device, cfg.trainer.deterministic)
    federation = build_federation(cfg, device, dataset)
    torch.manual_seed(cfg.seed)
    global_model = model_for(cfg, federation).to(device)
    if cfg.trainer.channels_last:
        global_model = global_model.to(memory_format=torch.channels_last)
    method = build_method(cfg, federation)
    clients = None
    if train_clients:
        clients = client_trainer(method, copy.deepcopy(global_model), federation, cfg)
    return Setup(device, federation, global_model, method, clients)


def round_record(
    member: "Member", sampled: list[int], results: list[ClientResult], evaluation: dict | None, timing: RoundTiming
) -> dict:
    """The round's record: its clients and training loss, in evaluated rounds the global
    model's test accuracy, loss and per-class accuracy (`evaluation`) and the local models'
    accuracies and their mean (with eval.local=per_class each one's per class, in the order of
    `clients`), the method's own numbers, then the round's lanes and steps (`timing`: a
    group's, where the run trained in one) on its device."""
    record = {
        "round": member.round + 1,
        "clients": sampled,
        "train_loss": float(np.mean([r.update.train_loss for r in results])),
    }
    if evaluation is not None:
        record.update(
            global_acc=evaluation["acc"], global_loss=evaluation["loss"], per_class_acc=evaluation["per_class_acc"]
        )
        if "domain_acc" in evaluation:
            record["domain_acc"] = evaluation["domain_acc"]
        tested = [r for r in results if r.local_acc is not None]
        if tested:
            local_accs = [r.local_acc for r in tested]
            record.update(local_acc=float(np.mean(local_accs)), local_accs=local_accs)
        if tested and member.cfg.eval.local == "per_class":
            record["local_per_class_acc"] = [r.local_per_class_acc for r in tested]
    # "slots": the key under which runs have recorded the round's lanes from the first (shipped runs hold it)
    timed = {"slots": timing.lanes, "steps": timing.steps, "device": device_name(member.setup.device)}
    return {**record, **member.setup.method.round_metrics(), **timed}  # a round's time holds on its device only


def evaluates(cfg: RunConfig, round: int) -> bool:
    return (round + 1) % cfg.eval.every == 0 or round + 1 == cfg.federation.rounds


def run(
    cfg: RunConfig, out_dir: str | Path, restore: bool = False, record_attempt: int | None = None, keep: bool = False
) -> dict:
    """Run one config to completion (or continue it from its checkpoint); returns metrics.json.
    `restore`: put a finished run's deleted metrics.json back (RunDirectory.claim);
    `record_attempt`: a job's last attempt, whose failure is recorded rather than raised
    (RunDirectory.record_failure); `keep`: keep a copy of a finished run's metrics.json for a later
    `restore` (RunDirectory.keep). All of it holding the directory's lock."""
    out = RunDirectory(out_dir, cfg, keep)
    out.lock()
    try:
        finished = out.claim(restore)
        return finished if finished is not None else train_rounds(cfg, out)
    except Exception as exc:
        if record_attempt is None or isinstance(exc, RunDirectoryError) or is_disk_full(exc):
            raise  # a full disk records no failure: the next attempt resumes from the checkpoint
        print_error(exc)
        return out.record_failure(exc, record_attempt)
    finally:
        out.unlock()


def train_rounds(cfg: RunConfig, out: RunDirectory) -> dict:
    """The run's rounds one after another, from where its checkpoint left it, until its last
    round or until it diverges; returns its metrics.json."""
    member = start_member(cfg, out)
    setup = member.setup
    with closing(tensorboard_log(cfg, out.path)) as live:
        while member.training:
            started = time.perf_counter()
            sampled = begin_round(member)
            try:
                results = train_sampled(member, sampled)
            except Diverged as exc:
                member.status = f"diverged: {exc}"
                break
            setup.method.aggregate(setup.global_model, [r.update for r in results])
            evaluation = (
                evaluate(setup.global_model, setup.federation.test, setup.federation, cfg)
                if evaluates(cfg, member.round)
                else None
            )
            timing = round_timing([results], getattr(setup.clients, "lanes_per_step", 1))
            record = round_record(member, sampled, results, evaluation, timing)
            end_round(member, record, time.perf_counter() - started, live)
    return finish_member(member)


@dataclass
class Member:
    """A run being trained, alone or in a group: what it trains with and what it has done."""

    cfg: RunConfig
    out: RunDirectory
    setup: Setup
    history: list[dict]
    elapsed: float
    status: str = "completed"

    @property
    def round(self) -> int:
        """The round it trains next (from 0)."""
        return len(self.history)

    @property
    def training(self) -> bool:
        return self.status == "completed" and self.round < self.cfg.federation.rounds

    @property
    def test_local(self) -> bool:
        return evaluates(self.cfg, self.round) and self.cfg.eval.local


def start_member(cfg: RunConfig, out: RunDirectory, dataset: Dataset | None = None, alone: bool = True) -> Member:
    """A run set up and resumed from its checkpoint (none: a fresh start); `alone`: with a way
    of training its clients of its own (else a group trains them)."""
    setup = set_up(cfg, dataset, train_clients=alone)
    out.save_partition(setup.federation.counts, setup.federation.dataset.classes)
    history, elapsed = out.resume(setup.global_model, setup.method, setup.device)
    return Member(cfg, out, setup, history, elapsed)


def train_sampled(member: Member, sampled: list[int]) -> list[ClientResult]:
    """The round's sampled clients trained the run's own way (shared/training/clients.py);
    raises Diverged."""
    setup = member.setup
    return setup.clients.train(
        [setup.federation.clients[c] for c in sampled], setup.global_model, member.round, test_local=member.test_local
    )


def round_timing(outcomes: list[list[ClientResult] | Diverged], width: int) -> RoundTiming:
    """The round's lanes and their steps (a diverged run's clients left out), its phases to come."""
    steps = tuple(r.update.num_steps for outcome in outcomes if not isinstance(outcome, Diverged) for r in outcome)
    return RoundTiming(len(outcomes), steps, width)


def begin_round(member: Member) -> list[int]:
    """The round's sampled clients, with the method's server-side step for the round done."""
    torch.manual_seed(derive_seed(member.cfg.seed, member.round))  # for any randomness of the method's own
    sampled = sample_clients(member.cfg, member.round)
    member.setup.method.prepare_round(member.round, member.setup.global_model)
    return sampled


def end_round(member: Member, record: dict, seconds: float, live) -> None:
    """Checkpoint the round's record and state, and report it; a global loss that is not
    finite ends the run as diverged."""
    setup, out = member.setup, member.out
    record["seconds"] = seconds
    member.elapsed += seconds
    member.history.append(record)
    out.save_round(
        member.history,
        {"global": setup.global_model.state_dict(), "method": setup.method.state_dict(), "elapsed": member.elapsed},
    )
    report_progress(member.cfg, out, record)
    live.write(record)
    if not math.isfinite(record.get("global_loss", 0.0)):
        member.status = f"diverged: global model loss is {record['global_loss']} after round {record['round']}"


def finish_member(member: Member) -> dict:
    """Its metrics.json, written with its final model."""
    setup, cfg = member.setup, member.cfg
    summary = summarize(
        member.history,
        cfg,
        judge(member.status, member.history, setup.federation.num_classes),
        member.elapsed,
        {
            "num_parameters": count_parameters(setup.global_model),
            "device": str(setup.device),
            "device_name": device_name(setup.device),
            "client_samples": setup.federation.counts.sum(1).tolist(),
            "runtime": runtime_settings(cfg),
            "environment": environment(),
        },
    )
    member.out.finish(summary, setup.global_model.state_dict())
    return summary


def runtime_settings(cfg: RunConfig) -> dict:
    """The runtime keys the run trained with (not part of its id: a session's fallbacks, e.g.
    trainer.cuda_graphs=false, are recorded here), the data root left out (a path of one machine)."""
    flat = flatten(to_dict(cfg))
    return {key: flat[key] for key in RUNTIME_KEYS if key in flat and key != "data_root"}


def report_progress(cfg: RunConfig, out: RunDirectory, record: dict) -> None:
    """One plain line per round where no terminal shows a progress bar (a job's log)."""
    if not cfg.trainer.progress:
        return
    acc = f", global acc {record['global_acc']:.2f}%" if "global_acc" in record else ""
    print(
        f"run {out.run_id[:8]} round {record['round']}/{cfg.federation.rounds}: train loss "
        f"{record['train_loss']:.4f}{acc}, {record['seconds']:.1f} s",
        file=sys.stderr,
        flush=True,
    )


def print_error(exc: BaseException) -> None:
    """A config or data error in one line, anything else with its traceback."""
    if isinstance(exc, (ConfigError, DataError)):
        print(f"error: {exc}", file=sys.stderr)
    else:
        traceback.print_exception(exc)
