"""Where a round's seconds go: the rounds of shared/training/timed_rounds.py (`train_members`) time
their named steps with wall-clock laps and report each round to whoever observes (a campaign
session's timing record, shared/campaign/session_timing.py); nobody observing, a report costs nothing.

Each lap waits for the device first (on CUDA: the work queued so far), so that a phase's kernels
count in that phase: the aggregation's, queued and not waited for, would otherwise count in the
evaluation or checkpoint after it. The other phases end waiting for the device anyway (the
clients' losses, accuracies, weights copied to the host), so the waits cost microseconds.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

PHASES = ("preparation", "steps", "aggregation", "evaluation", "checkpointing")


@dataclass(frozen=True)
class RoundTiming:
    """One round of a group of runs (a run alone: a group of one)."""

    runs: int
    lane_steps: tuple[int, ...]  # each (run, client) lane's local steps this round
    lanes_per_step: int  # the lanes that share one training step (1: clients one after another)
    seconds: dict[str, float] = field(default_factory=dict)  # by PHASES

    @property
    def lanes(self) -> int:
        return len(self.lane_steps)

    @property
    def passes(self) -> int:
        """Batched steps of this many lanes each run to the longest lane's steps."""
        return math.ceil(self.lanes / self.lanes_per_step) if self.lanes_per_step > 1 else 0

    @property
    def steps(self) -> int:
        """Training steps the round took: one after another, every lane's; batched, each pass
        as many as its longest lane (taken as the round's longest)."""
        if not self.lane_steps:
            return 0
        return self.passes * max(self.lane_steps) if self.passes else sum(self.lane_steps)

    @property
    def paid_lane_steps(self) -> int:
        """The lane-steps the round paid for: each batched step as wide as its lanes."""
        return self.steps * (min(self.lanes_per_step, self.lanes) if self.passes else 1)

    @property
    def useful_share(self) -> float | None:
        """Of the lane-steps the round paid for, those a client had a batch for (the rest is
        padding: a lane waiting for the longest client of its step)."""
        return sum(self.lane_steps) / self.paid_lane_steps if self.steps else None


class Laps:
    """Seconds since the last lap, added to the named phase; on CUDA `device`'s queued work done first."""

    def __init__(self, device: torch.device):
        self.wait = torch.cuda.synchronize if device.type == "cuda" else lambda device: None
        self.device, self.seconds = device, dict.fromkeys(PHASES, 0.0)
        self.last = time.perf_counter()

    def lap(self, phase: str) -> None:
        self.wait(self.device)
        now = time.perf_counter()
        self.seconds[phase] += now - self.last
        self.last = now


OBSERVERS: list[Callable[[RoundTiming], None]] = []


@contextlib.contextmanager
def observing(callback: Callable[[RoundTiming], None]) -> Iterator[None]:
    """Every round trained in this block is reported to `callback`."""
    OBSERVERS.append(callback)
    try:
        yield
    finally:
        OBSERVERS.remove(callback)


def report(timing: RoundTiming) -> None:
    for callback in list(OBSERVERS):
        callback(timing)
