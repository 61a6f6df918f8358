"""A run's status as the trainer judges it from its curve (shared/runs/metrics.py `judge`)."""

import pytest

from shared.runs.metrics import judge


def curve(final_acc: float, per_class: list[float] | None = None, rounds: int = 10, last_loss: float = 1.0):
    history = [{"round": r + 1, "train_loss": 1.5} for r in range(rounds)]
    history[-1].update(train_loss=last_loss, global_acc=final_acc)
    if per_class is not None:
        history[-1]["per_class_acc"] = per_class
    return history


def test_a_learnt_run_stays_completed():
    assert judge("completed", curve(40.0, [50.0, 30.0, 40.0, 45.0, 35.0]), 5) == "completed"


def test_a_final_accuracy_at_chance_is_suspect():
    assert judge("completed", curve(20.4), 5) == "suspect: final accuracy 20.40% is chance (20.00%)"


def test_a_model_that_predicts_one_class_of_an_unbalanced_test_set_is_suspect():
    """SST-5's largest test class is 28.6% of it: a model that predicts it alone scores 28.6%,
    far above 100/5, and 20% on the mean over the classes."""
    status = judge("completed", curve(28.6, [0.0, 100.0, 0.0, 0.0, 0.0]), 5)
    assert status == "suspect: final mean accuracy over the classes 20.00% is chance (20.00%)"


def test_the_first_rounds_of_a_run_are_not_judged_at_chance():
    assert judge("completed", curve(10.0, [10.0] * 10, rounds=4), 10) == "completed"


def test_a_training_loss_that_exploded_is_suspect():
    assert judge("completed", curve(40.0, rounds=10, last_loss=100.0), 5).startswith("suspect: training loss rose")


@pytest.mark.parametrize("status", ["diverged: loss is nan", "failed: OSError"])
def test_a_run_that_did_not_complete_keeps_its_status(status):
    assert judge(status, curve(20.0), 5) == status
