"""A campaign state file read as if an adversary wrote it, before anything is written.

A state comes from another machine (a GPU session, a colleague's laptop) and may be damaged,
stale or hostile. It is a transfer file of kind "campaign" (shared/runs/transfer.py, the one
reader, checks it: its parts regular files, its stream's expansion bounded, each member's
header before its data, the manifest's common keys, exactly its members with their SHA-256
and size; a large checkpoint streamed to disk while hashed). This module says what a state
holds (`CAMPAIGN`), with every refusal a `CampaignError` of one line:

- its members are named as a state names its files, of the kinds its prefix may hold (a
  finished run's text, or a checkpoint with its files), each within its kind's limit: a
  checkpoint or a per-client state file within what its run's model needs (`model_limit`);
- its own keys, each of its type: targets, scale, copy, an optional ledger, bundle mark and
  first cells.

What the runs themselves hold (their identity, rounds, accuracies) is checked by
shared/campaign/carried_runs.py; where a target resolves, by shared/campaign/state.py (it knows the tables).
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import yaml

from shared.campaign.ledger import BUNDLED, LEDGER, RUN_ID, ledger_problem
from shared.data.catalog import DATASETS, is_sha256
from shared.runs.files import (
    CLIENT_STATE,
    CLIENT_STATE_NAME,
    MAX_CONFIG_BYTES,
    MAX_MEMBER_BYTES,
    MAX_MODEL_BYTES,
    MAX_SMALL_BYTES,
    RUN_FILES,
)
from shared.runs.strict_text import strict_yaml
from shared.runs.transfer import Kind, TransferError, keys_problem, read_transfer
from shared.targets.copies import IMAGE_KINDS
from shared.targets.scales import SCALES

MANIFEST = "manifest.json"
FINISHED_FILES = RUN_FILES  # a finished run's text, as an archive of runs holds it: metrics.json last
PROGRESS_FILES = ("config.yaml", "partition.csv", "metrics.jsonl", "checkpoint.pt")
# A checkpoint's per-client state (MOON's previous models, FedCurv's Fisher terms, SCAFFOLD's
# controls) lies in files of its own that it names (shared/runs/tensor_files.py): without them a run
# resumed on another machine would set its checkpoint aside and start again from round 0
CLIENT_STATE_FILE = re.compile(rf"{CLIENT_STATE}/{CLIENT_STATE_NAME.pattern}")
MEMBER = re.compile(
    rf"(finished|progress)/({RUN_ID.pattern})/(config\.yaml|partition\.csv|metrics\.jsonl|metrics\.json"
    rf"|checkpoint\.pt|{CLIENT_STATE_FILE.pattern})"
)
# A member of an archive of runs (shared/archive.py, which imports this module), named to say what
# such a file is when it is given as a state
ARCHIVE_MEMBER = re.compile(rf"runs/{RUN_ID.pattern}/[A-Za-z0-9_.]{{1,40}}")
# A target as Snakemake names it: papers/<paper>[/<name>], <paper>, <paper>_searches (shared/targets/resolve.py)
TARGET = re.compile(r"(papers/)?[A-Za-z0-9_]{1,64}(/[A-Za-z0-9_]{1,64})?")
COPY_KINDS = ("", *sorted(set(IMAGE_KINDS.values())))
OWN_KEYS = {"targets", "scale", "copy"}
REQUIRED_KEYS = {"format", "kind", "members", "written_at", *OWN_KEYS}  # of a state this version writes
FIRST = "first"  # the --first values, as given (shared/campaign/first_cells.py)
MAX_FIRST_VALUES, MAX_FIRST_CHARS = 8, 1000
# run ids finished elsewhere, which `train` skips; a bundle's mark; the cells trained first
OPTIONAL_KEYS = {LEDGER, BUNDLED, FIRST}
COPY_KEYS = {"dataset", "sha256", "kind", "path"}
# A checkpoint holds the global model and a method's server state (SCAFFOLD's controls,
# FedAvgM's momentum: a model each) beside its round's plain values (its history, counted
# twice over, and MODEL_MARGIN); a per-client state file a client's (MOON's previous model,
# FedCurv's two Fisher terms); model.pt the model alone
CHECKPOINT_MODELS, CLIENT_STATE_MODELS, MODEL_MARGIN = 4, 3, 16 * 2**20
# config.yaml parsed to size model files, per read (`run_model`): 1 MiB over 2 kB a run
MAX_SIZING_YAML_BYTES, SIZING_YAML_PER_RUN = 2**20, 2**11
MAX_SIZED_MODELS = 64  # distinct models one read builds to size its members: a state's runs have a few


class CampaignError(Exception):
    """Refused input; the message is one line."""


def member_limit(name: str) -> int:
    """The most bytes a member of this name may hold: a checkpoint or a per-client state file
    as much as a model; a history or partition as archives allow them; the rest (the manifest,
    config.yaml, metrics.json) what is read whole to check a run."""
    file = name.split("/", 2)[-1]
    if file == "checkpoint.pt" or CLIENT_STATE_FILE.fullmatch(file):
        return MAX_MODEL_BYTES
    if file == "config.yaml":
        return MAX_CONFIG_BYTES
    return MAX_MEMBER_BYTES if file in ("metrics.jsonl", "partition.csv") else MAX_SMALL_BYTES


def member_problem(name: str) -> str | None:
    """Why `name` is no state's member (None: it is one): a finished run holds its text files, a
    run in progress its checkpoint, history, config, partition and per-client state files."""
    match = MEMBER.fullmatch(name)
    if name == MANIFEST:
        return None
    if not match and ARCHIVE_MEMBER.fullmatch(name):
        return (
            "is not a campaign state's file but an archive's: the file looks like an archive of runs, "
            "which python -m shared.archive unpack FILE reads"
        )
    if not match:
        return "is not a campaign state's file"
    kind, _, file = match.groups()
    allowed = FINISHED_FILES if kind == "finished" else PROGRESS_FILES
    if file not in allowed and not (kind == "progress" and CLIENT_STATE_FILE.fullmatch(file)):
        return f"is no file a {kind} run holds"
    return None


def read_checked(path: Path, parts: list[Path], stage: Path | None = None) -> tuple[dict, dict]:
    """The manifest and members of the state in `parts` (the whole file, or its parts), each
    checked as the module's docstring says; a large checkpoint staged beside `stage`
    (shared/runs/transfer.py `Staged`)."""
    try:
        manifest, members = read_transfer(path, CAMPAIGN, parts, stage)
    except TransferError as exc:
        raise CampaignError(str(exc)) from None
    runs = {}
    for name in members:
        kind, rid, _ = MEMBER.fullmatch(name).groups()
        runs.setdefault(rid, set()).add(kind)
    both = sorted(rid for rid, kinds in runs.items() if len(kinds) > 1)
    if both:
        raise CampaignError(f"{path}: run {both[0]} is both finished and in progress")
    return manifest, members


def is_model_state(name: str) -> bool:
    file = name.split("/", 2)[-1]
    return file == "checkpoint.pt" or bool(CLIENT_STATE_FILE.fullmatch(file))


def header_limit(name: str, members: dict, cache: dict) -> int:
    """The most a member may hold, given the members before it: a checkpoint (or per-client
    state file) what its run's model needs (`model_limit`, worked out once a run in `cache`)."""
    match = MEMBER.fullmatch(name)
    if match is None or not is_model_state(name):  # no state's file (refused by its name) or no model's
        return member_limit(name)
    kind, rid, _ = match.groups()
    copies = CHECKPOINT_MODELS if name.endswith("checkpoint.pt") else CLIENT_STATE_MODELS
    return model_limit(members, f"{kind}/{rid}", copies, member_limit(name), cache)


def model_limit(members: dict, folder: str, copies: int, limit: int, cache: dict | None = None) -> int:
    """The most bytes a model's file of the run in `folder` may hold: what its config's model
    takes (shared/models/registry.py `state_bytes`), times the copies a file keeps
    (CHECKPOINT_MODELS, CLIENT_STATE_MODELS; model.pt 1), with its history twice over and
    MODEL_MARGIN; `limit` where the model's size is known only once its data loads (the
    reasons are `state_bytes`'s). A run's writer puts its config.yaml, partition.csv and
    metrics.jsonl before its model's files: without them (or with a config.yaml that is none)
    MODEL_MARGIN, and the run is refused by its checks. The run's model is worked out once for
    the files it has (`cache`: one read's), not at each of its headers."""
    names = tuple(f"{folder}/{file}" for file in ("config.yaml", "metrics.jsonl", "partition.csv"))
    key = (folder, *(name in members for name in names))
    cache = {} if cache is None else cache
    if key not in cache:
        cache[key] = run_model(*(members.get(name) for name in names), folder, cache)
    known, model = cache[key]
    if not known:  # the run is refused by its checks (carried_runs.py); its bytes read are bounded
        return min(limit, MODEL_MARGIN)
    if model is None:
        return limit
    return min(limit, copies * model + 2 * len(members[names[1]]) + MODEL_MARGIN)


def run_model(config, history, partition, folder: str, cache: dict) -> tuple[bool, int | None]:
    """Whether a run's config.yaml holds a config (with its history there), and the bytes its
    model takes (None: known once its data loads). Each run's config.yaml is parsed once, and a
    read parses at most SIZING_YAML_PER_RUN a run, over MAX_SIZING_YAML_BYTES in all (a real
    config takes some 1.2 kB, so an archive of thousands of runs parses each): past that, a run
    counts as one whose config holds none, so that made-up runs with large configs cost
    seconds, not hours."""
    if not isinstance(config, bytes) or not isinstance(history, bytes):
        return False, None
    if ("config", folder) not in cache:
        runs, parsed = cache.get("runs", 0) + 1, cache.get("yaml bytes", 0) + len(config)
        cache["runs"], cache["yaml bytes"] = runs, parsed
        allowed = parsed <= MAX_SIZING_YAML_BYTES + runs * SIZING_YAML_PER_RUN
        cache["config", folder] = run_config(config) if allowed else None
    cfg = cache["config", folder]
    return (False, None) if cfg is None else sized_model(cfg, partition_classes(partition), cache)


def sized_model(cfg, classes: int | None, cache: dict) -> tuple[bool, int | None]:
    """`run_model`'s answer for a config: its model's bytes, worked out once a model (the
    config's model and dataset, and the classes its partition counts) in one read, and for at
    most MAX_SIZED_MODELS models (each built on the meta device, a ResNet-50 in tens of
    milliseconds): past them None (the blanket limit). A model that cannot be built (a
    projection of 2^62 features) is a config that holds none: its run is refused by its checks."""
    import json

    from shared.config.schema import to_dict
    from shared.models.registry import state_bytes

    values = to_dict(cfg)
    key = ("model", json.dumps([values["model"], values["dataset"], classes], sort_keys=True))
    if key not in cache:
        if cache.get("models", 0) >= MAX_SIZED_MODELS:
            return True, None
        cache["models"] = cache.get("models", 0) + 1
        try:
            cache[key] = True, state_bytes(cfg, classes)
        except (RuntimeError, ValueError, OverflowError, MemoryError):
            cache[key] = False, None
    return cache[key]


def partition_classes(partition) -> int | None:
    """The classes a run's partition.csv counts (its header: client, then one column a class)."""
    if not isinstance(partition, bytes):
        return None
    return partition[: partition.find(b"\n")].count(b",") or None


def run_config(config: bytes):
    """The RunConfig a config.yaml holds (its run id aside); None where it holds none."""
    from shared.config.schema import ConfigError, RunConfig, from_dict

    try:
        values = strict_yaml(config)
        return from_dict(RunConfig, {k: v for k, v in values.items() if k != "run_id"})
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError, yaml.YAMLError, ConfigError):
        return None


def own_keys_problem(manifest: dict) -> str | None:
    """A state's own keys, each of its type, before any of them is used."""
    return (
        targets_problem(manifest["targets"])
        or scale_problem(manifest["scale"])
        or copy_problem(manifest["copy"])
        or ledger_problem(manifest.get(LEDGER, []))
        or (None if manifest.get(BUNDLED, True) is True else f"{BUNDLED} is not true")
        or (first_problem(manifest[FIRST]) if FIRST in manifest else None)
    )


def first_problem(values) -> str | None:
    """Why a state manifest's `first` is not a short list of short strings; None where it is
    (the names themselves are checked against the targets when the state is used)."""
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_FIRST_VALUES:
        return f"{FIRST} is not a list of 1 to {MAX_FIRST_VALUES} values"
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_FIRST_CHARS and v.isprintable() for v in values):
        return f"{FIRST} holds a value that is not printable text of at most {MAX_FIRST_CHARS} characters"
    return None


def targets_problem(targets) -> str | None:
    if not isinstance(targets, list) or not targets or len(targets) > 1000:
        return "names no list of targets"
    bad = [t for t in targets if not isinstance(t, str) or not TARGET.fullmatch(t)]
    if bad:
        return f"names {str(bad[0])[:80]!r}, which is no target (papers/<paper>/<name>, <paper>)"
    return "names a target twice" if len(set(targets)) < len(targets) else None


def scale_problem(scale) -> str | None:
    return (
        None
        if isinstance(scale, str) and scale in SCALES
        else f"names scale {str(scale)[:40]!r}; valid: {sorted(SCALES)}"
    )


def copy_problem(copy) -> str | None:
    """None (the official data), or a copy: a dataset that can have copies, a SHA-256, a known kind."""
    if copy is None:
        return None
    if not isinstance(copy, dict) or keys_problem(copy, COPY_KEYS):
        return f"copy is not a mapping of {', '.join(sorted(COPY_KEYS))}"
    dataset, digest, kind = copy["dataset"], copy["sha256"], copy["kind"]
    if not isinstance(dataset, str) or dataset not in DATASETS or not DATASETS[dataset].copyable:
        return f"copy names dataset {str(dataset)[:40]!r}, which has no copies"
    if not isinstance(digest, str) or not is_sha256(digest):
        return "copy's sha256 is not 64 lowercase hex digits"
    if kind not in COPY_KINDS or copy["path"] is not None:
        return f"copy's kind is not one of {list(COPY_KINDS)} (or it names a path)"
    return None


def written_at(manifest: dict) -> datetime:
    return datetime.fromisoformat(manifest["written_at"])


CAMPAIGN = Kind(
    name="campaign",
    what="a campaign state",
    reader="python -m shared.campaign import (and train, status, bundle)",
    noun="a campaign state's file",
    member_problem=member_problem,
    max_size=member_limit,
    member_limit=header_limit,
    keys=(frozenset(OWN_KEYS), frozenset(OPTIONAL_KEYS)),
    keys_problem=own_keys_problem,
    binary=is_model_state,
)


def check_inside(path: Path, base: Path) -> Path:
    """`path`, once it is known to lie under `base` with no `..` and no symbolic link on the way
    (a link there would write or delete elsewhere); else refused in one line."""
    try:
        relative = Path(path).relative_to(base)
    except ValueError:
        raise CampaignError(f"{path} does not lie under {base}; refused") from None
    if ".." in relative.parts:
        raise CampaignError(f"{path} climbs out of {base} ('..'); refused")
    step = Path(base)
    for part in relative.parts:
        step = step / part
        if step.is_symlink():
            raise CampaignError(f"{step} is a symbolic link; nothing is written or removed through one")
    return Path(path)
