"""Bad inputs stop before any data is loaded or model built, with one line that names the key
and what it may be. Ranges are declared with each field (shared.config.Range), checks across
keys with each registry and method (`check_config`)."""
import pytest
import torch

from shared.config import ConfigError
from shared.config_loading import load_config
from shared.run import main

AUX = "aux.per_class=8"

# (overrides, the message it gives): each is a user's plausible mistake
BAD_CONFIGS = [
    # the federated loop's own sections
    (["seed=-1"], r"^seed=-1 must be >= 0$"),
    (["federation.rounds=0"], r"^federation.rounds=0 must be >= 1$"),
    (["federation.participation=0"], r"^federation.participation=0.0 must lie in \(0, 1\]$"),
    (["federation.participation=1.5"], r"^federation.participation=1.5 must lie in \(0, 1\]$"),
    (["federation.weighting=median"], r"^federation.weighting='median' is unknown; valid: \['samples', 'uniform'\]$"),
    (["federation.round=3"], r"^federation: unknown key\(s\) \['round'\]; valid keys: \['participation', 'rounds'"),
    (["local.epochs=0"], r"^local.epochs=0 must be >= 1$"),
    (["local.epochs=two"], r"^local.epochs: expected an integer, got 'two'$"),
    (["local.batch_size=0"], r"^local.batch_size=0 must be >= 1$"),
    (["local.lr=0"], r"^local.lr=0.0 must be > 0$"),
    (["local.lr=inf"], r"^local.lr=inf must be a finite number$"),
    (["local.lr=.nan"], r"^local.lr=nan must be a finite number$"),
    (["local.momentum=1"], r"^local.momentum=1.0 must lie in \[0, 1\)$"),
    (["local.weight_decay=-1e-4"], r"^local.weight_decay=-0.0001 must be >= 0$"),
    (["local.grad_clip=0"], r"^local.grad_clip=0.0 must be > 0$"),
    (["local.optimizer=rmsprop"], r"^local.optimizer='rmsprop' is unknown; valid: \['adam', 'sgd'\]$"),
    (["eval.batch_size=0"], r"^eval.batch_size=0 must be >= 1$"),
    (["eval.batch_size=-5"], r"^eval.batch_size=-5 must be >= 1$"),
    (["eval.every=0"], r"^eval.every=0 must be >= 1$"),
    (["eval.target_acc=[60, 120]"], r"^eval.target_acc\[1\]=120.0 must lie in \(0, 100\]$"),
    (["trainer.device=tpu"], r"^trainer.device='tpu': use auto, cpu, cuda or cuda:N$"),
    (["trainer.amp=maybe"], r"^trainer.amp: expected true or false, got 'maybe'$"),
    (["trainer.clients_per_step=0"], r"^trainer.clients_per_step=0 must be >= 1$"),
    (["trainer.client_threads=2", "trainer.clients_per_step=2"], r"^trainer.client_threads > 1 goes with neither"),
    (["aux.per_class=-1"], r"^aux.per_class=-1 must be >= 0$"),
    # the dataset, the partition and the model, against each other
    (["dataset=mnist"], r"^dataset.name='mnist' is unknown; valid: \["),
    (["dataset=imagefolder"], r"^dataset.path is required for dataset.name=imagefolder$"),
    (["dataset.val_fraction=1"], r"^dataset.val_fraction=1.0 must lie in \[0, 1\)$"),
    (["dataset=synthetic", "dataset.synthetic.num_classes=1"], r"^dataset.synthetic.num_classes=1 must be >= 2$"),
    (["partition.beta=0"], r"^partition.beta=0.0 must be > 0$"),
    (["partition.k=0"], r"^partition.k=0 must be >= 1$"),
    (["partition.clients=0"], r"^partition.clients=0 must be >= 1$"),
    (["partition.kind=shards"], r"^partition.kind='shards' is unknown"),
    (["partition.kind=writers"], r"^partition.kind=writers needs writer ids, which dataset.name=cifar10 has not"),
    (["model=vgg"], r"^model.name='vgg' is unknown; valid: \["),
    (["model=distilbert"], r"^model.name=distilbert does not fit dataset.name=cifar10: text datasets"),
    (["dataset=synthetic", "dataset.synthetic.image_size=4"],
     r"^model.name=fedavg_cnn cannot take dataset.name=synthetic's 3x4x4 images: it needs a side of at least 16 pixels$"),
    (["model=alexnet_bn"], r"^model.name=alexnet_bn cannot take dataset.name=cifar10's 3x32x32 images: it needs a side of at least 63"),
    # the methods' hyperparameters: each range declared in the method's Params
    (["method=fedfoo"], r"^method.name='fedfoo' is unknown; valid: \['fedavg', .*'scaffold'\]$"),
    (["method.mu=0.1"], r"^method: unknown key\(s\) \['mu'\]; valid keys: \[\] \(method.name=fedavg\)$"),
    (["method=fedprox", "method.mu=-0.01"], r"^method.mu=-0.01 must be >= 0 \(method.name=fedprox\)$"),
    (["method=moon", "method.tau=0"], r"^method.tau=0.0 must be > 0 \(method.name=moon\)$"),
    (["method=fedgkd", "method.gamma=.nan"], r"^method.gamma=nan must be a finite number \(method.name=fedgkd\)$"),
    (["method=fedgkd", "method.buffer=0"], r"^method.buffer=0 must be >= 1 \(method.name=fedgkd\)$"),
    (["method=fedgkd", "method.vote=true"], r"^FedGKD-VOTE weighs its buffer by validation loss: set dataset.val_fraction"),
    (["method=fedssd", AUX, "method.m_max=-0.01"], r"^method.m_max=-0.01 must be >= 0 \(method.name=fedssd\)$"),
    (["method=fedssd"], r"^FedSSD's credibility needs the server's auxiliary data: set aux.per_class \(64\)$"),
    (["method=fedcad", AUX, "method.beta=0.7", "method.gamma=0.5"],
     r"^method.beta=0.7 must be <= method.gamma=0.5: a_y lies in \[beta, gamma\]$"),
    (["method=fedcad", AUX, "method.gamma=1.5"], r"^method.gamma=1.5 must lie in \[0, 1\] \(method.name=fedcad\)$"),
    (["method=fedcsd", "method.tma=1.5"], r"^method.tma=1.5 must lie in \[0, 1\] \(method.name=fedcsd\)$"),
    (["method=fedcsd", "method.mask=soft"], r"^method.mask='soft' is unknown; valid: \['adaptive', 'forcible', 'none'\]"),
    (["method=fedavgm", "method.beta=1"], r"^method.beta=1.0 must lie in \[0, 1\) \(method.name=fedavgm\)$"),
    (["method=fedgen", "method.generator_lr=0"], r"^method.generator_lr=0.0 must be > 0 \(method.name=fedgen\)$"),
    (["method=fedcurv", "method.fisher_samples=0"], r"^method.fisher_samples=0 must be >= 1 \(method.name=fedcurv\)$"),
    (["method=fedntd", "method.tau=-1"], r"^method.tau=-1.0 must be > 0 \(method.name=fedntd\)$"),
    (["method=fedlsd", "method.alpha=2"], r"^method.alpha=2.0 must lie in \[0, 1\] \(method.name=fedlsd\)$"),
    (["method=scaffold", "local.optimizer=adam"], r"^method scaffold models local SGD steps; it needs local.optimizer=sgd$"),
]


@pytest.mark.parametrize("overrides, message", BAD_CONFIGS, ids=[" ".join(o) for o, _ in BAD_CONFIGS])
def test_a_bad_config_is_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message) as raised:
        load_config(None, overrides)
    assert "\n" not in str(raised.value)


def cli_error(capsys, argv) -> str:
    """What `python -m shared.run ARGV` says; it must stop with exit code 2 and one line."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_a_config_file_that_is_not_yaml(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("federation:\n  rounds: [3\n")
    assert "run.yaml: not valid YAML at line 3" in cli_error(capsys, [str(path), "--out", str(tmp_path / "r")])


def test_a_missing_config_file(tmp_path, capsys):
    assert "cannot read the config file" in cli_error(capsys, [str(tmp_path / "nope.yaml")])


def test_an_override_without_a_value(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("federation: {rounds: 3}\n")
    assert "override 'local.epochs' is not of the form key=value" in cli_error(capsys, [str(path), "local.epochs"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_gpu_this_machine_lacks(tmp_path, capsys):
    """Refused before the data (here: nothing under data_root, which a load would try to fetch)."""
    err = cli_error(capsys, ["dataset=cifar10", f"data_root={tmp_path}", "trainer.device=cuda:1", "--out", str(tmp_path / "r")])
    assert "trainer.device=cuda:1: this machine has no CUDA device; use trainer.device=auto or cpu" in err
    assert list(tmp_path.iterdir()) == []
