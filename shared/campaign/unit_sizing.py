"""How long a unit's round takes, and how many of its runs fit the time a session has left.

A unit is a run, or a group of runs in one batched step (shared/campaign/train.py, `training_units`).
Its round's seconds are estimated, in this order, from rounds measured on this device (each
round records its `seconds`, `slots` (its lanes: the (run, client) pairs it trained), `steps` and
`device` in metrics.jsonl: the carried checkpoints' history, and every round this session
trained so far; a round of another device, or of none, says nothing of this one):

    measured    rounds of the same method and model with the same number of lanes (the
                (run, client) pairs a round trains together)
    scaled      the step time of the nearest measured unit of the same model (the same method
                first, then the nearest number of lanes) times the unit's steps a round
                (`steps_per_round`): a batched step's time follows its steps and barely its lanes
    planned     the cost model's estimate (shared/targets/cost.py) of each run's round, the
                unit's runs one after another (a group's step saves launches, not arithmetic: a
                large model's group takes about as long as its runs alone, and a first round
                that overran would be lost)

`size_unit` then takes as many of the unit's runs (those with fewest rounds left first) as can
finish before the deadline; where none can, the whole unit, which trains until the deadline
and is carried on in its checkpoints.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from shared.config.schema import RunConfig
from shared.runs.files import RunFilesError, read_history
from shared.targets.cost import gpu_hours, samples


@dataclass(frozen=True)
class Measured:
    """A measured unit round: its method, model, lanes, training samples and seconds."""

    method: str
    model: str
    lanes: int
    steps: float  # training steps a round
    seconds: float


@dataclass(frozen=True)
class Estimate:
    seconds: float  # a round of the unit
    source: str  # "measured", "scaled from ...", "planned"


def clients_per_round(cfg: RunConfig) -> int:
    return max(1, math.ceil(cfg.federation.participation * cfg.partition.clients - 1e-9))


def client_samples(cfg: RunConfig) -> float:
    """A client's training samples, at the mean: the cost model's count (shared/targets/cost.py)."""
    trained, _ = samples(cfg)
    return trained / cfg.federation.rounds / clients_per_round(cfg) / cfg.local.epochs


def steps_per_round(cfgs: list[RunConfig]) -> float:
    """The training steps of a round of the unit of these runs, at the mean client's size: one
    after another, every client's; batched (trainer.clients_per_step > 1), a pass of as many
    lanes as the runs' clients_per_step add up to, each as long as a client's steps."""
    steps = []
    for cfg in cfgs:
        per_client = client_samples(cfg)
        steps += [math.ceil(per_client / cfg.local.batch_size) * cfg.local.epochs] * clients_per_round(cfg)
    width = sum(min(cfg.trainer.clients_per_step, clients_per_round(cfg)) for cfg in cfgs)
    return sum(steps) if width <= len(cfgs) else math.ceil(len(steps) / width) * max(steps)


def measured_rounds(runs: dict[str, RunConfig], runs_dir: Path, device: str) -> list[Measured]:
    """Each run's rounds in runs_dir on `device` by the lanes they trained with: the median
    seconds and steps (a resumed run's first round pays for warm-up and capture). A run of a
    group records the group's round."""
    found = []
    for rid, cfg in runs.items():
        try:
            records = read_history(Path(runs_dir) / rid) or []
        except (OSError, RunFilesError):
            continue
        by_lanes: dict[int, list[tuple[float, float]]] = {}
        for record in records:
            try:  # "slots": a round's lanes (shared/training/trainer.py `round_record`)
                lanes, steps, seconds = int(record["slots"]), float(record["steps"]), float(record["seconds"])
            except (ValueError, KeyError, TypeError):  # recorded before steps were
                continue
            if record.get("device") == device and lanes > 0 and steps > 0 and seconds > 0:
                by_lanes.setdefault(lanes, []).append((steps, seconds))
        found += [
            Measured(
                cfg.method["name"],
                cfg.model.name,
                lanes,
                statistics.median(s for s, _ in rounds),
                statistics.median(t for _, t in rounds),
            )
            for lanes, rounds in by_lanes.items()
        ]
    return found


def planned_seconds(cfg: RunConfig) -> float:
    """the cost model's estimate (shared/targets/cost.py) of one run's round."""

    return 3600 * gpu_hours(cfg) / cfg.federation.rounds


def round_seconds(cfgs: list[RunConfig], measured: list[Measured]) -> Estimate:
    """A round of the unit of these runs, from what was measured (module docstring)."""
    method, model = cfgs[0].method["name"], cfgs[0].model.name
    lanes = sum(clients_per_round(cfg) for cfg in cfgs)
    exact = [m.seconds for m in measured if (m.method, m.model, m.lanes) == (method, model, lanes)]
    if exact:
        return Estimate(statistics.median(exact), "measured")
    same_model = [m for m in measured if m.model == model]
    if same_model:
        nearest = min(same_model, key=lambda m: (m.method != method, abs(math.log(m.lanes / lanes))))
        return Estimate(
            nearest.seconds / nearest.steps * steps_per_round(cfgs),
            f"{nearest.seconds / nearest.steps:.3g} s a step, as {nearest.method} {nearest.model} "
            f"with {nearest.lanes} lanes",
        )
    return Estimate(sum(planned_seconds(cfg) for cfg in cfgs), "planned")


def rounds_left(cfg: RunConfig, done: int) -> int:
    return max(cfg.federation.rounds - max(done, 0), 0)


def size_unit(
    rids: list[str], runs: dict[str, RunConfig], done: dict[str, int], seconds_left: float, measured: list[Measured]
) -> tuple[list[str], Estimate]:
    """The runs of the unit to train now and their round's estimate: as many as finish in
    `seconds_left` (those with fewest rounds left first; `done`: rounds each has), else all of
    them (none can finish: the unit trains until the deadline, carried on in its checkpoints)."""
    order = sorted(rids, key=lambda rid: rounds_left(runs[rid], done.get(rid, 0)))
    for take in range(len(order), 0, -1):
        chosen = order[:take]
        estimate = round_seconds([runs[rid] for rid in chosen], measured)
        if max(rounds_left(runs[rid], done.get(rid, 0)) for rid in chosen) * estimate.seconds <= seconds_left:
            return [rid for rid in rids if rid in chosen], estimate
    return rids, round_seconds([runs[rid] for rid in rids], measured)
