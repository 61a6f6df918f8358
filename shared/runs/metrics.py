"""What a table's cell reports, computed from a run's metrics.json: pure functions on the
numbers a run wrote, with nothing from training (no torch), so that reporting (tables,
figures) never imports the training loop."""

from __future__ import annotations

import math


def rounds_to_target(rounds: list[int], accs: list[float], target: float) -> int | None:
    """FedCAD's T(x%): the first evaluated round whose global accuracy reaches the target."""
    return next((r for r, a in zip(rounds, accs) if a >= target), None)


def first_round_reaching(metrics: dict, target: float) -> float:
    """`rounds_to_target` on a run's curve; NaN (shown as '-') if never reached."""
    reached = rounds_to_target(metrics["eval_rounds"], metrics["global_acc"], target)
    return math.nan if reached is None else float(reached)


def cell_value(metric, metrics: dict, reference_final: float | None) -> float:
    """The value of `metric` (a table's Metric, shared/targets/table_declarations.py) for one run (its
    metrics.json as a dict); `reference_final` is the reference row's mean final accuracy in the
    same column (FedSSD's T, `rounds_to_row`)."""
    if metric.kind == "final_acc":
        return metrics["final_acc"]
    if metric.kind == "best_acc":
        return metrics["best_acc"]
    if metric.kind == "rounds_to":
        return first_round_reaching(metrics, metric.target)
    if metric.kind == "rounds_to_row":
        return math.nan if reference_final is None else first_round_reaching(metrics, reference_final)
    if metric.kind == "acc_at":
        return dict(zip(metrics["eval_rounds"], metrics["global_acc"])).get(metric.round, math.nan)
    if metric.kind == "domain_acc":
        return metrics["domain_acc"][metric.domain]
    if metric.kind == "domain_avg":
        values = list(metrics["domain_acc"].values())
        return math.fsum(values) / len(values)
    raise ValueError(f"unknown metric {metric.kind!r}")
