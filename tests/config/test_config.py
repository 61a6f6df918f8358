import subprocess
import sys

import pytest

from shared.config.reading import parse_override
from shared.config.schema import run_id, to_dict
from shared.run import main
from shared.targets.configs import load_config


def test_overrides_nest_and_parse_yaml_values():
    assert parse_override("partition.beta=0.1") == {"partition": {"beta": 0.1}}
    assert parse_override("method=fedavg") == {"method": {"name": "fedavg"}}
    assert parse_override("eval.target_acc=[60, 70]") == {"eval": {"target_acc": [60, 70]}}
    cfg = load_config(None, ["local.lr=1e-3", "model=resnet8", "partition=classes", "partition.k=3"])
    assert cfg.local.lr == 0.001 and cfg.model.name == "resnet8" and cfg.partition.kind == "classes"


def test_yaml_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("federation: {rounds: 7}\nlocal: {epochs: 3}\n")
    cfg = load_config(path, ["local.epochs=5"])
    assert cfg.federation.rounds == 7 and cfg.local.epochs == 5


def test_run_id_ignores_runtime_keys_only():
    base = run_id(load_config(None, []))
    assert run_id(load_config(None, ["data_root=/elsewhere", "trainer.device=cpu", "trainer.progress=false"])) == base
    assert run_id(load_config(None, ["seed=1"])) != base
    assert run_id(load_config(None, ["trainer.amp=true"])) != base
    assert (
        run_id(load_config(None, ["trainer.client_threads=2"]))
        == run_id(load_config(None, ["trainer.clients_per_step=2"]))
        == base
    )


def test_run_id_leaves_out_unset_keys():
    """An optional switch that is off (None) by default, added later, keeps every run's id."""
    from shared.config.schema import identity

    cfg = load_config(None, [])
    assert cfg.partition.domain_share is None and "domain_share" not in identity(cfg)["partition"]
    assert cfg.local.grad_clip is None and "grad_clip" not in identity(cfg)["local"]
    domains = ["dataset=synthetic", "dataset.synthetic.domains=[a,b]", "partition.kind=domains", "partition.clients=2"]
    assert run_id(load_config(None, [*domains, "partition.domain_share=0.5"])) != run_id(load_config(None, domains))


def test_cli_reports_bad_input_before_training(capsys):
    assert main(["method=nope"]) == 2
    assert "method.name='nope' is unknown" in capsys.readouterr().err


def test_cli_runs_one_config(tmp_path, tiny_cfg):
    from tests.conftest import TINY

    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "shared.run", *TINY, f"data_root={tmp_path}", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"status": "completed"' in proc.stdout
    assert "run_id:" in (out / "config.yaml").read_text()


def test_cli_json_config_matches_the_same_overrides(capsys):
    assert (
        main(["--json", '{"partition": {"beta": 0.1}, "eval": {"target_acc": [60]}}', "seed=3", "--print-config"]) == 0
    )
    printed = capsys.readouterr().out
    cfg = load_config(None, ["partition.beta=0.1", "eval.target_acc=[60]", "seed=3"])
    assert f"run_id: {run_id(cfg)}" in printed


# Run ids are a promise to users: a finished run is found again by its id. These were computed by
# the code before the architecture refactor (d4a132e) and must never change for the same config.
KNOWN_RUN_IDS = {
    (): "118af39a8379cf9d",
    ("method=fedprox",): "0fb889c20d76f698",
    ("method=fedssd", "aux.per_class=64"): "5251700813d2c418",
    ("method=fedgkd", "method.vote=true", "dataset.val_fraction=0.1"): "69ec8c8968076e7a",
    ("method=moon", "model.projection_dim=256", "partition.beta=0.1"): "ff19fdd09d43b7cc",
    ("dataset=synthetic", "model=resnet8", "local.epochs=2", "trainer.amp=true"): "0b8f8d24107a585c",
    ("method=fedcsd", "model=resnet8", "local.lr=0.1", "partition=classes", "partition.k=2"): "46842a8b4089fb40",
    # computed with dataset.augment (a bool) beside dataset.augmentation, before the two became one key
    ("dataset.augment=true",): "2b7bfa9fa49da481",
    ("dataset.augment=false",): "6397fad1e2c2c483",
    ("dataset.augmentation=feddf",): "b9685f6641cf4d39",
    ("dataset.augment=true", "dataset.augmentation=moon_cifar100"): "3ea0428d3e722845",
    ("dataset.augmentation=always",): "2b7bfa9fa49da481",
    ("dataset.augmentation=none",): "6397fad1e2c2c483",
    ("dataset.augmentation=always:moon_cifar100",): "3ea0428d3e722845",
    ("dataset.augment=false", "dataset.augmentation=feddf"): "3935a4046d137d87",
    ("dataset.augmentation=none:feddf",): "3935a4046d137d87",
}


@pytest.mark.parametrize("overrides", list(KNOWN_RUN_IDS))
def test_known_run_ids_stay_the_same(overrides):
    assert run_id(load_config(None, list(overrides))) == KNOWN_RUN_IDS[overrides]


def test_a_config_with_the_former_dataset_augment_loads_as_the_one_key_and_keeps_its_id(tmp_path):
    """A config file written while dataset.augment (a bool) sat beside dataset.augmentation reads as
    the one key; augment=false beside a transform augments nothing, as it did, under its own id."""
    written = tmp_path / "config.yaml"
    written.write_text("dataset:\n  augment: true\n  augmentation: feddf\n")
    cfg = load_config(written)
    assert cfg.dataset.augmentation == "always:feddf" and "augment" not in to_dict(cfg)["dataset"]
    assert run_id(cfg) == run_id(load_config(None, ["dataset.augment=true", "dataset.augmentation=feddf"]))
    off = load_config(None, ["dataset.augment=false", "dataset.augmentation=feddf"])  # augments nothing, as it did
    assert off.dataset.augmentation == "none:feddf" and off.dataset.augmented is False


def test_the_cached_defaults_of_idle_keys_cannot_be_changed_by_a_caller():
    from shared.config.reading import idle_key_defaults
    from shared.config.schema import ConfigError

    with pytest.raises(TypeError):
        idle_key_defaults()["partition.beta"] = 0.1
    with pytest.raises(ConfigError, match="partition.beta=0.1 has no effect"):
        load_config(None, ["partition.kind=iid", "partition.beta=0.1"])
