"""A campaign state file read as if an adversary wrote it, before anything is written.

A state comes from another machine (a GPU slot, a colleague's laptop) and may be damaged,
stale or hostile. Reading it checks, in one pass and in this order, with every refusal a
`CampaignError` of one line:

- its parts are regular files (not links, devices or FIFOs), opened without following a link;
- its stream (gzip or plain tar) expands to at most EXPANSION_FLOOR + EXPANSION_RATIO times its
  size: a decompression bomb stops there, whatever its members and headers claim;
- each member is a regular file named as a state names its files, of the kinds its prefix may
  hold (a finished run's text, or a checkpoint with its files), once, its size within its
  kind's limit and what is left of the budget before a byte of it is read;
- the manifest has its fields, each of its type (format, targets, scale, copy, members with
  sizes, an aware written_at, an optional ledger), and lists exactly the members, each with
  its SHA-256 and size.

What the runs themselves hold (their identity, rounds, accuracies) is checked by
shared/campaign/carried_runs.py; where a target resolves, by shared/campaign/state.py (it knows the tables).
"""

from __future__ import annotations

import math
import os
import re
import zlib
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
    megabytes,
    sha256,
)
from shared.runs.strict_text import strict_json, strict_yaml
from shared.runs.tar_reading import TarRefused, TarStream, decompressed, open_regular
from shared.targets.copies import IMAGE_KINDS
from shared.targets.experiments import SCALES

STATE_FORMAT = "fedrepro-campaign/1"
MANIFEST = "manifest.json"
FINISHED_FILES = RUN_FILES  # a finished run's text, as an archive of runs holds it: metrics.json last
PROGRESS_FILES = ("config.yaml", "partition.csv", "metrics.jsonl", "checkpoint.pt")
# A checkpoint's per-client state (MOON's previous models, FedCurv's Fisher terms, SCAFFOLD's
# controls) lies in files of its own that it names (shared/methods/client_state.py): without them a run
# resumed on another machine would set its checkpoint aside and start again from round 0
CLIENT_STATE_FILE = re.compile(rf"{CLIENT_STATE}/{CLIENT_STATE_NAME.pattern}")
MEMBER = re.compile(
    rf"(finished|progress)/({RUN_ID.pattern})/(config\.yaml|partition\.csv|metrics\.jsonl|metrics\.json"
    rf"|checkpoint\.pt|{CLIENT_STATE_FILE.pattern})"
)
# A target as Snakemake names it: papers/<paper>[/<name>], <paper>, <paper>_searches (shared/targets/resolve.py)
TARGET = re.compile(r"(papers/)?[A-Za-z0-9_]{1,64}(/[A-Za-z0-9_]{1,64})?")
COPY_KINDS = ("", *sorted(set(IMAGE_KINDS.values())))
REQUIRED_KEYS = {"format", "targets", "scale", "copy", "members", "written_at"}
FIRST = "first"  # the --first values, as given (shared/campaign/first_cells.py)
MAX_FIRST_VALUES, MAX_FIRST_CHARS = 8, 1000
# run ids finished elsewhere, which `train` skips; a bundle's mark; the cells trained first
OPTIONAL_KEYS = {LEDGER, BUNDLED, FIRST}
COPY_KEYS = {"dataset", "sha256", "kind", "path"}
# What a state may expand to: checkpoints barely compress and a run's text some 5 to 20 times,
# while gzip reaches 1000 times on a crafted stream
EXPANSION_FLOOR = 64 * 2**20
EXPANSION_RATIO = 100
# A checkpoint holds the global model and a method's server state (SCAFFOLD's controls,
# FedAvgM's momentum: a model each); a per-client state file a client's (MOON's previous model,
# FedCurv's two Fisher terms); each with a margin for plain values
CHECKPOINT_MODELS, CLIENT_STATE_MODELS, MODEL_MARGIN = 4, 3, 16 * 2**20


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
    if not match:
        return "is not a campaign state's file"
    kind, _, file = match.groups()
    allowed = FINISHED_FILES if kind == "finished" else PROGRESS_FILES
    if file not in allowed and not (kind == "progress" and CLIENT_STATE_FILE.fullmatch(file)):
        return f"is no file a {kind} run holds"
    return None


def read_checked(path: Path, parts: list[Path]) -> tuple[dict, dict[str, bytes]]:
    """The manifest and members of the state in `parts` (the whole file, or its parts), each
    checked as the module's docstring says."""
    files = []
    try:
        for part in parts:
            files.append(open_regular(part))
        size = sum(os.fstat(f.fileno()).st_size for f in files)
        limit = EXPANSION_FLOOR + EXPANSION_RATIO * size
        refusal = (
            f"{path}: expands to more than {megabytes(limit)} (a damaged or hostile state: a real one "
            f"holds at most {EXPANSION_RATIO} times its size)"
        )
        manifest, members = read_members(path, decompressed(files, limit, refusal), limit)
    except (EOFError, OSError, zlib.error) as exc:  # zlib: a damaged stream
        raise CampaignError(
            f"cannot read state file {path}: {' '.join(str(exc).split()) or type(exc).__name__}"
        ) from None
    except TarRefused as exc:
        raise CampaignError(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}") from None
    finally:
        for f in files:
            f.close()
    check_manifest(path, manifest)
    check_listed(path, manifest, members)
    return manifest, members


def read_members(path: Path, stream, budget: int) -> tuple[object, dict[str, bytes]]:
    """Every member of the tar stream, its header checked before its data is read (a checkpoint
    against its run's model: `model_limit`), and the manifest (parsed)."""
    members, manifest, left, tar = {}, None, budget, TarStream(stream)
    while (member := tar.next()) is not None:
        why = member_problem(member.name) or (None if member.isfile() else f"is a {member.kind}, not a regular file")
        if why is None and (member.name in members or (member.name == MANIFEST and manifest is not None)):
            why = "appears twice"
        limit = min(member_limit(member.name), left)
        if why is None and is_model_state(member.name):
            limit, why = model_limit(member.name, members, limit)
        if why is None and member.size > limit:
            why = f"holds {megabytes(member.size)}, over the limit of {megabytes(limit)}"
        if why:
            raise CampaignError(f"{path}: member {member.name[:120]!r} {why}")
        left -= member.size
        content = b"".join(tar.chunks())  # at most the header's size, checked above
        if member.name == MANIFEST:
            manifest = parse_json(path, content)
        else:
            members[member.name] = content
    return manifest, members


def is_model_state(name: str) -> bool:
    file = name.split("/", 2)[-1]
    return file == "checkpoint.pt" or bool(CLIENT_STATE_FILE.fullmatch(file))


def model_limit(name: str, members: dict[str, bytes], limit: int) -> tuple[int, str | None]:
    """The most bytes a checkpoint (or per-client state file) of this run may hold, and why it
    may hold none: what its config's model takes, times the copies a method keeps
    (CHECKPOINT_MODELS, CLIENT_STATE_MODELS), with its history and a margin; `limit` where the
    model's size is known only once its data loads (text models, image folders). A state
    written here holds a run's config.yaml and metrics.jsonl before its checkpoint: without them
    (or with a config.yaml that is none) MODEL_MARGIN, and the run is refused by its checks."""
    kind, rid = name.split("/", 2)[:2]
    config, history = members.get(f"{kind}/{rid}/config.yaml"), members.get(f"{kind}/{rid}/metrics.jsonl")
    shapes = model_shapes(config) if config is not None and history is not None else False
    if shapes is False:  # the run is refused by its checks (carried_runs.py); its bytes read are bounded
        return min(limit, MODEL_MARGIN), None
    if shapes is None:
        return limit, None
    model = 4 * sum(math.prod(shape) for shape in shapes.values())  # float32, as the trainer saves
    copies = CHECKPOINT_MODELS if name.endswith("checkpoint.pt") else CLIENT_STATE_MODELS
    return min(limit, copies * model + 2 * len(history) + MODEL_MARGIN), None


def model_shapes(config: bytes):
    """name -> shape of the tensors of the config's model; None where its data decides them;
    False where config.yaml is not a run's config."""
    from shared.models.registry import known_state_shapes

    cfg = run_config(config)
    return False if cfg is None else known_state_shapes(cfg)


def run_config(config: bytes):
    """The RunConfig a config.yaml holds (its run id aside); None where it holds none."""
    from shared.config.schema import ConfigError, RunConfig, from_dict

    try:
        values = strict_yaml(config)
        return from_dict(RunConfig, {k: v for k, v in values.items() if k != "run_id"})
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError, yaml.YAMLError, ConfigError):
        return None


def parse_json(path: Path, content: bytes):
    try:
        return strict_json(content)
    except (ValueError, RecursionError) as exc:  # ValueError: not JSON, not UTF-8; RecursionError: nested too deep
        raise CampaignError(f"{path}: its {MANIFEST} is not JSON ({type(exc).__name__})") from None


def check_manifest(path: Path, manifest) -> None:
    """The manifest's fields, each of its type, before any of them is used."""
    if not isinstance(manifest, dict) or manifest.get("format") != STATE_FORMAT:
        raise CampaignError(f"{path} is not a {STATE_FORMAT} state file (no manifest of that format)")
    problem = (
        keys_problem(manifest, REQUIRED_KEYS, OPTIONAL_KEYS)
        or targets_problem(manifest["targets"])
        or scale_problem(manifest["scale"])
        or copy_problem(manifest["copy"])
        or entries_problem(manifest["members"])
        or written_at_problem(manifest["written_at"])
        or ledger_problem(manifest.get(LEDGER, []))
        or (None if manifest.get(BUNDLED, True) is True else f"{BUNDLED} is not true")
        or (first_problem(manifest[FIRST]) if FIRST in manifest else None)
    )
    if problem:
        raise CampaignError(f"{path}: its manifest {problem}")


def first_problem(values) -> str | None:
    """Why a state manifest's `first` is not a short list of short strings; None where it is
    (the names themselves are checked against the targets when the state is used)."""
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_FIRST_VALUES:
        return f"{FIRST} is not a list of 1 to {MAX_FIRST_VALUES} values"
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_FIRST_CHARS and v.isprintable() for v in values):
        return f"{FIRST} holds a value that is not printable text of at most {MAX_FIRST_CHARS} characters"
    return None


def keys_problem(mapping: dict, required: set[str], optional: set[str] = frozenset()) -> str | None:
    missing, unknown = sorted(required - set(mapping)), sorted(set(mapping) - required - optional)
    if missing:
        return f"lacks {', '.join(missing)}"
    return f"holds unknown keys {', '.join(repr(k[:40]) for k in unknown[:3])}" if unknown else None


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


def entries_problem(entries) -> str | None:
    if not isinstance(entries, list):
        return "members is not a list"
    for entry in entries:
        if not isinstance(entry, dict) or keys_problem(entry, {"path", "sha256", "size"}):
            return "lists a member that is not a mapping of path, sha256 and size"
        if not isinstance(entry["path"], str) or member_problem(entry["path"]) or entry["path"] == MANIFEST:
            return f"lists {str(entry['path'])[:120]!r}, which is no state's member"
        if not isinstance(entry["sha256"], str) or not is_sha256(entry["sha256"]):
            return f"lists {entry['path']!r} without a SHA-256"
        if type(entry["size"]) is not int or not 0 <= entry["size"] <= member_limit(entry["path"]):
            return f"lists {entry['path']!r} without a size within its limit"
    paths = [entry["path"] for entry in entries]
    return "lists a member twice" if len(set(paths)) < len(paths) else None


def written_at_problem(written_at) -> str | None:
    """An ISO time with its offset, as `write_state` writes it (UTC): two states' times compare."""
    try:
        when = datetime.fromisoformat(written_at) if isinstance(written_at, str) and len(written_at) < 64 else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None or when.utcoffset() is None:
        return "has no written_at with a time zone (ISO 8601, as written: 2025-01-01T12:00:00+00:00)"
    return None


def check_listed(path: Path, manifest: dict, members: dict[str, bytes]) -> None:
    """The manifest lists exactly the members, each with its SHA-256 and size."""
    listed = {m["path"]: (m["sha256"], m["size"]) for m in manifest["members"]}
    if set(listed) != set(members):
        odd = sorted(set(listed) ^ set(members))
        raise CampaignError(f"{path}: {odd[0]!r} is in the manifest or the archive but not both ({len(odd)} such)")
    for name, content in members.items():
        if (sha256(content), len(content)) != listed[name]:
            raise CampaignError(f"{path}: member {name!r} fails its checksum")
    runs = {}
    for name in members:
        kind, rid, _ = MEMBER.fullmatch(name).groups()
        runs.setdefault(rid, set()).add(kind)
    both = sorted(rid for rid, kinds in runs.items() if len(kinds) > 1)
    if both:
        raise CampaignError(f"{path}: run {both[0]} is both finished and in progress")


def written_at(manifest: dict) -> datetime:
    return datetime.fromisoformat(manifest["written_at"])


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
