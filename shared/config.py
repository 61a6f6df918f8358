"""Run configuration: a typed tree of dataclasses, read from YAML and `key=value` overrides.

A run is identified by its fully resolved config (every default filled in, the method's
hyperparameters included), so the same experiment requested by two tables hashes to the same
run id. Keys that change where or how fast a run executes, but not its result, are listed in
`RUNTIME_KEYS` and left out of the id.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration that cannot run; raised before any data is loaded or model trained."""


@dataclass
class SyntheticConfig:
    num_classes: int = 10
    train_per_class: int = 200
    test_per_class: int = 50
    image_size: int = 32
    channels: int = 3
    noise: float = 0.6  # pixel noise relative to the class signal; higher is harder
    domains: list[str] = field(default_factory=list)  # names of domains that shift the images (partition.kind=domains)
    writers: int = 0  # > 0: each training sample gets one of this many writers (partition.kind=writers)
    text_length: int = 0  # > 0: token sequences of this length instead of images (text models)
    vocab_size: int = 1000  # text: ids lie in [1, vocab_size), 0 pads


@dataclass
class DatasetConfig:
    # cifar10 | cifar100 | femnist | femnist_digits | tiny_imagenet | office_caltech10 | ag_news | sst5
    # | imagefolder | synthetic  (shared.data.DATASETS)
    name: str = "cifar10"
    path: str | None = None  # imagefolder: a directory or a .zip holding train/<class>/*
    augment: bool | None = None  # None: the dataset's default (random crop + flip on CIFAR)
    train_subset: int | None = None  # keep this many training samples (stratified), for small scales
    val_fraction: float = 0.0  # held out per class before partitioning (FedGKD keeps 10%)
    # Text: tokens per sequence (truncated or padded). FedGKD does not state it; 128 is what the
    # DistilBERT scripts of FedDF, whose code FedGKD's builds on, use.
    max_length: int = 128
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)


@dataclass
class PartitionConfig:
    # iid | dirichlet | classes (#K=k label skew) | writers (FEMNIST: writers permuted and grouped
    # into `clients` groups) | domains (one client per domain: Office-Caltech-10)
    kind: str = "dirichlet"
    clients: int = 10
    beta: float = 0.5  # Dirichlet concentration
    k: int = 2  # classes per client for kind=classes
    min_size: int = 10  # Dirichlet: redraw until every client holds this many samples
    # kind=domains: every domain keeps only its first share x (the smallest domain's training
    # size) samples, FedBN's equal-size domains (its fed_office.py: 0.5); None keeps them all
    domain_share: float | None = None


@dataclass
class AuxConfig:
    """The server's small balanced auxiliary set (FedCAD 32, FedSSD 64 per class)."""

    per_class: int = 0
    source: str = "train_head"  # train_head: first n of each class (overlaps clients) | holdout


@dataclass
class FederationConfig:
    rounds: int = 100
    participation: float = 1.0  # C: fraction of clients sampled per round, ceil(C * N)
    weighting: str = "samples"  # samples: FedAvg weights by data size | uniform (FedGKD's code)


@dataclass
class LocalConfig:
    epochs: int = 10
    batch_size: int = 64
    optimizer: str = "sgd"  # sgd | adam (FedGKD's DistilBERT runs; momentum does not apply)
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    grad_clip: float | None = None  # max gradient norm (FedGKD's released code clips at 10)


@dataclass
class ModelConfig:
    name: str = "fedavg_cnn"  # fedavg_cnn | resnet8 | resnet50 | alexnet_bn | distilbert | text_bow
    projection_dim: int | None = None  # MOON / FedGKD+ projection head output size (256)
    # distilbert's weights and the text datasets' tokenizer: a Hugging Face hub id or a local
    # directory holding both (save_pretrained)
    pretrained: str = "distilbert-base-uncased"


@dataclass
class EvalConfig:
    every: int = 1  # evaluate every k rounds (and always at the last round)
    local: bool = True  # also test each round's local models (the "local average accuracy")
    batch_size: int = 1000
    target_acc: list[float] = field(default_factory=list)  # % ; report the first round reaching each


@dataclass
class TrainerConfig:
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    amp: bool = False  # bf16 autocast
    channels_last: bool = False
    progress: bool = True  # progress bar when attached to a terminal
    # > 1: train up to this many clients in one vmapped step (shared/batched.py: models without
    # BatchNorm, SGD, methods that declare batched_clients); others train one after another
    clients_per_step: int = 1
    # > 1: train up to this many clients at once in threads, each on its own copy of the model,
    # with the CPU's threads shared out among them (small models keep more cores busy this
    # way than with one client's operators); methods as for clients_per_step
    client_threads: int = 1
    compile: bool = False  # torch.compile the local model (clients trained one after another)
    cuda_graphs: bool = True  # on CUDA: replay the batched step, or the compiled model, as CUDA graphs


@dataclass
class RunConfig:
    seed: int = 0
    data_root: str | None = None  # default: $FEDREPRO_DATA or ./data
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    aux: AuxConfig = field(default_factory=AuxConfig)
    federation: FederationConfig = field(default_factory=FederationConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    method: dict[str, Any] = field(default_factory=lambda: {"name": "fedavg"})
    eval: EvalConfig = field(default_factory=EvalConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


# Keys that do not change a run's result (up to floating-point nondeterminism across devices).
# The speed switches belong here too: batched clients, compilation and CUDA graphs compute the
# same samples' gradients with the same arithmetic, in another order and kernels (the batched
# trainer's test shows the weights agree to float rounding), much as another GPU would.
RUNTIME_KEYS = ("data_root", "trainer.device", "trainer.progress", "trainer.clients_per_step", "trainer.client_threads",
                "trainer.compile", "trainer.cuda_graphs")

DATA_ROOT_ENV = "FEDREPRO_DATA"


def data_root(cfg: RunConfig) -> Path:
    return Path(cfg.data_root or os.environ.get(DATA_ROOT_ENV) or "data").expanduser()


# --- building a config from dicts ---------------------------------------------------------

def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Check (and gently convert) a YAML value against a dataclass field's type."""
    if isinstance(annotation, str):
        annotation = eval(annotation, vars(typing) | globals())  # postponed annotations
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return from_dict(annotation, value, where)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, where)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if isinstance(value, str) and annotation in (int, float):
        try:  # YAML 1.1 reads `1e-3` (no dot) as a string
            value = float(value)
        except ValueError:
            pass
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def from_dict(cls: type, values: dict, where: str = "config") -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; valid keys: {sorted(known)}")
    kwargs = {name: _coerce(v, known[name].type, f"{where}.{name}") for name, v in values.items()}
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def deep_merge(base: dict, update: dict) -> dict:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_override(text: str) -> dict:
    """`a.b=3` -> {"a": {"b": 3}}; values are parsed as YAML (numbers, true, null, [1, 2])."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    value = yaml.safe_load(raw) if raw else None
    # `method=fedprox` is shorthand for `method.name=fedprox`, as is `model=resnet8`, etc.
    if key in ("method", "model", "dataset") and isinstance(value, str):
        key = f"{key}.name"
    if key == "partition" and isinstance(value, str):
        key = "partition.kind"
    nested: dict = value
    for part in reversed(key.split(".")):
        nested = {part: nested}
    return nested


def load_config(path: str | Path | None = None, overrides: list[str] | dict | None = None) -> RunConfig:
    """YAML file (optional) + overrides -> a resolved, validated RunConfig."""
    values: dict = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        values = loaded
    if isinstance(overrides, dict):
        values = deep_merge(values, overrides)
    else:
        for text in overrides or []:
            values = deep_merge(values, parse_override(text))
    if isinstance(values.get("method"), str):
        values["method"] = {"name": values["method"]}
    if "method" in values and "name" not in values["method"]:
        values["method"] = {"name": "fedavg", **values["method"]}
    return resolve(from_dict(RunConfig, values))


def resolve(cfg: RunConfig) -> RunConfig:
    """Fill in the method's hyperparameter defaults and validate everything."""
    from shared.methods import method_params  # late import: methods import this module

    cfg.method = {"name": cfg.method["name"], **method_params(cfg.method)}
    validate(cfg)
    return cfg


# --- validation ---------------------------------------------------------------------------

def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def validate(cfg: RunConfig) -> None:
    from shared.data import DATASETS, DOMAIN_DATASETS, TEXT_DATASETS, WRITER_DATASETS
    from shared.models import MODELS, TEXT_MODELS
    from shared.partition import PARTITIONS

    d, p, f, loc = cfg.dataset, cfg.partition, cfg.federation, cfg.local
    _check(d.name in DATASETS, f"dataset.name={d.name!r} is unknown; valid: {sorted(DATASETS)}")
    _check(d.name != "imagefolder" or d.path, "dataset.path is required for dataset.name=imagefolder")
    _check(0 <= d.val_fraction < 1, f"dataset.val_fraction={d.val_fraction} must lie in [0, 1)")
    _check(d.train_subset is None or d.train_subset > 0, "dataset.train_subset must be positive")
    s = d.synthetic
    _check(s.num_classes >= 2, f"dataset.synthetic.num_classes={s.num_classes} must be >= 2")
    _check(min(s.train_per_class, s.test_per_class, s.image_size, s.channels) > 0,
           "dataset.synthetic sizes must be positive")
    _check(min(s.writers, s.text_length) >= 0, "dataset.synthetic.writers and text_length must be >= 0")
    _check(len(set(s.domains)) == len(s.domains), f"dataset.synthetic.domains={s.domains} repeats a name")
    _check(sum(n > 0 for n in (len(s.domains), s.writers, s.text_length)) <= 1,
           "dataset.synthetic: set at most one of domains, writers and text_length")
    _check(not s.text_length or s.vocab_size > s.num_classes,
           f"dataset.synthetic.vocab_size={s.vocab_size} must exceed num_classes={s.num_classes} (a band of tokens per class)")
    _check(d.max_length >= 2, f"dataset.max_length={d.max_length} must be >= 2 (a sequence holds [CLS] and [SEP])")
    synthetic = d.name == "synthetic"
    is_text = d.name in TEXT_DATASETS or (synthetic and s.text_length > 0)
    models = sorted([*MODELS, *TEXT_MODELS])
    _check(cfg.model.name in models, f"model.name={cfg.model.name!r} is unknown; valid: {models}")
    _check(is_text == (cfg.model.name in TEXT_MODELS),
           f"model.name={cfg.model.name} does not fit dataset.name={d.name}: text datasets ({', '.join(TEXT_DATASETS)}, "
           f"synthetic with synthetic.text_length > 0) take the text models {sorted(TEXT_MODELS)}, image datasets the others")
    _check(bool(cfg.model.pretrained), "model.pretrained must name a hub id or a directory")
    _check(p.kind in PARTITIONS, f"partition.kind={p.kind!r} is unknown; valid: {sorted(PARTITIONS)}")
    _check(p.clients >= 1, f"partition.clients={p.clients} must be >= 1")
    _check(math.isfinite(p.beta) and p.beta > 0,
           f"partition.beta={p.beta} must be > 0 (Dirichlet concentration)")
    _check(p.k >= 1, f"partition.k={p.k} must be >= 1 (classes per client)")
    _check(p.min_size >= 0, f"partition.min_size={p.min_size} must be >= 0")
    if p.kind == "writers":
        _check(d.name in WRITER_DATASETS or (synthetic and s.writers > 0),
               f"partition.kind=writers needs writer ids, which dataset.name={d.name} has not; use "
               f"{' or '.join(WRITER_DATASETS)} (or synthetic with dataset.synthetic.writers > 0)")
    if p.kind == "domains":
        domains = len(DOMAIN_DATASETS[d.name]) if d.name in DOMAIN_DATASETS else (len(s.domains) if synthetic else 0)
        _check(domains > 0, f"partition.kind=domains needs a dataset of domains, which dataset.name={d.name} is not; "
                            f"use {' or '.join(DOMAIN_DATASETS)} (or synthetic with dataset.synthetic.domains named)")
        _check(p.clients == domains, f"partition.kind=domains makes one client of each of the {domains} domains of "
                                     f"{d.name}: partition.clients must be {domains}, not {p.clients}")
    _check(p.domain_share is None or (p.kind == "domains" and 0 < p.domain_share <= 1),
           f"partition.domain_share={p.domain_share} must lie in (0, 1], and only with partition.kind=domains")
    _check(cfg.aux.per_class >= 0, f"aux.per_class={cfg.aux.per_class} must be >= 0")
    _check(cfg.aux.source in ("train_head", "holdout"),
           f"aux.source={cfg.aux.source!r} is unknown; valid: ['holdout', 'train_head']")
    _check(f.rounds >= 1, f"federation.rounds={f.rounds} must be >= 1")
    _check(0 < f.participation <= 1, f"federation.participation={f.participation} must lie in (0, 1]")
    _check(f.weighting in ("samples", "uniform"),
           f"federation.weighting={f.weighting!r} is unknown; valid: ['samples', 'uniform']")
    _check(loc.epochs >= 1, f"local.epochs={loc.epochs} must be >= 1")
    _check(loc.batch_size >= 1, f"local.batch_size={loc.batch_size} must be >= 1")
    _check(loc.optimizer in ("sgd", "adam"), f"local.optimizer={loc.optimizer!r} is unknown; valid: ['adam', 'sgd']")
    _check(loc.optimizer == "sgd" or cfg.method["name"] not in ("fednova", "scaffold"),
           f"method {cfg.method['name']} models local SGD steps; it needs local.optimizer=sgd")
    _check(loc.lr > 0, f"local.lr={loc.lr} must be > 0")
    _check(0 <= loc.momentum < 1, f"local.momentum={loc.momentum} must lie in [0, 1)")
    _check(loc.weight_decay >= 0, f"local.weight_decay={loc.weight_decay} must be >= 0")
    _check(loc.grad_clip is None or loc.grad_clip > 0, "local.grad_clip must be > 0 or null")
    _check(cfg.model.projection_dim is None or cfg.model.projection_dim > 0,
           "model.projection_dim must be > 0 or null")
    _check(cfg.eval.every >= 1, f"eval.every={cfg.eval.every} must be >= 1")
    _check(all(0 < t <= 100 for t in cfg.eval.target_acc),
           f"eval.target_acc={cfg.eval.target_acc}: targets are accuracies in percent, in (0, 100]")
    _check(cfg.trainer.device == "auto" or cfg.trainer.device.split(":")[0] in ("cpu", "cuda", "mps"),
           f"trainer.device={cfg.trainer.device!r}: use auto, cpu, cuda or cuda:N")
    _check(cfg.trainer.clients_per_step >= 1, f"trainer.clients_per_step={cfg.trainer.clients_per_step} must be >= 1")
    _check(cfg.trainer.client_threads >= 1, f"trainer.client_threads={cfg.trainer.client_threads} must be >= 1")
    _check(cfg.trainer.client_threads == 1 or (cfg.trainer.clients_per_step == 1 and not cfg.trainer.compile),
           "trainer.client_threads > 1 goes with neither trainer.clients_per_step > 1 nor trainer.compile")


# --- identity -----------------------------------------------------------------------------

def without_unset(values: dict) -> dict:
    return {k: without_unset(v) if isinstance(v, dict) else v for k, v in values.items() if v is not None}


def identity(cfg: RunConfig) -> dict:
    """The resolved config without the keys that do not change the result, and without the
    keys left unset (None): a new optional switch, off by default, keeps every finished run."""
    values = to_dict(cfg)
    for key in RUNTIME_KEYS:
        *parents, leaf = key.split(".")
        node = values
        for part in parents:
            node = node[part]
        node.pop(leaf, None)
    return without_unset(values)


def run_id(cfg: RunConfig) -> str:
    canonical = json.dumps(identity(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
