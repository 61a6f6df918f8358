"""Reading a run config: a YAML file and `key=value` overrides -> the values they give, and the
checks that need nothing but the config itself: the loop's sections and the keys another setting
makes idle. Resolving the values against the registries (the method's defaults, each registry's
check of its own section) is shared/targets/configs.py's, a floor above the registries.
"""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from shared.config.dotted import deep_merge, flatten, nested
from shared.config.schema import ConfigError, RunConfig, check, excerpt, to_dict

# `method=fedprox` is shorthand for `method.name=fedprox`, and so on
SHORTHANDS = {"method": "method.name", "model": "model.name", "dataset": "dataset.name", "partition": "partition.kind"}


def parse_override(text: str) -> dict:
    """`a.b=3` -> {"a": {"b": 3}}; values are parsed as YAML (numbers, true, null, [1, 2])."""
    if "=" not in text:
        raise ConfigError(f"override {excerpt(text)} is not of the form key=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw else None
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"override {excerpt(text)}: the value is not valid YAML ({getattr(exc, 'problem', exc)})"
        ) from None
    if key in SHORTHANDS and isinstance(value, str):
        key = SHORTHANDS[key]
    return nested({key: value})


def read_yaml(path: str | Path) -> dict:
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); save it as UTF-8"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where} ({getattr(exc, 'problem', exc)})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return loaded


def read_values(path: str | Path | None = None, overrides: list[str] | dict | None = None) -> dict:
    """YAML file (optional) + overrides (key=value texts, or a nested mapping) -> the values given."""
    values: dict = read_yaml(path) if path is not None else {}
    if isinstance(overrides, dict):
        return deep_merge(values, overrides)
    for text in overrides or []:
        values = deep_merge(values, parse_override(text))
    return values


class IdleUnless(NamedTuple):
    """`key` has an effect only where `governing` (as resolved: defaults and what a method
    implies count) satisfies `applies`, described in words by `said`."""

    key: str
    governing: str
    applies: Callable[[Any], bool]
    said: str


# The keys a user may set that another setting makes meaningless: each read in one place only
# (shared/data/partition.py, shared/training/clients.py, shared/data/federation.py), which these mirror.
IDLE_KEYS = (
    IdleUnless(
        "partition.beta",
        "partition.kind",
        lambda kind: kind in ("dirichlet", "dirichlet_balanced"),
        "partition.kind=dirichlet or dirichlet_balanced",
    ),
    IdleUnless("partition.min_size", "partition.kind", lambda kind: kind == "dirichlet", "partition.kind=dirichlet"),
    IdleUnless("partition.k", "partition.kind", lambda kind: kind == "classes", "partition.kind=classes"),
    IdleUnless("partition.writers", "partition.kind", lambda kind: kind == "writers", "partition.kind=writers"),
    IdleUnless("local.momentum", "local.optimizer", lambda optimizer: optimizer == "sgd", "local.optimizer=sgd"),
    IdleUnless("aux.source", "aux.per_class", lambda per_class: per_class > 0, "aux.per_class > 0"),
)


@functools.cache
def idle_key_defaults() -> types.MappingProxyType:
    """The defaults of IDLE_KEYS, built once (every table cell's config is checked against
    them); read-only, so that no caller can change what the next one reads."""
    defaults = flatten(to_dict(RunConfig()))
    return types.MappingProxyType({rule.key: defaults[rule.key] for rule in IDLE_KEYS})


def refuse_idle_keys(given: dict, cfg: RunConfig) -> None:
    """A key given (in a config file, --json, key=value or a table) with a value of its own that
    another setting makes meaningless: one line naming both, so that nobody believes a run used
    a value it ignored. A key given at its default value changes nothing and passes: a resolved
    config read back (a run's config.yaml, a table's shared protocol) names every key."""
    resolved, defaults = flatten(to_dict(cfg)), idle_key_defaults()
    given_keys = set(flatten(given))
    for rule in IDLE_KEYS:
        value, governing = resolved[rule.key], resolved[rule.governing]
        check(
            rule.key not in given_keys or value == defaults[rule.key] or rule.applies(governing),
            f"{rule.key}={value} has no effect with {rule.governing}={governing} "
            f"(it applies with {rule.said}); remove it",
        )


def with_method_name(values: dict) -> dict:
    """`method: fedprox` as {"name": "fedprox"}, and a method section without a name as FedAvg's;
    a section that is neither a name nor a mapping, or a name that is not a string, is refused."""
    method = values.get("method", {"name": "fedavg"})
    if isinstance(method, str):
        method = {"name": method}
    if not isinstance(method, dict):
        raise ConfigError(f"method: expected a method name or a mapping, got {excerpt(method)}")
    method = {"name": "fedavg", **method}
    check(isinstance(method["name"], str), f"method.name: expected a string, got {excerpt(method['name'])}")
    return {**values, "method": method}


# torch's device strings, less the indices a CPU or an MPS machine lacks (it has one of each)
DEVICE = re.compile(r"auto|cpu(:0)?|mps(:0)?|cuda(:[0-9]{1,4})?")


def validate_loop(cfg: RunConfig) -> None:
    """What the loop's sections need beyond their fields' own ranges (checked as they are read)."""
    t = cfg.trainer
    check(DEVICE.fullmatch(t.device) is not None, f"trainer.device={excerpt(t.device)}: use auto, cpu, cuda or cuda:N")
    check(
        t.client_threads == 1 or (t.clients_per_step == 1 and not t.compile),
        "trainer.client_threads > 1 goes with neither trainer.clients_per_step > 1 nor trainer.compile",
    )
