"""Bad inputs stop before any data is loaded or model built, with one line that names the key
and what it may be. Ranges are declared with each field (shared.config.schema.Range), checks across
keys with each registry and method (`check_config`). Files and command lines (--json,
--configs, --out) are checked as they are read; what only the data tells (an empty client,
one class, images too small to augment) is one line once it has loaded, before training."""

import os
import re

import pytest
import torch

from shared import workflow_job
from shared.config.schema import ConfigError
from shared.run import main
from shared.targets.configs import load_config

AUX = "aux.per_class=8"

# (overrides, the message it gives): each is a user's plausible mistake
BAD_CONFIGS = [
    # the federated loop's own sections
    (["seed=-1"], r"^seed=-1 must lie in \[0, 9223372036854775807\]$"),
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
    (["dataset.val_source=test"], r"^dataset.val_source='test' is unknown; valid: \['dev', 'unused'\]$"),
    (
        ["dataset.val_source=unused", "dataset.val_fraction=0.1"],
        r"^dataset.val_source=unused holds dataset.val_fraction",
    ),
    (
        ["dataset.val_source=dev"],
        r"^dataset.val_source=dev needs a development split, which dataset.name=cifar10 has not; use sst5$",
    ),
    (
        ["dataset=sst5", "model=distilbert", "dataset.val_source=dev", "dataset.val_fraction=0.1"],
        r"^dataset.val_source=dev validates on the development split, whole",
    ),
    (["dataset=synthetic", "dataset.synthetic.num_classes=1"], r"^dataset.synthetic.num_classes=1 must be >= 2$"),
    (["partition.beta=0"], r"^partition.beta=0.0 must be > 0$"),
    (["partition.k=0"], r"^partition.k=0 must be >= 1$"),
    (["partition.clients=0"], r"^partition.clients=0 must be >= 1$"),
    (["partition.kind=shards"], r"^partition.kind='shards' is unknown"),
    (["partition.kind=writers"], r"^partition.kind=writers needs writer ids, which dataset.name=cifar10 has not"),
    (["model=vgg"], r"^model.name='vgg' is unknown; valid: \["),
    (["model=distilbert"], r"^model.name=distilbert does not fit dataset.name=cifar10: text datasets"),
    (
        ["dataset=ag_news", "model=distilbert", "model.init=kaiming_fan_out"],
        r"^model.init=kaiming_fan_out initialises convolutions, which model.name=distilbert has not$",
    ),
    (
        ["dataset=synthetic", "dataset.synthetic.image_size=4"],
        r"^model.name=fedavg_cnn cannot take dataset.name=synthetic's 3x4x4 images: "
        r"it needs a side of at least 16 pixels$",
    ),
    (
        ["model=alexnet_bn"],
        r"^model.name=alexnet_bn cannot take dataset.name=cifar10's 3x32x32 images: it needs a side of at least 63",
    ),
    # the methods' hyperparameters: each range declared in the method's Params
    (["method=fedfoo"], r"^method.name='fedfoo' is unknown; valid: \['fedavg', .*'scaffold'\] \(.* tables.py"),
    (["method.mu=0.1"], r"^method: unknown key\(s\) \['mu'\]; valid keys: \[\] \(method.name=fedavg\)$"),
    (["method=fedprox", "method.mu=-0.01"], r"^method.mu=-0.01 must be >= 0 \(method.name=fedprox\)$"),
    (["method=moon", "method.tau=0"], r"^method.tau=0.0 must be > 0 \(method.name=moon\)$"),
    (["method=fedgkd", "method.gamma=.nan"], r"^method.gamma=nan must be a finite number \(method.name=fedgkd\)$"),
    (["method=fedgkd", "method.buffer=0"], r"^method.buffer=0 must be >= 1 \(method.name=fedgkd\)$"),
    (
        ["method=fedgkd", "method.vote=true"],
        r"^FedGKD-VOTE weighs its buffer by validation loss: set dataset.val_fraction",
    ),
    (["method=fedssd", AUX, "method.m_max=-0.01"], r"^method.m_max=-0.01 must be >= 0 \(method.name=fedssd\)$"),
    (["method=fedssd"], r"^FedSSD's credibility needs the server's auxiliary data: set aux.per_class \(64\)$"),
    (
        ["method=fedcad", AUX, "method.beta=0.7", "method.gamma=0.5"],
        r"^method.beta=0.7 must be <= method.gamma=0.5: a_y lies in \[beta, gamma\]$",
    ),
    (["method=fedcad", AUX, "method.gamma=1.5"], r"^method.gamma=1.5 must lie in \[0, 1\] \(method.name=fedcad\)$"),
    (["method=fedcsd", "method.tma=1.5"], r"^method.tma=1.5 must lie in \[0, 1\] \(method.name=fedcsd\)$"),
    (
        ["method=fedcsd", "method.mask=soft"],
        r"^method.mask='soft' is unknown; valid: \['adaptive', 'forcible', 'none'\]",
    ),
    (["method=fedavgm", "method.beta=1"], r"^method.beta=1.0 must lie in \[0, 1\) \(method.name=fedavgm\)$"),
    (["method=fedgen", "method.generator_lr=0"], r"^method.generator_lr=0.0 must be > 0 \(method.name=fedgen\)$"),
    (["method=fedcurv", "method.fisher_samples=0"], r"^method.fisher_samples=0 must be >= 1 \(method.name=fedcurv\)$"),
    (["method=fedntd", "method.tau=-1"], r"^method.tau=-1.0 must be > 0 \(method.name=fedntd\)$"),
    (["method=fedlsd", "method.alpha=2"], r"^method.alpha=2.0 must lie in \[0, 1\] \(method.name=fedlsd\)$"),
    (
        ["method=scaffold", "local.optimizer=adam"],
        r"^method scaffold models local SGD steps; it needs local.optimizer=sgd$",
    ),
    # integers that would overflow numpy or torch far from here, and numbers beyond any float
    (["seed=9223372036854775808"], r"^seed=9223372036854775808 does not fit in a 64-bit integer$"),
    (["seed=18446744073709551616"], r"^seed=18446744073709551616 does not fit in a 64-bit integer$"),
    (
        ["seed=99999999999999999999999999999999999999999999999999"],
        r"^seed=9999.*9999 does not fit in a 64-bit integer$",
    ),
    (["local.epochs=1e30"], r"^local.epochs=1000000000000000019884624838656 does not fit in a 64-bit integer$"),
    (["local.batch_size=100000000000000000000"], r"^local.batch_size=100000000000000000000 does not fit in a 64-bit"),
    (["partition.clients=-99999999999999999999"], r"^partition.clients=-99999999999999999999 does not fit in a 64-bit"),
    ([f"local.lr={10**400}"], r"^local.lr=1000.*000 must be a finite number$"),
    (["dataset.synthetic.image_size=100000"], r"^dataset.synthetic.image_size=100000 must lie in \[1, 1024\]$"),
    (
        ["dataset.synthetic.train_per_class=1e11"],
        r"^dataset.synthetic.train_per_class=100000000000 must lie in \[1, 100000\]$",
    ),
    (["dataset.synthetic.channels=0"], r"^dataset.synthetic.channels=0 must lie in \[1, 16\]$"),
    (["eval.every=-1"], r"^eval.every=-1 must be >= 1$"),
    (["partition.min_size=-1"], r"^partition.min_size=-1 must be >= 0$"),
    # whole sections, and values, of the wrong type
    (["local=3"], r"^local: expected a mapping, got 3$"),
    (["federation=[1, 2]"], r"^federation: expected a mapping, got \[1, 2\]$"),
    (["trainer=null"], r"^trainer: expected a mapping, got None$"),
    (["dataset.synthetic=fast"], r"^dataset.synthetic: expected a mapping, got 'fast'$"),
    (["method=null"], r"^method: expected a method name or a mapping, got None$"),
    (["method=[fedavg, fedprox]"], r"^method: expected a method name or a mapping, got \['fedavg', 'fedprox'\]$"),
    (["method=3"], r"^method: expected a method name or a mapping, got 3$"),
    (["method.name=null"], r"^method.name: expected a string, got None$"),
    (["method.name=[fedprox]"], r"^method.name: expected a string, got \['fedprox'\]$"),
    (["method=fedprox", "method.mu=[1]"], r"^method.mu: expected a number, got \[1\] \(method.name=fedprox\)$"),
    (["local.lr=abc"], r"^local.lr: expected a number, got 'abc'$"),
    (["local.momentum=0.5x"], r"^local.momentum: expected a number, got '0.5x'$"),
    (["federation.rounds=true"], r"^federation.rounds: expected an integer, got True$"),
    (["federation.rounds=2.5"], r"^federation.rounds: expected an integer, got 2.5$"),
    (["dataset.name=3"], r"^dataset.name: expected a string, got 3$"),
    (["dataset.path=[a, b]"], r"^dataset.path: expected a string, got \['a', 'b'\]$"),
    (["dataset.synthetic.domains=3"], r"^dataset.synthetic.domains\[0\]: expected a string, got 3$"),
    (["eval.target_acc={a: 1}"], r"^eval.target_acc\[0\]: expected a number, got \{'a': 1\}$"),
    (["eval.local=yes please"], r"^eval.local: expected true, false or per_class, got 'yes please'$"),
    (
        ["federation.weighting=[samples]"],
        r"^federation.weighting=\['samples'\] is unknown; valid: \['samples', 'uniform'\]$",
    ),
    (["aux.source=3"], r"^aux.source=3 is unknown; valid: \['holdout', 'train_head'\]$"),
    (
        ["local.optimizer=" + "x" * 5000],
        r"^local.optimizer='x{10,20}\.\.\.x{10,20}' is unknown; valid: \['adam', 'sgd'\]$",
    ),
    (["federaton.rounds=3"], r"^config: unknown key\(s\) \['federaton'\]; valid keys: "),
    # device strings torch would refuse, or indices a CPU or MPS machine lacks
    (["trainer.device=cuda:x"], r"^trainer.device='cuda:x': use auto, cpu, cuda or cuda:N$"),
    (["trainer.device=cuda:-1"], r"^trainer.device='cuda:-1': use auto, cpu, cuda or cuda:N$"),
    (["trainer.device=cpu:1"], r"^trainer.device='cpu:1': use auto, cpu, cuda or cuda:N$"),
    (["trainer.device=mps:2"], r"^trainer.device='mps:2': use auto, cpu, cuda or cuda:N$"),
    (["trainer.device=cuda:0:1"], r"^trainer.device='cuda:0:1': use auto, cpu, cuda or cuda:N$"),
    (["trainer.device=CUDA"], r"^trainer.device='CUDA': use auto, cpu, cuda or cuda:N$"),
    # a key that another setting makes meaningless (shared.config.reading.IDLE_KEYS)
    (
        ["partition=iid", "partition.beta=0.1"],
        r"^partition.beta=0.1 has no effect with partition.kind=iid "
        r"\(it applies with partition.kind=dirichlet or dirichlet_balanced\); remove it$",
    ),
    (["partition=classes", "partition.beta=0.1"], r"^partition.beta=0.1 has no effect with partition.kind=classes "),
    (
        ["partition=iid", "partition.k=3"],
        r"^partition.k=3 has no effect with partition.kind=iid \(it applies with "
        r"partition.kind=classes\); remove it$",
    ),
    (["partition.k=3"], r"^partition.k=3 has no effect with partition.kind=dirichlet "),
    (
        ["partition=classes", "partition.min_size=5"],
        r"^partition.min_size=5 has no effect with partition.kind=classes "
        r"\(it applies with partition.kind=dirichlet\); remove it$",
    ),
    (
        ["partition.writers=100"],
        r"^partition.writers=100 has no effect with partition.kind=dirichlet "
        r"\(it applies with partition.kind=writers\); remove it$",
    ),
    (
        ["local.optimizer=adam", "local.momentum=0.5"],
        r"^local.momentum=0.5 has no effect with local.optimizer=adam "
        r"\(it applies with local.optimizer=sgd\); remove it$",
    ),
    (
        ["aux.source=holdout"],
        r"^aux.source=holdout has no effect with aux.per_class=0 \(it applies with "
        r"aux.per_class > 0\); remove it$",
    ),
]


@pytest.mark.parametrize("overrides, message", BAD_CONFIGS, ids=[" ".join(o) for o, _ in BAD_CONFIGS])
def test_a_bad_config_is_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message) as raised:
        load_config(None, overrides)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["partition=iid", "partition.beta=0.5"],  # at its default: the same run as without it
        ["partition=iid", "partition.writers=null"],
        ["partition=classes", "partition.k=3"],
        ["partition=dirichlet_balanced", "partition.beta=0.1"],
        ["local.optimizer=adam", "local.momentum=0.9"],
        ["aux.per_class=8", "aux.source=holdout"],
    ],
    ids=" ".join,
)
def test_a_key_that_has_an_effect_or_sits_at_its_default_passes(overrides):
    load_config(None, overrides)


def test_a_resolved_config_read_back_passes():
    """A run's config.yaml names every key, those another key makes idle too (at their defaults)."""
    from shared.config.schema import identity, run_id

    cfg = load_config(None, ["partition=iid", "local.optimizer=adam"])
    assert run_id(load_config(None, identity(cfg))) == run_id(cfg)


def test_every_grid_expands_at_every_scale():
    """No table, figure or search sets a key that another of its settings makes idle (nor any
    other bad value): every cell of every grid loads, at each scale."""
    from shared.targets.resolve import workflow_cells
    from shared.targets.scales import SCALES

    for scale in SCALES:
        assert workflow_cells(scale), scale


def cli_error(capsys, argv) -> str:
    """What `python -m shared.run ARGV` says (`python -m shared.workflow_job` where ARGV names
    --runs); it must stop with exit code 2 and one line."""
    assert (workflow_job.main if "--runs" in argv else main)(argv) == 2
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
    err = cli_error(
        capsys, ["dataset=cifar10", f"data_root={tmp_path}", "trainer.device=cuda:1", "--out", str(tmp_path / "r")]
    )
    assert "trainer.device=cuda:1: this machine has no CUDA device; use trainer.device=auto or cpu" in err
    assert list(tmp_path.iterdir()) == []


# --- files and command lines: each stops before any data loads, in one line ----------------

# 9**9 leaves in a few hundred bytes: printed whole, the message would never end
ALIAS_BOMB = "local:\n  epochs:\n  - &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  - &{b} [*{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}]\n" for a, b in zip("abcdefgh", "bcdefghi")
)


def write(tmp_path, name, data: bytes | str):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


# (argv made from tmp_path, what the line says)
BAD_COMMAND_LINES = {
    "config file not UTF-8": (
        lambda t: [write(t, "run.yaml", b"federation:\n  rounds: 3 # \xe9t\xe9\n")],
        "run.yaml: not UTF-8 text (byte 0xe9 at offset 26); save it as UTF-8",
    ),
    "config file a list": (
        lambda t: [write(t, "run.yaml", "- 1\n- 2\n")],
        "run.yaml: expected a mapping at the top level",
    ),
    "config section of the wrong type": (
        lambda t: [write(t, "run.yaml", "local: 3\n")],
        "local: expected a mapping, got 3",
    ),
    "config method a list": (
        lambda t: [write(t, "run.yaml", "method: [fedavg]\n")],
        "method: expected a method name or a mapping, got ['fedavg']",
    ),
    "YAML alias bomb": (lambda t: [write(t, "run.yaml", ALIAS_BOMB)], "local.epochs: expected an integer, got [["),
    "--json not JSON": (lambda t: ["--json", "{federation: 3}"], "--json: not valid JSON (Expecting property name"),
    "--json a list": (lambda t: ["--json", "[1, 2]"], "--json: expected a JSON mapping, got [1, 2]"),
    "--json a string": (lambda t: ["--json", '"fedavg"'], "--json: expected a JSON mapping, got 'fedavg'"),
    "--json a wrong section": (lambda t: ["--json", '{"local": 3}'], "local: expected a mapping, got 3"),
    "--configs not JSON": (
        lambda t: ["--runs", "results/runs/0123456789abcdef", "--configs", write(t, "c.json", "{x")],
        "c.json: not valid JSON",
    ),
    "--configs not UTF-8": (
        lambda t: ["--runs", "results/runs/0123456789abcdef", "--configs", write(t, "c.json", b"\xff")],
        "c.json: cannot read it",
    ),
    "--configs a list": (
        lambda t: ["--runs", "results/runs/0123456789abcdef", "--configs", write(t, "c.json", "[]")],
        "c.json: expected a JSON mapping, got []",
    ),
    "--out a file": (
        lambda t: ["dataset=synthetic", "--out", write(t, "taken", "a file")],
        "taken is a file, not a directory",
    ),
    "--out below a file": (
        lambda t: ["dataset=synthetic", "--out", write(t, "taken", "a file") + "/run"],
        "taken is a file, so no directory can be made below it",
    ),
    "override not YAML": (lambda t: ["local.epochs=[3"], "override 'local.epochs=[3': the value is not valid YAML"),
    "config file with an idle key": (
        lambda t: [write(t, "run.yaml", "partition:\n  kind: iid\n  beta: 0.1\n")],
        "partition.beta=0.1 has no effect with partition.kind=iid",
    ),
    "--json with an idle key": (
        lambda t: ["--json", '{"local": {"optimizer": "adam", "momentum": 0}}'],
        "local.momentum=0.0 has no effect with local.optimizer=adam",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_COMMAND_LINES))
def test_a_bad_file_or_command_line_is_one_line(case, tmp_path, capsys, monkeypatch):
    argv, message = BAD_COMMAND_LINES[case]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDREPRO_DATA", str(tmp_path / "data"))  # where a load would fetch to
    err = cli_error(capsys, argv(tmp_path))
    assert message in err and len(err) < 400, err
    assert not (tmp_path / "data").exists() and not (tmp_path / "results").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_out_is_one_line(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert "locked is not writable" in cli_error(capsys, ["dataset=synthetic", "--out", str(locked / "run")])
    finally:
        locked.chmod(0o755)


# --- what only the data tells: one line once it has loaded, before training ----------------

TINY = [
    "dataset=synthetic",
    "dataset.synthetic.train_per_class=20",
    "dataset.synthetic.test_per_class=5",
    "federation.rounds=1",
    "local.epochs=1",
    "trainer.device=cpu",
    "trainer.progress=false",
]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["partition.clients=40", "partition.beta=0.01", "partition.min_size=0"],
            r"partition.kind=dirichlet leaves \d+ of 40 clients without samples \(client \d+, ...\); "
            r"use fewer clients, a larger partition.beta or partition.min_size",
        ),
        (["partition=iid", "partition.clients=500"], r"partition.clients=500 must lie in \[1, 200\]"),
        (
            ["model=resnet8", "dataset.synthetic.image_size=3", "dataset.augmentation=always"],
            r"3x3 images cannot be padded by 4 pixels by reflection for augmentation; set dataset.augmentation=none",
        ),
    ],
    ids=["empty clients", "more clients than samples", "tiny images augmented"],
)
def test_what_the_data_refuses_is_one_line_and_no_result(overrides, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY, *overrides, f"data_root={tmp_path}", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert re.search(message, err[0]) and err[0].startswith("error: ") and "Traceback" not in "".join(err), err
    assert not (out / "metrics.json").exists()


def test_a_dataset_of_one_class_is_refused(tmp_path, capsys):
    from PIL import Image

    for split in ("train", "test"):
        (tmp_path / "imgs" / split / "cat").mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (16, 16), (i * 40, 0, 0)).save(tmp_path / "imgs" / split / "cat" / f"{i}.png")
    out = tmp_path / "run"
    assert (
        main(
            [
                "dataset=imagefolder",
                f"dataset.path={tmp_path / 'imgs'}",
                "partition.clients=2",
                "federation.rounds=1",
                "trainer.device=cpu",
                f"data_root={tmp_path}",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "error: dataset imagefolder has 1 class(es) with training samples (1 named); a classifier needs at least two"
        in err
    )
    assert not (out / "metrics.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_cpu_index_the_machine_lacks(tmp_path, capsys):
    err = cli_error(
        capsys, ["dataset=cifar10", f"data_root={tmp_path}", "trainer.device=cpu:3", "--out", str(tmp_path / "r")]
    )
    assert "trainer.device='cpu:3': use auto, cpu, cuda or cuda:N" in err
    assert list(tmp_path.iterdir()) == []
