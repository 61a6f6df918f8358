"""trainer.tensorboard=true: each round's metrics as TensorBoard events in the run directory,
read back with TensorBoard's own event reader; the switch is no part of the run id."""

import json

import pytest

from shared.config.schema import run_id
from shared.training.trainer import run

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def test_tensorboard_events_hold_every_rounds_metrics(tiny_cfg, tmp_path):
    cfg = tiny_cfg("trainer.tensorboard=true", "federation.rounds=3")
    assert run_id(cfg) == run_id(tiny_cfg("federation.rounds=3"))  # a view of the run, not another run
    out = tmp_path / "run"
    run(cfg, out)
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    acc = events.Scalars("global_acc")
    assert [e.step for e in acc] == [r["round"] for r in records] == [1, 2, 3]
    assert [e.value for e in acc] == pytest.approx([r["global_acc"] for r in records])
    assert [e.value for e in events.Scalars("train_loss")] == pytest.approx([r["train_loss"] for r in records])
    classes = len(records[0]["per_class_acc"])
    assert {f"per_class_acc/{k}" for k in range(classes)} <= set(events.Tags()["scalars"])
    assert "clients" not in events.Tags()["scalars"]  # client ids are no curve


def test_without_the_switch_a_run_writes_no_events(tiny_cfg, tmp_path):
    run(tiny_cfg("federation.rounds=1"), tmp_path / "run")
    assert not (tmp_path / "run" / "tensorboard").exists()
