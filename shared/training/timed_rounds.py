"""Rounds of several runs at a time, timed, and stopped before a deadline (`train_members`): a
group of runs in one batched step (shared/training/group_training.py), and a campaign's run
alone in a time-boxed session (`run_timed`, shared/campaign/train.py).

Each round takes every run still training through the round's steps of
shared/training/trainer.py, a round of all at a time, so that the math is the one a run alone
trains with. The round's named steps are timed with wall-clock laps and reported to whoever
observes (shared/training/round_timing.py: a campaign's refresh of its state and its timing
record); before a round that would end past the deadline the runs stop (OutOfTime), each
one's last round checkpointed, and started again they continue from there.
"""

from __future__ import annotations

import time
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Callable

from shared.config.schema import RunConfig
from shared.methods.fedavg import Diverged
from shared.runs.directory import RunDirectory
from shared.training.clients import ClientResult
from shared.training.evaluation import evaluate_many
from shared.training.round_timing import Laps, RoundTiming, report
from shared.training.tensorboard_log import tensorboard_log
from shared.training.trainer import (
    Member,
    begin_round,
    end_round,
    evaluates,
    finish_member,
    round_record,
    round_timing,
    start_member,
    train_sampled,
)

# time.time() to stop before, or what gives it as of now (a campaign's end less the time its
# last save took, which a round may change)
Deadline = float | Callable[[], float] | None


class OutOfTime(Exception):
    """The run stopped between rounds, its last round checkpointed, because the next round
    would end past its deadline (a time-boxed GPU session, shared/campaign/train.py); started again, it
    continues from that checkpoint."""


def evaluate_globals(members: list[Member]) -> list[dict]:
    """Each member's global model on its test set, a group's all in one pass over it
    (`evaluate_many`): its members share the dataset (so the test set), the architecture and
    trainer.amp; eval.batch_size, which may differ, only batches the pass."""
    if not members:
        return []
    first = members[0].setup
    return evaluate_many(
        first.global_model,
        [m.setup.global_model.state_dict() for m in members],
        first.federation.test,
        first.federation,
        members[0].cfg,
    )


def run_timed(cfg: RunConfig, out_dir: str | Path, deadline: Deadline = None) -> dict:
    """Run one config to completion (or continue it from its checkpoint) as shared/training/trainer.py's
    `run` does, its rounds reported to the observers; returns metrics.json, or raises OutOfTime
    rather than pass `deadline` (time.time())."""
    out = RunDirectory(out_dir, cfg)
    out.lock()
    try:
        finished = out.claim()
        return finished if finished is not None else train_members([start_member(cfg, out)], train_alone, deadline)[0]
    finally:
        out.unlock()


def train_alone(members: list[Member], sampled: list[list[int]]) -> list[list[ClientResult] | Diverged]:
    """Each member's sampled clients, trained the member's own way (shared/training/clients.py)."""
    outcomes = []
    for member, clients in zip(members, sampled):
        try:
            outcomes.append(train_sampled(member, clients))
        except Diverged as exc:
            outcomes.append(exc)
    return outcomes


def train_members(members: list[Member], train_clients, deadline: Deadline = None) -> list[dict]:
    """Rounds of every member until each is done (its last round, or diverged), a round of all
    at a time: each samples and prepares, `train_clients(members, sampled)` trains their clients
    (a list of ClientResult per member, or Diverged), then each aggregates, is evaluated and
    checkpoints. Returns each member's metrics.json; OutOfTime before a round that would end
    past `deadline` (every member's last round checkpointed)."""
    summaries: dict[int, dict] = {}
    with ExitStack() as stack:  # tensorboard logs closed however the loop ends
        logs = [stack.enter_context(closing(tensorboard_log(m.cfg, m.out.path))) for m in members]
        while active := [i for i, m in enumerate(members) if m.training]:
            started, laps = time.perf_counter(), Laps(members[active[0]].setup.device)
            sampled = [begin_round(members[i]) for i in active]
            laps.lap("preparation")
            outcomes = train_clients([members[i] for i in active], sampled)
            laps.lap("steps")
            timing = round_timing(outcomes, step_width(train_clients, members[active[0]]))
            trained = []
            for i, clients, outcome in zip(active, sampled, outcomes):
                if isinstance(outcome, Diverged):
                    members[i].status = f"diverged: {outcome}"
                else:
                    members[i].setup.method.aggregate(members[i].setup.global_model, [r.update for r in outcome])
                    trained.append((i, clients, outcome))
            laps.lap("aggregation")
            evaluated = [i for i, _, _ in trained if evaluates(members[i].cfg, members[i].round)]
            evaluations = dict(zip(evaluated, evaluate_globals([members[i] for i in evaluated])))
            laps.lap("evaluation")
            for i, clients, outcome in trained:
                record = round_record(members[i], clients, outcome, evaluations.get(i), timing)
                end_round(members[i], record, time.perf_counter() - started, logs[i])
            laps.lap("checkpointing")
            report(RoundTiming(len(active), timing.lane_steps, timing.lanes_per_step, laps.seconds))
            summaries.update({i: finish_member(members[i]) for i in active if not members[i].training})
            for member in members:
                if member.training:
                    stop_before_deadline(
                        deadline, member.round, member.cfg.federation.rounds, time.perf_counter() - started
                    )
    # a member resumed after its last round (killed while finishing) has no round left to train
    return [summaries[i] if i in summaries else finish_member(m) for i, m in enumerate(members)]


def step_width(train_clients, member: Member) -> int:
    """The (run, client) lanes that share one training step: a group's batched step
    (shared/training/group_training.py), a run's own batched clients, else 1 (one after another)."""
    return getattr(train_clients, "lanes_per_step", None) or getattr(member.setup.clients, "lanes_per_step", 1)


def stop_before_deadline(deadline: Deadline, done: int, rounds: int, round_seconds: float) -> None:
    """OutOfTime if another round, as long as the last one, would end past the deadline."""
    limit = deadline() if callable(deadline) else deadline
    if limit is not None and done < rounds and time.time() + round_seconds > limit:
        raise OutOfTime(
            f"stopped after round {done} of {rounds}: another round ({round_seconds:.0f} s) would pass the deadline"
        )
