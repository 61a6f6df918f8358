"""Nested config mappings and their dotted keys: {"method": {"mu": 0.1}} <-> {"method.mu": 0.1}.
The one place these conversions live (overrides, JSON configs, searches, run ids)."""

from __future__ import annotations

from typing import Any


def deep_merge(base: dict, update: dict) -> dict:
    """`update` over `base`, mapping by mapping; neither is changed."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def flatten(values: dict, prefix: str = "") -> dict[str, Any]:
    """{"method": {"mu": 0.1}} -> {"method.mu": 0.1}; an empty mapping is a value."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def nested(dotted: dict[str, Any]) -> dict:
    """{"method.mu": 0.1} -> {"method": {"mu": 0.1}}."""
    out: dict = {}
    for key, value in dotted.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out
