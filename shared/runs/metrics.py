"""What a run's curve says beyond its numbers: the round it first reaches a target accuracy,
which the trainer writes into metrics.json (`rounds_to_target`) and the campaign derives for a
run it carries; no torch. What a table's cell reports from a run is shared/reporting/summary.py's."""

from __future__ import annotations


def rounds_to_target(rounds: list[int], accs: list[float], target: float) -> int | None:
    """FedCAD's T(x%): the first evaluated round whose global accuracy reaches the target."""
    return next((r for r, a in zip(rounds, accs) if a >= target), None)
