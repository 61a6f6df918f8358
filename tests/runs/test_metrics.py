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


def test_a_carried_run_judged_before_the_per_class_check_is_named_as_such():
    """The campaign's reader judges a carried run's status again (run_schema.status_problem): a
    run that an older version called completed, whose mean accuracy over the classes is chance,
    is refused with that reason, not as a status the trainer never writes."""
    from shared.campaign.run_schema import status_problem
    from shared.targets.configs import load_config

    cfg = load_config(None, ["dataset=cifar10", "federation.rounds=10"])
    collapsed = curve(28.6, [100.0] + [0.0] * 9)
    problem = status_problem("completed", collapsed, cfg)
    assert problem == (
        "status is completed, but final mean accuracy over the classes 10.00% is chance (10.00%): "
        "a status of an older version"
    )
    assert status_problem(judge("completed", collapsed, 10), collapsed, cfg) is None
    assert status_problem("completed", curve(40.0, [40.0] * 10), cfg) is None
