"""JSON and YAML from another machine, read so that what a program reads is what a person reads:
a key twice is refused (a reader would take the last, a person sees the first), and YAML
holds no anchors, aliases or tags (an alias bomb expands a kilobyte exponentially; a tag
builds objects). The project's writers (json.dumps, yaml.safe_dump of plain values) write none."""

from __future__ import annotations

import json

import yaml


class StrictTextError(ValueError):
    """Text refused: a duplicate key, an anchor, an alias or a tag; the message says which."""


def no_duplicates(pairs: list[tuple]) -> dict:
    mapping = {}
    for key, value in pairs:
        if key in mapping:
            raise StrictTextError(f"the key {str(key)[:40]!r} appears twice")
        mapping[key] = value
    return mapping


def strict_json(data: bytes | str):
    """JSON (UTF-8) whose objects name each key once; ValueError (or RecursionError) else."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    return json.loads(text, object_pairs_hook=no_duplicates)


class PlainLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, refusing anchors, aliases, explicit tags and a key twice."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise StrictTextError("it holds a YAML anchor or alias")
        if getattr(event, "tag", None) not in (None, "!"):
            raise StrictTextError(f"it holds the YAML tag {str(event.tag)[:40]!r}")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(key, deep=True) for key, _ in node.value]
        if any(not isinstance(key, (str, int, float, bool, type(None))) for key in keys):
            raise StrictTextError("a YAML key is not a plain value")
        no_duplicates([(key, None) for key in keys])
        return super().construct_mapping(node, deep)


def strict_yaml(data: bytes | str):
    """YAML as yaml.safe_load reads it, without anchors, aliases, tags or a key twice;
    StrictTextError, yaml.YAMLError or ValueError (not UTF-8) else."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    return yaml.load(text, Loader=PlainLoader)  # noqa: S506 (PlainLoader is a SafeLoader)
