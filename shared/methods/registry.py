"""Method registry: config name -> class. Entries are import paths, so that listing or
validating methods imports no method module. The baselines are listed here; each paper's own
methods are registered from the floor that finds the papers (shared/targets/papers.py, as
shared.targets is imported), which this floor may not import."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from shared.config.schema import ConfigError, from_dict

BASELINES: dict[str, str] = {
    "fedavg": "shared.methods.fedavg:FedAvg",
    "fedprox": "shared.methods.baselines.fedprox:FedProx",
    "fedcurv": "shared.methods.baselines.fedcurv:FedCurv",
    "moon": "shared.methods.baselines.moon:MOON",
    "fedntd": "shared.methods.baselines.fedntd:FedNTD",
    "fedlsd": "shared.methods.baselines.fedlsd:FedLSD",
    "fednova": "shared.methods.baselines.fednova:FedNova",
    "fedavgm": "shared.methods.baselines.fedavgm:FedAvgM",
    "fedproto": "shared.methods.baselines.fedproto:FedProto",
    "feddistill": "shared.methods.baselines.feddistill:FedDistillPlus",
    "fedgen": "shared.methods.baselines.fedgen:FedGen",
    "scaffold": "shared.methods.baselines.scaffold:SCAFFOLD",
}

# Functions giving more methods (config name -> "module:Class"), read whenever the registry is,
# so that registering one imports no paper: the papers' own (shared/targets/__init__.py)
REGISTERED_SOURCES: list[Callable[[], dict[str, str]]] = []


def register_methods(source: Callable[[], dict[str, str]]) -> None:
    """Add `source`'s methods to the registry (once, however often it is registered)."""
    if source not in REGISTERED_SOURCES:
        REGISTERED_SOURCES.append(source)


def registry() -> dict[str, str]:
    """Every method: the baselines and the registered ones (the papers' own)."""
    methods = dict(BASELINES)
    for source in REGISTERED_SOURCES:
        methods.update(source())
    return methods


def method_names() -> list[str]:
    return sorted(registry())


def method_class(name: str) -> type:
    methods = registry()
    if name not in methods:
        raise ConfigError(
            f"method.name={name!r} is unknown; valid: {sorted(methods)} (registered in BASELINES of "
            f"shared/methods/registry.py, or in a paper's METHODS, read from papers/<paper>/ once it "
            f"holds tables.py: docs/extending.md)"
        )
    module, cls = methods[name].split(":")
    return getattr(importlib.import_module(module), cls)


def read_params(method_cfg: dict):
    """The method's Params from the config's method section: every key known and in its range."""
    name = method_cfg["name"]
    params = method_class(name).Params
    try:
        return from_dict(params, {k: v for k, v in method_cfg.items() if k != "name"}, "method")
    except ConfigError as exc:
        raise ConfigError(f"{exc} (method.name={name})") from None


def build_method(cfg, federation):
    return method_class(cfg.method["name"])(read_params(cfg.method), cfg, federation)


def validate_method(cfg) -> None:
    """What a method needs of the rest of the config (its own keys are checked as they are read)."""
    cls = method_class(cfg.method["name"])
    if cls.requires_local_sgd and cfg.local.optimizer != "sgd":
        raise ConfigError(f"method {cfg.method['name']} models local SGD steps; it needs local.optimizer=sgd")
    cls.check_config(read_params(cfg.method), cfg)
