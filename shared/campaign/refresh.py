"""The state file and timing.json rewritten while a unit trains (`Refresh`), so that a kill
from outside (a job's walltime, a caller's timeout, a preemption) loses at most REFRESH_SECONDS
of training; and the room kept at the end for the last save, from how long a save took."""

from __future__ import annotations

import time
from typing import Callable

from shared.campaign.state import Written
from shared.training.round_timing import RoundTiming

REFRESH_SECONDS = 60  # the most training a kill from outside may lose


class Refresh:
    """Called after every round (shared/training/round_timing.py's observers): the state file and
    timing.json rewritten after the first round trained, then before another round would end
    more than REFRESH_SECONDS after the last rewrite, so that a kill from outside loses at most
    that much training; each rewrite is whole before it replaces the last (`write_state`).
    `seconds`: how long the last rewrite took, of which `margin` keeps room at the end."""

    def __init__(self, save: Callable[[], Written], timing):
        self.write_state, self.timing = save, timing
        self.last: float | None = None  # none yet: the first round's end saves
        self.seconds = 0.0

    def __call__(self, round: RoundTiming) -> None:
        round_seconds = sum(round.seconds.values())
        if self.last is None or time.time() + round_seconds - self.last >= REFRESH_SECONDS:
            self.save()

    def margin(self) -> float:
        """The seconds kept free at the end for the last save: twice the last save's (the state
        grows between saves, and a loaded machine writes slower) and a second."""
        return 2 * self.seconds + 1

    def save(self) -> Written:
        started = time.time()
        written = self.write_state()
        if self.timing is not None:
            self.timing.write()
        self.last = time.time()
        self.seconds = self.last - started
        return written
