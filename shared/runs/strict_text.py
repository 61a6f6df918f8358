"""JSON and YAML from another machine, read so that what a program reads is what a person reads:
a key twice is refused (a reader would take the last, a person sees the first), and YAML
holds no anchors, aliases or tags (an alias bomb expands a kilobyte exponentially; a tag
builds objects). The project's writers (json.dumps, yaml.safe_dump of plain values) write none.
Nor do they nest deeper than a few levels: values nested deeper than MAX_DEPTH are refused, so
that no checker walking them recurses past Python's limit. Where a loaded checkpoint should hold
such text's values (a config's identity, a history), `is_plain` says that it does."""

from __future__ import annotations

import json

import yaml

MAX_DEPTH = 32  # lists and mappings within each other: a run's files nest 4 deep, a checkpoint's state 6


class StrictTextError(ValueError):
    """Text refused: a duplicate key, an anchor, an alias, a tag or nesting past MAX_DEPTH; the
    message says which."""


def nesting_problem(value, limit: int = MAX_DEPTH) -> str | None:
    """Why `value`'s lists, tuples and mappings nest deeper than `limit` (None: they do not);
    walked without recursion, so that any depth is measured."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, (list, tuple)):
            continue
        if depth > limit:
            return f"its values nest more than {limit} deep"
        stack.extend((child, depth + 1) for child in item)
    return None


def each_once(value):
    """Every object within `value` (itself included) once, however many times a loaded file
    names it: a pickle names an object it holds already in two bytes. Lists, tuples and
    mappings are looked into (a mapping's values), without recursion."""
    seen, stack = set(), [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        if isinstance(item, (dict, list, tuple)):
            stack.extend(item.values() if isinstance(item, dict) else item)


def is_plain(value) -> bool:
    """Whether `value` holds what JSON writes only (mappings by strings, lists and tuples,
    strings, numbers, booleans, None): no tensor, whose comparison raises or answers with a
    tensor."""
    return all(
        all(isinstance(key, str) for key in item)
        if isinstance(item, dict)
        else item is None or isinstance(item, (list, tuple, str, int, float, bool))
        for item in each_once(value)
    )


def shallow(value):
    """`value`, once it nests at most MAX_DEPTH deep; StrictTextError else."""
    problem = nesting_problem(value)
    if problem:
        raise StrictTextError(problem)
    return value


def no_duplicates(pairs: list[tuple]) -> dict:
    mapping = {}
    for key, value in pairs:
        if key in mapping:
            raise StrictTextError(f"the key {str(key)[:40]!r} appears twice")
        mapping[key] = value
    return mapping


def strict_json(data: bytes | str):
    """JSON (UTF-8) whose objects name each key once, nested at most MAX_DEPTH deep; ValueError
    (or RecursionError, deeper than the parser goes) else."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    return shallow(json.loads(text, object_pairs_hook=no_duplicates))


# libyaml's parser where PyYAML has it (its wheels do): the same events, three to four times faster
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


MAX_NUMBER_CHARS = 64  # a float's repr takes at most 24; a sexagesimal 1:59:59:... costs time squared


class PlainLoader(SafeLoader):
    """yaml.safe_load's loader, refusing a key twice and a number longer than MAX_NUMBER_CHARS
    (`plain_events` refuses the rest first)."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(key, deep=True) for key, _ in node.value]
        if any(not isinstance(key, (str, int, float, bool, type(None))) for key in keys):
            raise StrictTextError("a YAML key is not a plain value")
        no_duplicates([(key, None) for key in keys])
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        return super().construct_yaml_int(short_number(node))

    def construct_yaml_float(self, node):
        return super().construct_yaml_float(short_number(node))


def short_number(node):
    if len(node.value) > MAX_NUMBER_CHARS:
        raise StrictTextError(f"it holds a number of more than {MAX_NUMBER_CHARS} characters")
    return node


# the safe loader's table names its own constructors of numbers: these take their place
PlainLoader.add_constructor("tag:yaml.org,2002:int", PlainLoader.construct_yaml_int)
PlainLoader.add_constructor("tag:yaml.org,2002:float", PlainLoader.construct_yaml_float)


def plain_events(text: str) -> None:
    """Refuse, from the parser's events and before any node is built, an anchor, an alias, an
    explicit tag and lists or mappings nested deeper than MAX_DEPTH."""
    depth = 0
    for event in yaml.parse(text, Loader=SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise StrictTextError("it holds a YAML anchor or alias")
        if getattr(event, "tag", None) not in (None, "!"):
            raise StrictTextError(f"it holds the YAML tag {str(event.tag)[:40]!r}")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise StrictTextError(f"its values nest more than {MAX_DEPTH} deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def strict_yaml(data: bytes | str):
    """YAML as yaml.safe_load reads it, without anchors, aliases, tags or a key twice, nested at
    most MAX_DEPTH deep; StrictTextError, yaml.YAMLError or ValueError (not UTF-8) else."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    plain_events(text)
    return yaml.load(text, Loader=PlainLoader)  # noqa: S506 (PlainLoader is a SafeLoader)
