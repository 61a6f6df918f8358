"""Method registry: config name -> class. Entries are import paths, so that listing or
validating methods imports no paper module."""
from __future__ import annotations

import dataclasses
import importlib

from shared.config import ConfigError, from_dict

METHODS: dict[str, str] = {
    "fedavg": "shared.fedavg:FedAvg",
    "fedprox": "shared.baselines.fedprox:FedProx",
    "fedcurv": "shared.baselines.fedcurv:FedCurv",
    "moon": "shared.baselines.moon:MOON",
    "fedntd": "shared.baselines.fedntd:FedNTD",
    "fedlsd": "shared.baselines.fedlsd:FedLSD",
    "fednova": "shared.baselines.fednova:FedNova",
    "fedavgm": "shared.baselines.fedavgm:FedAvgM",
    "fedproto": "shared.baselines.fedproto:FedProto",
    "feddistill": "shared.baselines.feddistill:FedDistillPlus",
    "fedgen": "shared.baselines.fedgen:FedGen",
    "scaffold": "shared.baselines.scaffold:SCAFFOLD",
    # the four papers' own methods
    "fedcad": "papers.fedcad.fedcad:FedCAD",
    "fedssd": "papers.fedssd.fedssd:FedSSD",
    "fedcsd": "papers.fedcsd.fedcsd:FedCSD",
    "fedgkd": "papers.fedgkd.fedgkd:FedGKD",
}


def method_class(name: str) -> type:
    if name not in METHODS:
        raise ConfigError(f"method.name={name!r} is unknown; valid: {sorted(METHODS)}")
    module, cls = METHODS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def method_params(method_cfg: dict) -> dict:
    """The method's hyperparameters with defaults filled in; unknown keys are an error."""
    values = {k: v for k, v in method_cfg.items() if k != "name"}
    params = from_dict(method_class(method_cfg["name"]).Params, values, where=f"method ({method_cfg['name']})")
    return dataclasses.asdict(params)


def build_method(cfg, federation):
    cls = method_class(cfg.method["name"])
    params = from_dict(cls.Params, {k: v for k, v in cfg.method.items() if k != "name"})
    return cls(params, cfg, federation)
