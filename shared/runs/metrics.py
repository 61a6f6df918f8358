"""A run's metrics.json made of its rounds' records (`summarize`): its status as judged from its
curve (`judge`), its final and best accuracy, the round it first reaches each target accuracy
(`rounds_to_target`). The trainer writes it; the campaign checks a carried run's against its
history. No torch. What a table's cell reports from a run is shared/reporting/summary.py's."""

from __future__ import annotations

import math

from shared.config.schema import RunConfig, run_id

# Within this of chance (100 / classes %), an accuracy says the model has not learnt: a long run's
# final one makes it suspect (`judge`), a table's cell mean marks the cell (shared/reporting/summary.py).
CHANCE_MARGIN = 0.5
# the start of the status of a run whose final mean accuracy over the classes alone is chance
CHANCE_PER_CLASS = "suspect: final mean accuracy over the classes"


def rounds_to_target(rounds: list[int], accs: list[float], target: float) -> int | None:
    """FedCAD's T(x%): the first evaluated round whose global accuracy reaches the target."""
    return next((r for r, a in zip(rounds, accs) if a >= target), None)


def judge(status: str, history: list[dict], num_classes: int) -> str:
    """A completed run whose final accuracy is chance, or whose training loss exploded far
    above where it started, is `suspect`: a table marks it rather than print it as a number.
    Chance is judged on the accuracy and on its mean over the classes: a model that predicts
    one class scores 100/classes on the latter, on an unbalanced test set (SST-5's largest
    class is 29% of it) far less than its accuracy. (A class the test split lacks counts 0
    there; no dataset here lacks one.)"""
    if status != "completed" or not history:
        return status
    evaluated = [h for h in history if "global_acc" in h]
    chance = 100 / num_classes
    # a few rounds (the smoke scale's 4) may not leave chance yet; that says nothing of the run
    if evaluated and len(history) >= 5:
        last = evaluated[-1]
        if last["global_acc"] <= chance + CHANCE_MARGIN:
            return f"suspect: final accuracy {last['global_acc']:.2f}% is chance ({chance:.2f}%)"
        per_class = last.get("per_class_acc")
        mean = sum(per_class) / len(per_class) if per_class else math.inf
        if mean <= chance + CHANCE_MARGIN:
            return f"{CHANCE_PER_CLASS} {mean:.2f}% is chance ({chance:.2f}%)"
    first, last_loss = history[0]["train_loss"], history[-1]["train_loss"]
    if last_loss > 10 * max(first, math.log(num_classes)):
        return f"suspect: training loss rose from {first:.3g} to {last_loss:.3g}"
    return status


def summarize(history: list[dict], cfg: RunConfig, status: str, wall_time: float, extra: dict) -> dict:
    evaluated = [h for h in history if "global_acc" in h]
    rounds = [h["round"] for h in evaluated]
    accs = [h["global_acc"] for h in evaluated]
    return {
        "status": status,
        "run_id": run_id(cfg),
        "rounds_completed": len(history),
        "final_acc": accs[-1] if accs else None,
        "best_acc": max(accs) if accs else None,
        "eval_rounds": rounds,
        "global_acc": accs,
        "global_loss": [h["global_loss"] for h in evaluated],
        "local_acc": [h.get("local_acc") for h in evaluated],
        "per_class_acc": evaluated[-1]["per_class_acc"] if evaluated else None,
        "domain_acc": evaluated[-1].get("domain_acc") if evaluated else None,  # by domain name (Office-Caltech-10)
        "rounds_to_target": {f"{t:g}": rounds_to_target(rounds, accs, t) for t in cfg.eval.target_acc},
        "wall_time_s": wall_time,
        **extra,
    }
