import json

import pytest
import torch

from shared.config.schema import ConfigError
from shared.runs.directory import RunDirectory
from shared.training import clients as client_training
from shared.training import trainer


def history(out):
    """Per-round records without the wall-clock fields, for exact comparison."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("seconds")
    return rows


def test_fedavg_learns_synthetic_data(tiny_cfg, tmp_path):
    cfg = tiny_cfg("federation.rounds=6", "local.epochs=2", "eval.target_acc=[50, 99.99]")
    summary = trainer.run(cfg, tmp_path / "run")
    assert summary["status"] == "completed"
    assert summary["best_acc"] >= 90 and summary["final_acc"] >= 80
    assert summary["global_acc"][0] < summary["final_acc"]
    assert len(summary["global_acc"]) == len(summary["local_acc"]) == 6
    t50 = summary["rounds_to_target"]["50"]
    assert t50 == next(r for r, a in zip(summary["eval_rounds"], summary["global_acc"]) if a >= 50)
    assert len(summary["per_class_acc"]) == 10
    for name in ("config.yaml", "metrics.jsonl", "metrics.json", "partition.csv", "model.pt"):
        assert (tmp_path / "run" / name).exists()
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_same_config_and_seed_is_bit_identical(tiny_cfg, tmp_path):
    cfg = tiny_cfg()
    trainer.run(cfg, tmp_path / "a")
    trainer.run(cfg, tmp_path / "b")
    assert history(tmp_path / "a") == history(tmp_path / "b")
    wa, wb = torch.load(tmp_path / "a" / "model.pt"), torch.load(tmp_path / "b" / "model.pt")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    other = trainer.run(tiny_cfg("seed=1"), tmp_path / "c")
    assert other["global_acc"] != json.loads((tmp_path / "a" / "metrics.json").read_text())["global_acc"]


def test_killed_run_resumes_to_the_same_result(tiny_cfg, tmp_path, kill_in_round):
    cfg = tiny_cfg("federation.rounds=4", "federation.participation=0.5", "eval.every=2")
    trainer.run(cfg, tmp_path / "straight")
    kill_in_round(cfg, tmp_path / "resumed", 2)
    assert (tmp_path / "resumed" / "checkpoint.pt").exists()
    assert len(history(tmp_path / "resumed")) == 2

    trainer.run(cfg, tmp_path / "resumed")
    assert history(tmp_path / "resumed") == history(tmp_path / "straight")
    wa, wb = torch.load(tmp_path / "straight" / "model.pt"), torch.load(tmp_path / "resumed" / "model.pt")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_finished_run_is_not_recomputed(tiny_cfg, tmp_path, monkeypatch):
    cfg = tiny_cfg()
    first = trainer.run(cfg, tmp_path / "run")
    monkeypatch.setattr(client_training, "train_client", lambda *a: pytest.fail("trained again"))
    assert trainer.run(cfg, tmp_path / "run") == first


def test_partial_participation_samples_ceil_c_times_n(tiny_cfg):
    cfg = tiny_cfg("partition.clients=10", "federation.participation=0.25")
    picks = [trainer.sample_clients(cfg, r) for r in range(20)]
    assert all(len(p) == 3 for p in picks)  # ceil(0.25 * 10)
    assert len({tuple(p) for p in picks}) > 1
    assert picks == [trainer.sample_clients(cfg, r) for r in range(20)]


def test_divergence_is_recorded_not_raised(tiny_cfg, tmp_path):
    summary = trainer.run(tiny_cfg("local.lr=1e30", "local.momentum=0"), tmp_path / "run")
    assert summary["status"].startswith("diverged")


def test_auxiliary_data_rules(tiny_cfg):
    from shared.data.federation import build_federation

    device = torch.device("cpu")
    head = build_federation(tiny_cfg("aux.per_class=5"), device)
    assert head.aux.y.bincount().tolist() == [5] * 10
    assert head.counts.sum() == 600  # the first-n rule overlaps the clients' data
    held = build_federation(tiny_cfg("aux.per_class=5", "aux.source=holdout"), device)
    assert held.aux.y.bincount().tolist() == [5] * 10
    assert held.counts.sum() == 550  # held out: removed from the clients' pool
    val = build_federation(tiny_cfg("dataset.val_fraction=0.1"), device)
    assert len(val.val) == 60 and val.counts.sum() == 540
    # dataset.val_source=unused: the clients keep all of train_subset, the validation rows lie beside it
    kept = tiny_cfg("dataset.train_subset=300", "dataset.val_fraction=0.1", "dataset.val_source=unused")
    apart = build_federation(kept, device)
    assert apart.counts.sum() == 300 and len(apart.val) == 30 and apart.val.y.bincount().tolist() == [3] * 10
    pool = {tuple(row.flatten().tolist()) for row in apart.train_x}
    assert not pool & {tuple(row.flatten().tolist()) for row in apart.val.x}
    with pytest.raises(ConfigError, match="leaves 0 training rows"):
        build_federation(
            tiny_cfg("dataset.train_subset=600", "dataset.val_fraction=0.1", "dataset.val_source=unused"), device
        )


def test_augmentation_crops_and_flips_on_device():
    from shared.data.federation import Augmenter

    aug = Augmenter((0.0,), (1 / 255,), augment=True, device=torch.device("cpu"), pad=4)
    x = torch.arange(64, dtype=torch.uint8).view(1, 1, 8, 8).repeat(256, 1, 1, 1)
    out = aug(x, torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    assert not torch.equal(out, aug.normalize(x).expand_as(out))
    centred = [o for o in out if torch.equal(o, x[0].float()) or torch.equal(o, x[0].float().flip(-1))]
    assert centred  # zero offset happens, with or without the flip
    # every output is a crop of the reflect-padded image at some offset, possibly mirrored
    padded = torch.nn.functional.pad(x[:1].float(), (4, 4, 4, 4), mode="reflect")[0]
    crops = [padded[:, i : i + 8, j : j + 8] for i in range(9) for j in range(9)]
    crops += [c.flip(-1) for c in crops]
    assert all(any(torch.equal(o, c) for c in crops) for o in out)
    plain = Augmenter((0.0,), (1 / 255,), augment=False, device=torch.device("cpu"))
    assert torch.equal(plain(x, torch.Generator()), x.float())


def test_bf16_autocast_and_channels_last_switches_run(tiny_cfg, tmp_path):
    summary = trainer.run(tiny_cfg("trainer.amp=true", "trainer.channels_last=true", "model=resnet8"), tmp_path / "r")
    assert summary["status"] == "completed" and summary["final_acc"] is not None


def test_an_exception_is_recorded_for_the_table(tiny_cfg, tmp_path):
    summary = RunDirectory(tmp_path, tiny_cfg()).record_failure(RuntimeError("CUDA out of memory"))
    assert summary["status"] == "failed: RuntimeError: CUDA out of memory"
    assert json.loads((tmp_path / "metrics.json").read_text())["final_acc"] is None


def test_a_clients_class_statistics_read_every_sample(tiny_cfg):
    """An epoch leaves out a trailing batch of one sample (BatchNorm cannot train on it); the
    class means FedProto, FedDistill+ and FedCSD upload read every sample, whatever the batch."""
    from shared.data.federation import build_federation
    from shared.methods.baselines.class_stats import class_means

    federation = build_federation(tiny_cfg(), torch.device("cpu"))
    client = federation.clients[0]
    batch = client.num_samples - 1  # the last batch holds one sample
    assert client.epoch_length(batch) == client.num_samples - 1
    means, counts = class_means(torch.nn.Flatten(), client, batch, federation.num_classes, lambda m, x: m(x))
    labels = federation.train_y[client.index]
    assert counts.tolist() == labels.bincount(minlength=federation.num_classes).float().tolist()
    first = labels[0].item()
    images = federation.augmenter.normalize(federation.train_x[client.index]).flatten(1)
    assert torch.allclose(means[first], images[labels == first].mean(0))
