"""Reading a run config: a YAML file and `key=value` overrides -> a resolved, checked RunConfig.

Resolving fills in the method's hyperparameter defaults, so that the config names everything
that decides the result (its run id). Checking happens here, before any data is loaded or
model built: each registry checks its own section (the dataset catalog the dataset, the model
registry the model, the partitions the partition, the method registry the method) and this
module the sections that belong to the loop itself.
"""
from __future__ import annotations

import math
from pathlib import Path

import yaml

from shared.catalog import validate_dataset
from shared.config import ConfigError, RunConfig, check, from_dict
from shared.dotted import deep_merge, nested
from shared.methods import method_params, validate_method
from shared.models import validate_model
from shared.partition import validate_partition

# `method=fedprox` is shorthand for `method.name=fedprox`, and so on
SHORTHANDS = {"method": "method.name", "model": "model.name", "dataset": "dataset.name", "partition": "partition.kind"}


def parse_override(text: str) -> dict:
    """`a.b=3` -> {"a": {"b": 3}}; values are parsed as YAML (numbers, true, null, [1, 2])."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({exc.problem})") from None
    if key in SHORTHANDS and isinstance(value, str):
        key = SHORTHANDS[key]
    return nested({key: value})


def read_yaml(path: str | Path) -> dict:
    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where} ({getattr(exc, 'problem', exc)})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return loaded


def load_config(path: str | Path | None = None, overrides: list[str] | dict | None = None) -> RunConfig:
    """YAML file (optional) + overrides -> a resolved, validated RunConfig."""
    values: dict = read_yaml(path) if path is not None else {}
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
    cfg.method = {"name": cfg.method["name"], **method_params(cfg.method)}
    validate(cfg)
    return cfg


def validate(cfg: RunConfig) -> None:
    validate_dataset(cfg)
    validate_model(cfg)
    validate_partition(cfg)
    validate_loop(cfg)
    validate_method(cfg)


def validate_loop(cfg: RunConfig) -> None:
    """The sections of the federated loop itself: seed, aux, federation, local, eval, trainer."""
    f, loc, ev, t = cfg.federation, cfg.local, cfg.eval, cfg.trainer
    check(cfg.seed >= 0, f"seed={cfg.seed} must be >= 0")
    check(cfg.aux.per_class >= 0, f"aux.per_class={cfg.aux.per_class} must be >= 0")
    check(f.rounds >= 1, f"federation.rounds={f.rounds} must be >= 1")
    check(0 < f.participation <= 1, f"federation.participation={f.participation} must lie in (0, 1]")
    check(loc.epochs >= 1, f"local.epochs={loc.epochs} must be >= 1")
    check(loc.batch_size >= 1, f"local.batch_size={loc.batch_size} must be >= 1")
    check(math.isfinite(loc.lr) and loc.lr > 0, f"local.lr={loc.lr} must be a finite number > 0")
    check(0 <= loc.momentum < 1, f"local.momentum={loc.momentum} must lie in [0, 1)")
    check(math.isfinite(loc.weight_decay) and loc.weight_decay >= 0,
           f"local.weight_decay={loc.weight_decay} must be a finite number >= 0")
    check(loc.grad_clip is None or (math.isfinite(loc.grad_clip) and loc.grad_clip > 0),
           f"local.grad_clip={loc.grad_clip} must be a finite number > 0, or null")
    check(ev.every >= 1, f"eval.every={ev.every} must be >= 1")
    check(ev.batch_size >= 1, f"eval.batch_size={ev.batch_size} must be >= 1")
    check(all(0 < a <= 100 for a in ev.target_acc),
           f"eval.target_acc={ev.target_acc}: targets are accuracies in percent, in (0, 100]")
    check(t.device == "auto" or t.device.split(":")[0] in ("cpu", "cuda", "mps"),
           f"trainer.device={t.device!r}: use auto, cpu, cuda or cuda:N")
    check(t.clients_per_step >= 1, f"trainer.clients_per_step={t.clients_per_step} must be >= 1")
    check(t.client_threads >= 1, f"trainer.client_threads={t.client_threads} must be >= 1")
    check(t.client_threads == 1 or (t.clients_per_step == 1 and not t.compile),
           "trainer.client_threads > 1 goes with neither trainer.clients_per_step > 1 nor trainer.compile")

