"""Loading a run config: a YAML file and `key=value` overrides -> a resolved, checked RunConfig.

Resolving fills in the method's hyperparameter defaults, so that the config names everything
that decides the result (its run id). Checking happens here, before any data is loaded or
model built: each registry checks its own section (the dataset catalog the dataset, the model
registry the model, the partitions the partition, the method registry the method) and
shared/config/reading.py the sections that belong to the loop itself. Reading the file and the
overrides is that module's too; this one is what needs the registries, all on floors below.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from shared.config.dotted import deep_merge
from shared.config.reading import read_values, refuse_idle_keys, validate_loop, with_method_name
from shared.config.schema import RunConfig, from_dict, to_dict
from shared.data.catalog import validate_dataset
from shared.data.partition import validate_partition
from shared.methods.registry import method_class, read_params, validate_method
from shared.models.registry import validate_model


def load_config(path: str | Path | None = None, overrides: list[str] | dict | None = None) -> RunConfig:
    """YAML file (optional) + overrides -> a resolved, validated RunConfig."""
    values = read_values(path, overrides)
    cfg = resolve(from_dict(RunConfig, with_method_name(values)))
    refuse_idle_keys(values, cfg)
    return cfg


def resolve(cfg: RunConfig) -> RunConfig:
    """Fill in the method's hyperparameter defaults and what they imply, and validate everything."""
    name, params = cfg.method["name"], read_params(cfg.method)
    cfg.method = {"name": name, **dataclasses.asdict(params)}
    if implied := method_class(name).implied_config(params):
        cfg = from_dict(RunConfig, deep_merge(to_dict(cfg), implied))
    validate(cfg)
    return cfg


def validate(cfg: RunConfig) -> None:
    validate_dataset(cfg)
    validate_model(cfg)
    validate_partition(cfg)
    validate_loop(cfg)
    validate_method(cfg)
