"""Paper-scale results that accumulate over short, offline GPU slots.

    python -m shared.campaign train TARGET... --minutes M --state FILE [--scale S] [--copy NAME=FILE|SHA256]
                                              [--device auto|cuda|cpu] [--data-root DIR] [--clients-per-step N]
                                              [--part-mib M] [--max-parts N] [--set KEY=VALUE ...] [--timing FILE]
    python -m shared.campaign status TARGET... [--state FILE] [--scale S] [--copy NAME=FILE|SHA256]
    python -m shared.campaign import FILE
    python -m shared.campaign bundle TARGET... -o DIR [--state FILE] [--copy NAME=FILE] [--wheels-from DIR | --no-wheels]
                                              [--max-upload-mib M]

`train` trains the targets' missing runs in this process (no Snakemake, no network): seed 0
of every cell first, so that a whole table exists with one seed as early as possible, then the
further seeds. A run stops between rounds, its checkpoint kept, when another round would pass
the budget of M minutes; FILE then holds the finished runs (config, metrics, per-round
curves; no models) and the checkpoints of the runs in progress (with the per-client state files
they name), every member checksummed. A
FILE larger than --part-mib is written as FILE.part-00, FILE.part-01, ... (a slot returns
files of at most 16 MiB); a kill at any step of a save leaves the earlier state or the new one
readable. A slot returns at most --max-parts (8) files, so the finished runs are always kept,
and the checkpoints only while the state stays within that many parts, the runs with most
rounds done first; a checkpoint left out is named in a one-line note (the run starts again),
and a unit that could not finish before the budget ends and whose checkpoints could not come
back is not started. Given an existing FILE, `train` continues from it, skipping the runs its
ledger names (finished elsewhere: shared/campaign/ledger.py). A unit takes as many of its runs as can
finish in the time left, its round estimated from measured rounds (shared/campaign/unit_sizing.py).
`--set` takes runtime keys only (a session's fallbacks: trainer.cuda_graphs=false,
trainer.deterministic=false); `--timing FILE` writes where each unit's seconds went
(shared/campaign/session_timing.py).

`bundle` writes, where DIR holds no state yet (or one whose runs are all here), a state of the
ledger (the runs finished here or shipped) and the checkpoints of runs in progress that fit
--max-upload-mib beside the data and wheels (no limit by default), and refuses in one line
where the data and wheels alone pass it.

`import` verifies FILE, adds its finished runs to the shipped runs (results/shipped/runs/,
tracked: the workflow takes a shipped run as finished) without overwriting one, puts the
checkpoints into results/runs/ (where `train` and the workflow continue them), and rebuilds
the targets' tables from the shipped runs into results/shipped/tables/, marked partial while
cells or seeds are missing.

`--copy cifar10=FILE` trains on a copy of the official data (dataset.copy: the file's SHA-256,
so its runs have their own ids), and labels every table built from it.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import Counter
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path

from shared.runs.files import RunFilesError, add_member, holds_result, records_result, run_members, sha256
from shared.runs.locking import claim_runs, move_aside_non_result
from shared.targets.resolve import TargetError, target_cells, target_parts
from shared.campaign.carried_runs import trusted
from shared.data.catalog import DataError, copy_label, image_shape, is_sha256, num_classes
from shared.config.schema import ConfigError, RunConfig, identity, run_id
from shared.config.dotted import deep_merge
from shared.campaign.ledger import BUNDLED, LEDGER, LedgerError, advanced, read_ledger, state_parts, upload_budget
from shared.runs.files import CLIENT_STATE, aside_path, move_aside_checkpoint, write_atomically, write_folder_atomically
# the state file's form and its checks: shared/campaign/state_reading.py (CampaignError: a refusal in one line)
from shared.campaign.state_reading import (CLIENT_STATE_FILE, FINISHED_FILES, IMAGE_KINDS, MANIFEST, MEMBER, PROGRESS_FILES,
                                  STATE_FORMAT, CampaignError, check_inside, read_checked, written_at)

RESULTS = Path("results")  # everything a state's contents decide lies under it (`check_inside`)
RUNS_DIR = RESULTS / "runs"
SHIPPED = RESULTS / "shipped"
PART_MIB = 15  # a slot returns files of at most 16 MiB
SLOT_RETURN_FILES = 8  # and at most 8 of them: a state in more parts would not come back whole
SLOT_STATE = "state.tar.gz"  # the state file's name in a bundle, where scripts/campaign-slot.sh reads it
STATE_SECONDS = 30  # kept free at the end of a budget to write the state file
TAR_END = 12 * 1024  # at most what a state file's end adds: tar's two blocks and a record's padding, gzip's trailer
# What a GPU machine with torch, pandas, seaborn, matplotlib and pytest (and so NumPy and
# Pillow) may lack of what `train` imports; Snakemake it never imports
OFFLINE_WHEELS = ("pyyaml>=6",)


@dataclasses.dataclass(frozen=True)
class Copy:
    """A copy of the official data the runs train on (dataset.copy)."""

    dataset: str
    sha256: str
    kind: str = ""  # "JPEG", from the files it holds
    path: Path | None = None

    @property
    def label(self) -> str:
        return copy_label(self.dataset, self.sha256, self.kind)

    @property
    def slug(self) -> str:
        return f"{self.dataset}-{self.kind.lower() + '-' if self.kind else ''}copy-{self.sha256[:7]}"


# --- which runs, in which order -------------------------------------------------------------

def parse_copy(text: str | None) -> Copy | None:
    """--copy NAME=FILE (hashed here) or NAME=SHA256."""
    if text is None:
        return None
    name, sep, value = text.partition("=")
    if not sep:
        raise CampaignError(f"--copy {text!r}: expected NAME=FILE or NAME=SHA256, e.g. cifar10=cifar10-jpeg.zip")
    if is_sha256(value):
        return Copy(name, value)
    path = Path(value).expanduser()
    if not path.is_file():
        raise CampaignError(f"--copy {text!r}: {path} is not a file")
    from shared.data.datasets import file_digest

    return Copy(name, file_digest(path, "sha256"), copy_kind(path), path)


def located_copy(text: str | None, data_root: str | Path) -> Copy | None:
    """NAME=FILE, or NAME=SHA256 found under the data root's copies/ by its content, with its
    kind read from the file: the workflow (`--config copy=...`) names its folder and labels
    its outputs as the shipped tables of that copy are named and labelled."""
    copy = parse_copy(text)
    if copy is None or copy.path is not None:
        return copy
    from shared.data.datasets import find_copy

    path = find_copy(Path(data_root), copy.sha256)
    return dataclasses.replace(copy, kind=copy_kind(path), path=path)


def copy_kind(path: Path) -> str:
    """"JPEG" for a zip of mostly .jpg files, "PNG" for .png; "" otherwise."""
    if path.suffix != ".zip":
        return ""
    suffixes = Counter(Path(n).suffix.lower() for n in zipfile.ZipFile(path).namelist())
    common = suffixes.most_common(1)[0][0] if suffixes else ""
    return IMAGE_KINDS.get(common, "")


def on_copy(cfg: RunConfig, copy: Copy | None) -> RunConfig | None:
    """The config trained on the copy; None for a run on another dataset (no data for it)."""
    from shared.targets.configs import load_config

    if copy is None:
        return cfg
    if cfg.dataset.name != copy.dataset:
        return None
    return load_config(None, deep_merge(identity(cfg), {"dataset": {"copy": copy.sha256}}))


def campaign_runs(targets: list[str], scale: str, copy: Copy | None) -> tuple[dict[str, RunConfig], int]:
    """run id -> config of every run the targets need, seed 0 of every cell first (the rows a
    table trains first before the others), then seed 1, ...; and how many runs need data other
    than the copy (left out)."""
    cells = [cell for target in targets for cell in target_cells(target, scale)]
    runs, skipped = {}, set()
    for cell in sorted(cells, key=lambda c: (c.seed, not c.trained_first)):  # stable: table order within
        cfg = on_copy(cell.config, copy)
        if cfg is None:
            skipped.add(cell.run_id)
        else:
            runs.setdefault(run_id(cfg), cfg)
    return runs, len(skipped)


def with_runtime(cfg: RunConfig, device: str, data_root: str | None, clients_per_step: int = 1,
                 settings: dict | None = None) -> RunConfig:
    """The config with this machine's device, data root and clients per step, and the runtime
    `settings` of --set (none changes the run id; clients_per_step > 1 asks for the batched
    step, and so for groups, on a CPU too)."""
    from shared.targets.configs import load_config

    runtime = deep_merge({"trainer": {"device": device, "clients_per_step": clients_per_step},
                          **({"data_root": data_root} if data_root else {})}, settings or {})
    resolved = load_config(None, deep_merge(identity(cfg), runtime))
    if run_id(resolved) != run_id(cfg):  # a runtime key that is part of the id would retrain finished runs
        raise CampaignError(f"--device {device}, --data-root {data_root} or --clients-per-step {clients_per_step} "
                            f"changes run {run_id(cfg)}'s id")
    return resolved


# --- the state file ---------------------------------------------------------------------------

MAX_PARTS = 100  # part-00 to part-99


def part_paths(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.part-[0-9][0-9]"))


def state_files(path: Path) -> list[Path]:
    """The state file and its parts that are there (both forms, where a save was cut short)."""
    return [path] * path.is_file() + part_paths(path)


def state_exists(path: Path | None) -> bool:
    return path is not None and bool(state_files(path))


def read_state(path: Path) -> tuple[dict, dict[str, bytes]]:
    """The manifest and members of a state file (or its parts), every checksum verified. A
    file and parts side by side (a save cut short, or states carried from two machines): the
    valid one written later is read, the other moved aside (a one-line note names both); both
    holding the same state (a save cut short at its last step), the parts, the file removed."""
    forms = [form for form in ([path] if os.path.lexists(path) else [], part_paths(path)) if form]  # a link, a FIFO: refused
    if not forms:
        raise CampaignError(f"state file {path} does not exist (nor {path.name}.part-00, ...)")
    if len(forms) == 1:
        return read_form(path, forms[0])
    return newer_form(path, forms)


def newer_form(path: Path, forms: list[list[Path]]) -> tuple[dict, dict[str, bytes]]:
    """Of the whole file and its parts, the valid state written later; the other is moved aside.
    Of two copies of one state (the same manifest), the parts: the whole file is removed."""
    states, errors = [], []
    for form in forms:
        try:
            manifest, members = read_form(path, form)
            states.append((written_at(manifest), form, manifest, members))  # checked: with a time zone, they compare
        except CampaignError as exc:
            errors.append(exc)
    if not states:
        raise errors[0]
    if len(states) == 2 and states[0][0] == states[1][0]:
        if states[0][2] != states[1][2]:
            raise CampaignError(f"{path} and {path.name}.part-00, ... are both there, written at the same time; "
                                f"keep one of them")
        path.unlink()  # the same state (`write_state` cut short before it removed the whole file): the parts go back
        return states[1][2], states[1][3]
    kept = max(states, key=lambda state: state[0])
    other = next(form for form in forms if form is not kept[1])
    asides = [part.rename(aside_path(part, "older")) for part in other]
    name = lambda form: "the whole file" if form == [path] else f"{len(form)} parts"
    print(f"note: {path}: read {name(kept[1])} (written {kept[2].get('written_at')}); set aside {name(other)} "
          f"as {asides[0].name}{', ...' if len(asides) > 1 else ''} (older or damaged)", file=sys.stderr)
    return kept[2], kept[3]


def read_form(path: Path, parts: list[Path]) -> tuple[dict, dict[str, bytes]]:
    """The verified manifest and members of the state in `parts` (the whole file, or its parts):
    read as shared/campaign/state_reading.py checks it, its targets resolved in this checkout at its
    scale and on its data, before anything is written."""
    manifest, members = read_checked(path, parts)
    try:
        manifest_runs(manifest)
    except (TargetError, ConfigError, DataError) as exc:
        raise CampaignError(f"{path}: {' '.join(str(exc).split())}") from None
    return manifest, members


def manifest_copy(manifest: dict) -> Copy | None:
    return Copy(**{**manifest["copy"], "path": None}) if manifest.get("copy") else None


def manifest_runs(manifest: dict) -> dict[str, RunConfig]:
    """run id -> config of every run the state's targets need at its scale, on its data."""
    return expected_runs(tuple(manifest["targets"]), manifest["scale"], manifest_copy(manifest))


def trusted_members(manifest: dict, members: dict[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """The state's runs that pass shared/campaign/carried_runs.py's checks, and a line for each that does not."""
    copy = manifest_copy(manifest)
    where = f"at scale {manifest['scale']} on {copy.label if copy else 'the official data'}"
    return trusted(members, manifest_runs(manifest), where)


def state_members(run_ids: list[str], runs_dir: Path, ledger: frozenset[str] = frozenset(),
                  carried_rounds: dict[str, int] | None = None) -> list[tuple[str, bytes, float]]:
    """The finished runs' text files and the checkpoints of runs in progress (with their
    per-client state files), from runs_dir. A metrics.json that records a failure is no
    finished run (the workflow trains it again). A run the ledger names is finished elsewhere:
    none of its files; `carried_rounds` (a state carried in with a ledger): a checkpoint only
    where this session advanced it (shared/campaign/ledger.py)."""
    files = []
    for rid in run_ids:
        run_dir = runs_dir / rid
        if rid in ledger:
            continue
        if holds_result(run_dir):
            files += run_members(run_dir, f"finished/{rid}", FINISHED_FILES)
        elif (run_dir / "checkpoint.pt").is_file() and (
                carried_rounds is None or advanced(rid, rounds_done(run_dir), carried_rounds)):
            files += run_members(run_dir, f"progress/{rid}", PROGRESS_FILES + client_state_files(run_dir))
    return files


def client_state_files(run_dir: Path) -> tuple[str, ...]:
    """The run's per-client state files (those its last checkpoint names, and after a kill
    perhaps a newer round's, which the next checkpoint prunes), relative to the run directory."""
    folder = run_dir / CLIENT_STATE
    names = sorted(f"{CLIENT_STATE}/{p.name}" for p in folder.iterdir()) if folder.is_dir() else []
    return tuple(name for name in names if CLIENT_STATE_FILE.fullmatch(name))


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """A run in progress whose checkpoint the state file leaves out: the slot could not return it."""

    run_id: str
    size: int  # its files' bytes
    rounds: int


@dataclasses.dataclass(frozen=True)
class Written:
    """What `write_state` wrote: the file's bytes, of them those up to and with the finished
    runs, the files it takes (1: whole) and the checkpoints left out to keep to the budget."""

    size: int
    finished_size: int
    files: int
    left_out: tuple[LeftOut, ...] = ()


def part_bytes(part_mib: float) -> int:
    return int(part_mib * 2**20)


def member_bound(sizes: list[int]) -> int:
    """At most the bytes that members of these sizes add to a state file: each its data, tar's
    header (and a pax header), padding, and deflate's worst case on data it cannot compress
    (zlib's deflateBound: 0.03%; checkpoints barely compress) and a flush."""
    return sum(size + size // 1024 + 3072 for size in sizes)


def carried_finished_size(path: Path, members: dict[str, bytes]) -> int:
    """At least the bytes the finished runs take in the state file read: its size less the
    most its checkpoints and manifest (a member's entry, the targets) can take."""
    progress = [len(data) for name, data in members.items() if name.startswith("progress/")]
    manifest = sum(len(name) + 160 for name in members) + 64 * 1024
    size = sum(file.stat().st_size for file in state_files(path))
    return max(size - member_bound(progress) - member_bound([manifest]) - TAR_END, 0)


def write_state(path: Path, files: list[tuple[str, bytes, float]], about: dict, part_mib: float = PART_MIB,
                max_parts: int | None = None) -> Written:
    """The state file: finished runs, then the checkpoints that keep it within `max_parts` parts
    (None: all), split into parts of part_mib when larger. Every step leaves a readable state,
    the old one or the new (`read_state`): the new whole file replaces `path` (beside any old
    parts it is the later state), the old parts go (a torn set never reads), the new parts are
    written, each atomically (a torn set beside the whole file never reads), then the whole file
    goes (until then both hold the same state, and the parts are read)."""
    limit = part_bytes(part_mib)
    whole = path.with_name(f".{os.getpid()}.{path.name}")  # hidden; ends as `path` does, so compressed alike
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        finished_size, left_out = write_members(whole, files, about, max_parts * limit if max_parts else None)
        size = whole.stat().st_size
        os.replace(whole, path)
    finally:
        whole.unlink(missing_ok=True)
    if size > MAX_PARTS * limit:  # the new state stays whole: readable here, though no slot returns it
        raise CampaignError(f"state {path}: {size / 2**20:.1f} MiB would take more than {MAX_PARTS} parts of "
                            f"{part_mib:g} MiB; it is written whole")
    for old in part_paths(path):  # part-00 first: what is left of them starts mid-stream and never reads
        old.unlink()
    if size > limit:
        data = path.read_bytes()
        for i, start in enumerate(range(0, size, limit)):
            write_atomically(path.with_name(f"{path.name}.part-{i:02d}"),
                             lambda tmp, chunk=data[start:start + limit]: tmp.write_bytes(chunk))
        path.unlink()
    return Written(size, finished_size, -(-size // limit), tuple(left_out))


def write_members(out: Path, files: list[tuple[str, bytes, float]], about: dict,
                  budget: int | None) -> tuple[int, list[LeftOut]]:
    """The state's archive at `out`: the finished runs, then each run in progress, the most
    advanced first (most rounds), while the file stays within `budget` bytes (None: no limit;
    where the finished runs alone pass it, all: the state cannot come back whole anyway). The
    compressed stream is flushed after each run, so the file's length so far is exact, and a
    run's files add at most `member_bound`. Returns the bytes up to and with the finished
    runs, and the runs left out."""
    entries = {name: {"path": name, "sha256": sha256(data), "size": len(data)} for name, data, _ in files}
    manifest = lambda kept: {"format": STATE_FORMAT, **about, "members": [entries[name] for name, _, _ in kept],
                             "written_at": datetime.now(timezone.utc).isoformat(timespec="microseconds")}
    reserve = member_bound([len(json.dumps(manifest(files), indent=1))]) + TAR_END  # the manifest of all: no shorter
    finished = [file for file in files if file[0].startswith("finished/")]
    kept, left_out = list(finished), []
    with open(out, "wb") as raw, (gzip.GzipFile(fileobj=raw, mode="wb") if out.name.endswith((".gz", ".tgz"))
                                  else contextlib.nullcontext(raw)) as stream:
        with tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data, mtime in finished:
                add_member(tar, name, data, mtime)
            stream.flush()
            finished_size = raw.tell()
            everything = budget is None or finished_size + reserve > budget
            for run in progress_by_rounds(files):
                size = sum(len(data) for _, data, _ in run)
                if not everything and raw.tell() + member_bound([len(data) for _, data, _ in run]) + reserve > budget:
                    left_out.append(LeftOut(MEMBER.fullmatch(run[0][0]).group(2), size, progress_rounds(run)))
                    continue
                for name, data, mtime in run:
                    add_member(tar, name, data, mtime)
                kept += run
                stream.flush()
            add_member(tar, MANIFEST, json.dumps(manifest(kept), indent=1).encode(), time.time())
    return finished_size, left_out


def progress_by_rounds(files: list[tuple[str, bytes, float]]) -> list[list[tuple[str, bytes, float]]]:
    """The files of each run in progress, the runs with most rounds done first (ties: in order)."""
    runs: dict[str, list] = {}
    for file in files:
        kind, rid, _ = MEMBER.fullmatch(file[0]).groups()
        if kind == "progress":
            runs.setdefault(rid, []).append(file)
    return sorted(runs.values(), key=progress_rounds, reverse=True)


def progress_rounds(run: list[tuple[str, bytes, float]]) -> int:
    """A run in progress's rounds done, as `rounds_done` counts them: its history's lines."""
    return sum(history_rounds(data) for name, data, _ in run if name.endswith("/metrics.jsonl"))


def state_runs(members: dict[str, bytes],
               kinds: tuple[str, ...] = ("finished", "progress")) -> dict[tuple[str, str], dict[str, bytes]]:
    """(kind, run id) -> file -> bytes of a state's runs of those kinds. A "finished" run whose
    metrics.json records no result (a state written before failures were told apart) is left
    out: it is neither shipped nor restored as finished."""
    runs: dict[tuple[str, str], dict[str, bytes]] = {}
    for name, content in members.items():
        kind, rid, file = MEMBER.fullmatch(name).groups()
        if kind in kinds:
            runs.setdefault((kind, rid), {})[file] = content
    return {key: files for key, files in sorted(runs.items())
            if key[0] != "finished" or records_result(files.get("metrics.json", b""))}


def restore(members: dict[str, bytes], runs_dir: Path, shipped_runs: Path) -> dict[str, list[str]]:
    """Put a state's runs into runs_dir, each holding its lock (`claim_runs`: refused in one line,
    before anything is written, while another process trains one): a finished run unless one
    is finished there or shipped, a checkpoint unless the run is finished or holds at least as
    many rounds there."""
    def kept(kind: str, rid: str, files: dict[str, bytes]) -> bool:
        return is_finished(rid, runs_dir, shipped_runs) or (
            kind == "progress" and rounds_done(runs_dir / rid) >= history_rounds(files.get("metrics.jsonl", b"")))

    runs = state_runs(members)
    done = {"finished": [], "progress": [], "kept": [rid for (kind, rid), files in runs.items()
                                                      if kept(kind, rid, files)]}
    with ExitStack() as locks:
        claim_runs(runs_dir, sorted({rid for (kind, rid) in runs if rid not in done["kept"]}), locks)
        for (kind, rid), files in runs.items():
            if rid in done["kept"]:
                continue
            if kept(kind, rid, files):  # as the lock holds it: another process finished it meanwhile
                done["kept"].append(rid)
                continue
            if kind == "finished":
                put_finished(runs_dir / rid, files)
            else:
                put_progress(runs_dir / rid, files)
            done[kind].append(rid)
    return done


def put_progress(run_dir: Path, files: dict[str, bytes]) -> None:
    """A checkpoint and its files into run_dir, in the order a round's save writes them: the
    per-client state files first, then the checkpoint that names them, metrics.jsonl (which
    `rounds_done` counts) last, so that a kill in between never counts rounds its checkpoint
    lacks; then the per-client files no checkpoint names (a kill's) go. A checkpoint there
    (of fewer rounds: `restore`) is moved aside with its history and per-client state, never
    overwritten."""
    aside = move_aside_checkpoint(run_dir)
    if aside:
        print(f"note: {run_dir}'s checkpoint of fewer rounds is kept as {aside[0].name}", file=sys.stderr)
    last = ("checkpoint.pt", "metrics.jsonl")
    for file in sorted(files, key=lambda name: last.index(name) + 1 if name in last else 0):
        write_atomically(run_dir / file, lambda tmp, c=files[file]: tmp.write_bytes(c))
    for stale in set(client_state_files(run_dir)) - set(files):
        (run_dir / stale).unlink()


def rounds_done(run_dir: Path) -> int:
    """Rounds of a run in progress (its checkpoint's history is metrics.jsonl); -1: no checkpoint."""
    if not (run_dir / "checkpoint.pt").is_file() or not (run_dir / "metrics.jsonl").is_file():
        return -1
    return history_rounds((run_dir / "metrics.jsonl").read_bytes())


def history_rounds(metrics_jsonl: bytes) -> int:
    """The rounds a run's history (metrics.jsonl, a line per round) records."""
    return metrics_jsonl.count(b"\n")


# --- train --------------------------------------------------------------------------------------

def is_finished(rid: str, runs_dir: Path, shipped_runs: Path) -> bool:
    """A result here or shipped; a recorded failure is trained again, as the workflow does."""
    return holds_result(runs_dir / rid) or holds_result(shipped_runs / rid)


GROUP_LIMIT = 15  # the largest group the campaign trains in one step: a table row's 5 settings x 3 seeds


def training_units(runs: dict[str, RunConfig], args) -> list[list[str]]:
    """Run ids in the order they train, in units that train together: the groups of
    shared/targets/run_groups.py, each split into its first seed's runs and the further seeds', every
    group's first seed before any further seed (a table has one seed of every cell soonest).
    A group that cannot share a batched step on this device (`group_reason`: on a CPU, where
    one after another is faster) is units of one run."""
    from shared.training.group_training import group_reason
    from shared.targets.run_groups import form_groups

    groups = form_groups(runs, GROUP_LIMIT)
    first = min((cfg.seed for cfg in runs.values()), default=0)
    ordered = [[r for r in g if runs[r].seed == first] for g in groups] + [[r for r in g if runs[r].seed != first] for g in groups]
    units = []
    for unit in filter(None, ordered):
        together = len(unit) > 1 and group_reason([
            with_runtime(runs[r], args.device, args.data_root, args.clients_per_step, getattr(args, "settings", None))
            for r in unit]) is None
        units += [unit] if together else [[r] for r in unit]
    return units


def train_unit(rids: list[str], runs: dict[str, RunConfig], args, deadline: float, runs_dir: Path) -> list[str]:
    """One run, or a group in one batched step (shared/training/group_training.py); a group whose method
    or model cannot share a step (dropout, another optimizer than SGD, a method without the
    capabilities) trains one run after another, as the workflow's jobs do, a run that raises
    (said in one line) not keeping the others from training. Returns the runs that raised."""
    from shared.training import trainer
    from shared.training.group_training import GroupRefused, run_group

    cfgs = [with_runtime(runs[rid], args.device, args.data_root, args.clients_per_step, getattr(args, "settings", None))
            for rid in rids]
    if len(rids) > 1:
        try:
            run_group(cfgs, [runs_dir / rid for rid in rids], deadline=deadline)
            return []
        except GroupRefused as why:  # raised before any training
            print(f"note: {len(rids)} runs train one after another: {why}", file=sys.stderr, flush=True)
    raised = []
    for cfg, rid in zip(cfgs, rids):
        try:
            trainer.run(cfg, runs_dir / rid, deadline=deadline)
        except (trainer.OutOfTime, ConfigError, DataError):  # out of time, or this machine cannot run it
            raise
        except Exception as exc:  # one line, then the next run: a slot is too short to stop at one failure
            print(f"run {rid} raised {type(exc).__name__}: {exc}", file=sys.stderr)
            raised.append(rid)
    return raised


def train_runs(runs: dict[str, RunConfig], args, deadline: float, runs_dir: Path,
               finished_size: int = 0) -> dict[str, int]:
    """Train the unfinished runs in order (`training_units`, each sized to the time left:
    `sized_units`) until the deadline; counts of what happened, by run. finished_size: at least
    the bytes the finished runs take in the state file (`not_worth_starting` refuses a unit
    only where sure), then as each save measures them."""
    from shared.training import trainer
    counts, timing = Counter(), getattr(args, "timing_record", None)
    for rids, estimate in sized_units(runs, args, deadline, runs_dir):
        if time.time() + estimate.seconds > deadline:
            counts["not started (no time for a round)"] += len(rids)
            break
        refused = not_worth_starting(rids, runs, args, deadline, estimate.seconds, runs_dir, finished_size)
        if refused:
            counts["not started (could not finish, and its checkpoint cannot come back)"] += len(rids)
            print(refused, file=sys.stderr)
            continue
        cfg = runs[rids[0]]
        with timing.unit(rids, cfg.method["name"], cfg.model.name) if timing else contextlib.nullcontext() as unit:
            try:
                raised = train_unit(rids, runs, args, deadline, runs_dir)
                counts += Counter(finished=len(rids) - len(raised), raised=len(raised))  # += keeps no zero
            except trainer.OutOfTime as exc:
                counts["stopped"] += len(rids)
                print(f"run(s) {' '.join(rids)}: {exc}", file=sys.stderr)
                if unit:
                    unit.outcome = "stopped by the deadline"
                break
            except (ConfigError, DataError):  # this machine cannot run it (no CUDA, no data): nor the others
                raise
            except Exception as exc:  # one line, then the next run: a slot is too short to stop at one failure
                counts["raised"] += len(rids)
                print(f"run(s) {' '.join(rids)} raised {type(exc).__name__}: {exc}", file=sys.stderr)
                if unit:
                    unit.outcome = f"raised {type(exc).__name__}: {exc}"
        try:
            finished_size = save(args, runs_dir).finished_size
        except trainer.OutOfTime as exc:  # a SIGTERM during the save, handled once the state was written
            print(f"{exc}; after run(s) {' '.join(rids)}", file=sys.stderr)
            break
    return counts


def sized_units(runs: dict[str, RunConfig], args, deadline: float, runs_dir: Path):
    """(run ids, round estimate) of each unit in turn, its finished runs (here, shipped or in
    the ledger) left out, sized to the time left (`unit_sizing.size_unit`): the runs it leaves
    out come next as a unit of their own. Measured rounds are read again before each unit, so
    each unit trained counts for the next."""
    from shared.campaign import unit_sizing
    queue = training_units(runs, args)
    ledger = getattr(args, "ledger", frozenset())
    while queue:
        unit = [rid for rid in queue.pop(0)
                if rid not in ledger and not is_finished(rid, runs_dir, args.root / SHIPPED / "runs")]
        if not unit:
            continue
        measured = unit_sizing.measured_rounds(runs, runs_dir)
        done = {rid: rounds_done(runs_dir / rid) for rid in unit}
        rids, estimate = unit_sizing.size_unit(unit, runs, done, deadline - time.time(), measured)
        if len(rids) < len(unit):
            queue.insert(0, [rid for rid in unit if rid not in rids])
            print(f"note: {len(rids)} of the unit's {len(unit)} runs train now, as they can finish in the time left "
                  f"(a round about {estimate.seconds:.0f} s, {estimate.source})", file=sys.stderr)
        yield rids, estimate


def not_worth_starting(rids: list[str], runs: dict[str, RunConfig], args, deadline: float, round_seconds: float,
                       runs_dir: Path, finished_size: int) -> str | None:
    """Why the unit is not started (None: it is): at `round_seconds` a round it cannot finish
    before the deadline, and its checkpoints, each at least its model's weights, would not fit
    beside the finished runs in what a slot returns, so its GPU minutes would be lost."""
    rounds = max(runs[rid].federation.rounds - max(rounds_done(runs_dir / rid), 0) for rid in rids)
    seconds = rounds * round_seconds
    if time.time() + seconds <= deadline:
        return None
    checkpoints = [checkpoint_size(runs[rid], runs_dir / rid) for rid in rids]
    if finished_size + member_bound(checkpoints) <= args.max_parts * part_bytes(args.part_mib):
        return None
    return (f"run(s) {' '.join(rids)} not started: {rounds} rounds (about {seconds / 60:.0f} min) cannot finish in the "
            f"{max(deadline - time.time(), 0) / 60:.1f} min left, and the checkpoints (at least "
            f"{sum(checkpoints) / 2**20:.1f} MiB) could not come back: {slot_return(args)}")


def checkpoint_size(cfg: RunConfig, run_dir: Path) -> int:
    """At least the bytes of the run's checkpoint once it has trained: the one there, or its
    model's weights, which every checkpoint holds (a method's state comes on top). A model
    whose shape only the data gives (text, image folders): the one there, or 0."""
    checkpoint = run_dir / "checkpoint.pt"
    there = checkpoint.stat().st_size if checkpoint.is_file() else 0
    shape, classes = image_shape(cfg), num_classes(cfg)
    if shape is None or classes is None:
        return there
    return max(there, weights_size(cfg.model.name, classes, *shape, cfg.model.projection_dim))


@functools.lru_cache(maxsize=16)
def weights_size(model: str, classes: int, channels: int, side: int, projection_dim: int | None) -> int:
    """The bytes of an image model's weights and buffers, as its state_dict holds them."""
    from shared.models import build_model

    state = build_model(model, classes, channels, side, projection_dim).state_dict()
    return sum(t.numel() * t.element_size() for t in state.values())


@functools.lru_cache(maxsize=8)
def state_run_ids(targets: tuple[str, ...], scale: str, copy: Copy | None) -> tuple[str, ...]:
    """The runs a state file holds, expanded once per process: `train` saves after every run."""
    return tuple(expected_runs(targets, scale, copy))


@functools.lru_cache(maxsize=8)
def expected_runs(targets: tuple[str, ...], scale: str, copy: Copy | None) -> dict[str, RunConfig]:
    """run id -> config of the runs of a state's targets (not to be changed: cached)."""
    return campaign_runs(list(targets), scale, copy)[0]


def save(args, runs_dir: Path) -> Written:
    """The state file: the runs of its earlier targets and of this command's, the checkpoints
    that a slot could return (`write_state`)."""
    run_ids = state_run_ids(tuple(args.state_targets), args.scale, args.copy_spec)
    ledger = getattr(args, "ledger", frozenset())
    about = {"targets": args.state_targets, "scale": args.scale,
             "copy": dataclasses.asdict(args.copy_spec) | {"path": None} if args.copy_spec else None,
             **({LEDGER: sorted(ledger)} if ledger else {}),
             **({BUNDLED: True} if getattr(args, "bundling", False) else {})}
    members = state_members(run_ids, runs_dir, ledger, getattr(args, "carried_rounds", None))
    with sigterm_deferred():
        return write_state(args.state, members, about, args.part_mib, args.max_parts)


def slot_return(args) -> str:
    return f"a slot returns {args.max_parts} files of {args.part_mib:g} MiB (--max-parts, --part-mib)"


def tell_left_out(args, written: Written) -> None:
    """One line for each checkpoint the state file leaves out, and one where even its finished
    runs pass what a slot returns."""
    for run in written.left_out:
        print(f"note: run {run.run_id}'s checkpoint ({run.size / 2**20:.1f} MiB, {run.rounds} rounds) is left out of "
              f"{args.state}, as the slot could not return it ({slot_return(args)}): the run starts again from "
              f"round 0 unless this machine still holds {args.root / RUNS_DIR / run.run_id}", file=sys.stderr)
    if written.files > args.max_parts:
        print(f"warning: {args.state} takes {written.files} files ({written.size / 2**20:.1f} MiB) with its finished "
              f"runs alone, and {slot_return(args)}: a slot cannot return the whole state", file=sys.stderr)


@contextlib.contextmanager
def sigterm_deferred():
    """A SIGTERM while the state file is written is handled once it is written: stopping then
    leaves one whole state, not a file and parts side by side."""
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
    if received:
        signal.raise_signal(signal.SIGTERM)


def state_defaults(args) -> dict[str, bytes]:
    """--scale and --copy from an existing state file where the command line leaves them out
    (one state holds runs of one scale and one data); its targets and the command's. Returns
    the state's members: a command reads and verifies the state file once ({}: none yet)."""
    manifest, members = read_state(args.state) if state_exists(args.state) else ({}, {})
    if args.scale and manifest.get("scale", args.scale) != args.scale:
        raise CampaignError(f"--scale {args.scale}: the state file {args.state} holds runs at scale {manifest['scale']}")
    args.scale = args.scale or manifest.get("scale") or "paper"
    args.state_targets = list(dict.fromkeys([*manifest.get("targets", []), *args.targets]))
    given = parse_copy(args.copy)
    stored = manifest_copy(manifest) if manifest else None
    if manifest and given and (stored is None or given.sha256 != stored.sha256):
        raise CampaignError(f"--copy {args.copy}: the state file {args.state} holds runs on "
                            f"{stored.label if stored else 'the official data'}")
    args.copy_spec = given or stored
    args.ledger = read_ledger(manifest)
    args.carried_rounds = None
    if not manifest:
        return members
    members, refused = trusted_members(manifest, members)
    for line in refused:  # the run trains again here, as if the state had not held it
        print(f"note: {line}; it is not restored", file=sys.stderr)
    # a state `bundle` made: the one a session returns holds what it advanced (shared/campaign/ledger.py)
    args.carried_rounds = {rid: history_rounds(files.get("metrics.jsonl", b""))
                           for (_, rid), files in state_runs(members, ("progress",)).items()} if manifest.get(BUNDLED) else None
    return members


def stop_on_sigterm() -> None:
    """SIGTERM (a scheduler's, or `timeout`'s, when a round overran the budget) stops the run
    in progress as the budget would: its last checkpoint goes into the state file."""
    from shared.training.trainer import OutOfTime

    def stop(signum, frame):
        raise OutOfTime("stopped by SIGTERM; the state keeps its last round's checkpoint")

    signal.signal(signal.SIGTERM, stop)


def check_parts(args) -> None:
    """--part-mib and --max-parts, refused in one line before anything trains or is written."""
    if not args.part_mib > 0:
        raise CampaignError(f"--part-mib {args.part_mib:g}: a part must hold more than 0 MiB")
    if not 1 <= args.max_parts <= MAX_PARTS:
        raise CampaignError(f"--max-parts {args.max_parts}: a slot must return at least the state's one file, "
                            f"and parts are numbered 00-{MAX_PARTS - 1}")


def train(args) -> int:
    from shared.targets.runtime_settings import parse_settings

    check_parts(args)
    args.settings = parse_settings(args.set)
    stop_on_sigterm()
    started = time.time()
    deadline = started + 60 * args.minutes - min(STATE_SECONDS, 10 * args.minutes)
    members = state_defaults(args)
    runs_dir = args.root / RUNS_DIR
    runs, skipped = campaign_runs(args.targets, args.scale, args.copy_spec)
    if args.copy_spec is not None:  # missing data is said before anything is restored or trains
        from shared.config.schema import data_root
        from shared.data.datasets import find_copy

        find_copy(data_root(RunConfig(data_root=args.data_root)), args.copy_spec.sha256)
    if state_exists(args.state):
        restored = restore(members, runs_dir, args.root / SHIPPED / "runs")
        here = f" ({len(restored['kept'])} as far here already)" if restored["kept"] else ""
        print(f"continuing from {args.state}: {len(restored['finished'])} finished and "
              f"{len(restored['progress'])} checkpointed runs restored{here}")
    carried = carried_finished_size(args.state, members) if state_exists(args.state) else 0
    from shared.campaign import session_timing

    with session_timing(args.timing, args.device) as args.timing_record:
        counts = train_runs(runs, args, deadline, runs_dir, carried)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the command ends after this save: a SIGTERM stops nothing more
    written = save(args, runs_dir)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    tell_left_out(args, written)
    finished = sum(rid in args.ledger or is_finished(rid, runs_dir, args.root / SHIPPED / "runs") for rid in runs)
    print(f"{finished} of {len(runs)} runs finished ({', '.join(f'{n} {k}' for k, n in counts.items()) or 'none trained'}"
          f"{f'; {skipped} need other data than the copy' if skipped else ''}) in {(time.time() - started) / 60:.1f} "
          f"min; state {args.state}: {written.size / 2**20:.2f} MiB")
    return 1 if counts["raised"] else 0


# --- status -------------------------------------------------------------------------------------

def run_progress(rid: str, cfg: RunConfig, runs_dir: Path, shipped_runs: Path, state: dict[str, bytes],
                 finished_in_state: set[str]) -> float:
    """The fraction of the run's rounds done: 1 finished (here, shipped or in the state: a
    result, not a recorded failure; `state_runs`)."""
    if is_finished(rid, runs_dir, shipped_runs) or rid in finished_in_state:
        return 1.0
    rounds = max(rounds_done(runs_dir / rid), history_rounds(state.get(f"progress/{rid}/metrics.jsonl", b"")), 0)
    return rounds / cfg.federation.rounds


def status(args) -> int:
    from shared.targets.cost import gpu_hours, measured_throughput

    state = state_defaults(args)
    finished_in_state = {rid for _, rid in state_runs(state, ("finished",))} | args.ledger  # finished elsewhere too
    speed = {model: m["samples_per_s"] for runs_dir in (args.root / SHIPPED / "runs", args.root / RUNS_DIR)
             for model, m in measured_throughput("cuda", runs_dir).items()}  # this machine's runs win
    def tally(targets: list[str]) -> tuple[Counter, int]:
        runs, skipped = campaign_runs(targets, args.scale, args.copy_spec)
        line = Counter()
        for rid, cfg in runs.items():
            done = run_progress(rid, cfg, args.root / RUNS_DIR, args.root / SHIPPED / "runs", state, finished_in_state)
            line["finished" if done == 1 else "in progress" if done > 0 else "missing"] += 1
            line["hours"] += (1 - done) * gpu_hours(cfg, speed)
        return line, skipped

    for target in args.targets:
        line, skipped = tally([target])
        print(f"{target}: {line['finished']} finished, {line['in progress']} in progress, {line['missing']} missing"
              f"{f', {skipped} need other data' if skipped else ''}; {line['hours']:.1f} GPU-hours left")
    total = tally(args.targets)[0]  # a run two targets share counts once
    calibrated = f"calibrated on {', '.join(sorted(speed))}" if speed else "not calibrated: estimated throughput"
    print(f"total: {total['finished']} finished, {total['in progress']} in progress, {total['missing']} missing; "
          f"{total['hours']:.1f} GPU-hours left at scale={args.scale}"
          f"{f' on {args.copy_spec.label}' if args.copy_spec else ''} ({calibrated})")
    return 0


# --- import: shipped runs and their tables --------------------------------------------------------

def put_finished(run_dir: Path, files: dict[str, bytes]) -> bool:
    """A finished run's text files into run_dir (metrics.json last: a kill leaves no run that
    looks finished), its checkpoint and per-client state there then stale and removed; False, writing nothing,
    where run_dir holds a result already (it is never overwritten). A recorded failure there is
    moved aside, as unpacking an archive does. Call it holding the run's lock (`claim_runs`)."""
    if holds_result(run_dir):
        return False
    for file in FINISHED_FILES:
        if file in files:
            if file == "metrics.json":
                move_aside_non_result(run_dir / file)
            write_atomically(run_dir / file, lambda tmp, c=files[file]: tmp.write_bytes(c))
    (run_dir / "checkpoint.pt").unlink(missing_ok=True)
    shutil.rmtree(run_dir / CLIENT_STATE, ignore_errors=True)  # what only the checkpoint needed
    return True


def ship(members: dict[str, bytes], shipped_runs: Path) -> dict[str, list[str]]:
    """The state's finished runs into shipped_runs/<id>/, each holding its lock; a run shipped
    already is left as it is."""
    done = {"shipped": [], "kept": []}
    by_run = {rid: files for (_, rid), files in state_runs(members, ("finished",)).items()}
    with ExitStack() as locks:  # another import may write the same runs
        claim_runs(shipped_runs, [rid for rid in by_run if not holds_result(shipped_runs / rid)], locks)
        for rid, files in by_run.items():
            done["shipped" if put_finished(shipped_runs / rid, files) else "kept"].append(rid)
    return done


def copy_part(table, scale: str, copy: Copy):
    """The table cut to its part on the copy's dataset: the settings with any run on it, the
    methods with every run on it (FedGKD's tables give datasets columns or rows)."""
    from shared.targets.experiments import expand, keep_rows

    cells = expand(table, scale)
    on_copy = lambda cell: cell.config.dataset.name == copy.dataset
    keep = [i for i, column in enumerate(table.columns) if any(on_copy(c) for c in cells if c.column is column)]
    columns = [table.columns[i] for i in keep]
    rows = [r for r in table.rows if all(on_copy(c) for c in cells if c.row is r and any(c.column is k for k in columns))]
    settings = {c.label for c in columns}
    cut = keep_rows(table, rows)
    return dataclasses.replace(  # what names a setting cut away goes with it
        cut, columns=columns,
        rows=[dataclasses.replace(r, per_column={k: v for k, v in r.per_column.items() if k in settings})
              for r in cut.rows],
        reported={row: [values[i] for i in keep] for row, values in cut.reported.items()},
        inconsistencies=[m for m in cut.inconsistencies if m.column in settings])


def finished_part(table, scale: str, runtime: dict, runs_dir: Path):
    """The table cut to what is finished: the methods with every setting finished at seed 0,
    and as many further seeds as all of them have; (None, "") when no method has one.
    Returns (table, the note that marks it partial, empty when it is whole)."""
    from shared.targets.experiments import expand, keep_rows, scale_seeds

    cells = expand(table, scale, runtime)
    missing = {(c.row.label, c.seed) for c in cells if not holds_result(runs_dir / c.run_id)}
    seeds, rows = [], []
    for seed in scale_seeds(table, scale):
        complete = [r for r in table.rows if r.implemented and all((r.label, s) not in missing for s in [*seeds, seed])]
        if not complete or len(complete) < len(rows):  # another seed never costs a method
            break
        seeds, rows = [*seeds, seed], complete
    cut = keep_rows(table, [r for r in table.rows if r in rows or not r.implemented], seeds=tuple(seeds))
    shown = [r for r in cut.rows if r.implemented]  # a reading goes only beside its row
    if not shown:
        return None, ""
    implemented = [r for r in table.rows if r.implemented]
    partial = len(shown) < len(implemented) or len(seeds) < len(scale_seeds(table, scale))
    note = (f"partial: {len(shown)} of {len(implemented)} methods, seeds {seeds} of "
            f"{list(scale_seeds(table, scale))}") if partial else ""
    return cut, note


def data_folder(scale: str, copy: Copy | None) -> str:
    """The name of the folder of tables built at `scale` on `copy` (or the official data),
    shipped or built by the workflow: "cifar10-jpeg-copy-dfaab4e", "smoke-cifar10-copy-1a2b3c4"."""
    return "-".join([*([] if scale == "paper" else [scale]), *([copy.slug] if copy else [])]) or "official"


def table_dir(shipped: Path, paper: str, name: str, scale: str, copy: Copy | None) -> Path:
    """Where a shipped table lands: its own folder per data (the copy's) and scale."""
    return shipped / "tables" / data_folder(scale, copy) / paper / name


def copy_runtime(copy: Copy | None) -> dict:
    """What a runtime adds for runs on the copy (dataset.copy: their own run ids)."""
    return {"dataset": {"copy": copy.sha256}} if copy else {}


def labelled(target, copy: Copy | None, note: str = ""):
    """A table or figure whose caption names the copy (and the partial note); a table's name
    gets the copy's slug too (in ASCII: its LaTeX label, the titles drawn from it), keeps its
    declared name (`renamed_from`), by which its claims are found, and names its data in its
    claims as the caption does."""
    labels = " ".join(f"[{label}]" for label in (copy.label if copy else "", note) if label)
    if not labels:
        return target
    renamed = {"name": f"{target.name}-{copy.slug}", "renamed_from": target.name, "data": copy.label} \
        if copy and target.name.startswith("table") else {}
    return dataclasses.replace(target, caption=f"{target.caption} {labels}", **renamed)


def label_outputs(out: Path, copy: Copy | None, note: str = "") -> None:
    """The data in provenance.yaml and, on a copy, in every CSV (a `data` column), beside the
    captions: a file read alone still says what the runs trained on."""
    import pandas as pd
    import yaml

    data = copy.label if copy else "official"
    for path in out.glob("*.csv") if copy else []:
        frame = pd.read_csv(path)
        frame["data"] = data
        write_atomically(path, lambda tmp, f=frame: f.to_csv(tmp, index=False))
    provenance = yaml.safe_load((out / "provenance.yaml").read_text())
    provenance.update(data=data, partial=note or False)
    write_atomically(out / "provenance.yaml", lambda tmp: tmp.write_text(yaml.safe_dump(provenance, sort_keys=False)))


def named_target(target: str, prefix: str) -> tuple[str, str] | None:
    """(paper, name) of the target papers/<paper>/<name> where name starts with prefix; else None."""
    parts = target_parts(target)  # as target_cells reads it
    return (parts[0], parts[1]) if len(parts) == 2 and parts[1].startswith(prefix) else None


def build_shipped_table(target: str, scale: str, copy: Copy | None, shipped: Path) -> Path | None:
    """The target's table from the shipped runs, labelled with the copy and marked partial;
    None when it is not a table or nothing of it is finished."""
    from shared.targets.experiments import get_table
    from shared.reporting.tables import build_table

    parts = named_target(target, "table")
    if parts is None:
        return None
    table = get_table(*parts)
    runtime = copy_runtime(copy)
    table, note = finished_part(copy_part(table, scale, copy) if copy else table, scale, runtime, shipped / "runs")
    if table is None:
        return None
    out = check_inside(table_dir(shipped, parts[0], parts[1], scale, copy), shipped.parent)

    def write(folder: Path) -> None:
        build_table(labelled(table, copy, note), scale, shipped / "runs", folder, runtime)
        label_outputs(folder, copy, note)
    write_folder_atomically(out, write)
    return out


def build_shipped_figure(target: str, scale: str, copy: Copy | None, shipped: Path) -> Path | None:
    """The target's figure from the shipped runs once all its runs are shipped (a figure is
    not cut to what is finished), its caption labelled with the copy; else None."""
    from shared.reporting.figures import build_figure
    from shared.targets.figure_declarations import get_figure

    parts = named_target(target, "fig")
    if parts is None:
        return None
    figure = get_figure(*parts)
    runtime = copy_runtime(copy)
    try:
        cells = figure.cells(scale, runtime)
    except ConfigError:  # runs on data the copy is not of
        return None
    if not all(holds_result(shipped / "runs" / c.run_id) for c in cells):
        return None
    out = check_inside(table_dir(shipped, parts[0], parts[1], scale, copy), shipped.parent)

    def write(folder: Path) -> None:
        build_figure(labelled(figure, copy), scale, shipped / "runs", folder, runtime)
        label_outputs(folder, copy)
    write_folder_atomically(out, write)
    return out


def write_listing(shipped: Path) -> Path:
    """shipped/README.md: every shipped table and figure (linked) and how many runs are shipped."""
    import yaml

    runs = sorted(p.parent.name for p in (shipped / "runs").glob("*/metrics.json"))
    tables = sorted(p.parent for p in (shipped / "tables").glob("*/*/*/provenance.yaml"))  # and figures
    lines = ["# Shipped paper-scale results", "",
             "Generated by `python -m shared.campaign import`; see the README's Campaign section.", "",
             f"{len(runs)} finished runs in [`runs/`](runs/) (config, metrics, per-round curves; no models).", ""]
    if not tables:
        lines.append("No table or figure is shipped yet: no paper-scale run has finished.")
    for path in tables:
        rel = path.relative_to(shipped)
        provenance = yaml.safe_load((path / "provenance.yaml").read_text())
        partial = f" ({provenance['partial']})" if provenance.get("partial") else ""
        if (path / "comparison.md").is_file():
            lines.append(f"- [`{rel}`]({rel}/comparison.md): "
                         f"{(path / 'comparison.md').read_text().splitlines()[0].lstrip('# ')}{partial}")
        else:
            lines.append(f"- [`{rel}`]({rel}/figure.png): {provenance['caption']}")
    write_atomically(check_inside(shipped / "README.md", shipped.parent), lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    return shipped / "README.md"


def affected_tables(manifest: dict, copy: Copy | None, shipped: Path) -> list[str]:
    """The state's targets, and the tables shipped before on the same data and scale (a run
    one of them shares may have come with this state)."""
    folder = table_dir(shipped, "*", "*", manifest["scale"], copy).parent.parent
    before = [f"papers/{p.parent.name}/{p.name}" for p in sorted(folder.glob("*/*")) if p.is_dir()]
    return list(dict.fromkeys([*manifest["targets"], *before]))


def import_state(args) -> int:
    """A run that fails its checks (shared/campaign/carried_runs.py) is named in one line and left out,
    the others imported (exit status 2 then); every path the state decides is checked to lie
    under results/ before anything is written."""
    manifest, members = read_state(args.file)
    shipped = args.root / SHIPPED
    copy = manifest_copy(manifest)
    members, refused = trusted_members(manifest, members)
    for line in refused:
        print(f"error: {line}", file=sys.stderr)
    for path in import_paths(manifest, members, args.root, copy):
        check_inside(path, args.root / RESULTS)
    progress = {k: v for k, v in members.items() if k.startswith("progress/")}
    # checkpoints first: a run a trainer holds (the likely refusal) is refused before anything is written
    restored = restore(progress, args.root / RUNS_DIR, shipped / "runs")
    shipping = ship(members, shipped / "runs")
    tables = [build(t, manifest["scale"], copy, shipped) for t in affected_tables(manifest, copy, shipped)
              for build in (build_shipped_table, build_shipped_figure)]
    write_listing(shipped)
    kept = f" ({len(shipping['kept'])} shipped already, left as they were)" if shipping["kept"] else ""
    print(f"imported {args.file}: {len(shipping['shipped'])} runs shipped into {shipped / 'runs'}{kept}, "
          f"{len(restored['progress'])} checkpoints into {args.root / RUNS_DIR}; tables and figures: "
          f"{', '.join(str(t) for t in tables if t) or 'none (nothing of a table, no whole figure finished)'}")
    return 2 if refused else 0


def import_paths(manifest: dict, members: dict[str, bytes], root: Path, copy: Copy | None) -> list[Path]:
    """Every path `import` writes that the state decides: its runs' folders, its tables' folders."""
    shipped = root / SHIPPED
    runs = sorted({MEMBER.fullmatch(name).group(2) for name in members})
    tables = [table_dir(shipped, *parts, manifest["scale"], copy) for t in affected_tables(manifest, copy, shipped)
              if len(parts := target_parts(t)) == 2]
    return [shipped / "README.md", *(d / rid for rid in runs for d in (shipped / "runs", root / RUNS_DIR)), *tables]


def restore_shipped(run_ids, runs_dir: str | Path, shipped_runs: str | Path = SHIPPED / "runs") -> int:
    """Copy the shipped runs among run_ids into runs_dir where no result is there, so that the
    workflow takes them as finished (it reads runs_dir/<id>/metrics.json), each holding its
    lock: a run another process trains is left to it (a note says so). Returns how many it copied."""
    runs_dir, shipped_runs = Path(runs_dir), Path(shipped_runs)
    copied = 0
    for rid in run_ids:
        source = shipped_runs / rid
        if not holds_result(source) or holds_result(runs_dir / rid):
            continue
        with ExitStack() as lock:
            try:
                claim_runs(runs_dir, [rid], lock)
            except RunFilesError as exc:
                print(f"note: shipped run {rid} is not copied into {runs_dir}: {exc}", file=sys.stderr)
                continue
            copied += put_finished(runs_dir / rid, {f: (source / f).read_bytes() for f in FINISHED_FILES
                                                    if (source / f).is_file()})
    return copied


# --- bundle: what an offline machine needs beside the checkout -------------------------------------

def data_files(runs: dict[str, RunConfig], copy: Copy | None, data_root: Path) -> list[tuple[Path, Path]]:
    """(source, place under the bundle's data root) of the files the runs read: the copy, or
    the official archives found in the local data root."""
    from shared.data.datasets import CIFAR, COPIES

    if copy is not None:
        if copy.path is None:
            raise CampaignError("bundle needs the copy's file: --copy NAME=FILE")
        return [(copy.path, Path(COPIES) / copy.path.name)]
    names = {cfg.dataset.name for cfg in runs.values()}
    found = [(data_root / CIFAR[n]["archive"].filename, Path(CIFAR[n]["archive"].filename)) for n in names if n in CIFAR]
    absent = [str(src) for src, _ in found if not src.is_file()]
    if absent:
        raise CampaignError(f"{absent[0]} is not here to bundle; download it first (or train on a copy: --copy)")
    return found


def wheels(out: Path, wheels_from: Path | None) -> list[str]:
    """Wheels of what the GPU machine may lack (OFFLINE_WHEELS), for CPython 3.12 on Linux:
    copied from a folder, or downloaded here with pip (the machine itself has no network)."""
    out.mkdir(parents=True, exist_ok=True)
    if wheels_from is not None:
        for wheel in wheels_from.glob("*.whl"):
            shutil.copy2(wheel, out / wheel.name)
    else:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version",
                        "3.12", "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
                        "-d", str(out), *OFFLINE_WHEELS], check=True)
    return sorted(p.name for p in out.glob("*.whl"))


def check_carried_state(source: Path, place: Path) -> None:
    """Refused in one line, before anything is written: a state at the bundle's place that is not
    --state's bytes (it may be a newer slot's state; moving it aside would hide it from the slot)."""
    there, carried = state_files(place), state_files(source)
    if not there or source.resolve() == place.resolve():
        return
    same = ([p.name.replace(source.name, place.name, 1) for p in carried] == [p.name for p in there]
            and all(a.read_bytes() == b.read_bytes() for a, b in zip(carried, there)))
    if not same:
        raise CampaignError(f"{place} (or its parts) holds another state than --state {source}, perhaps a newer "
                            f"slot's; import or move it away first")


def bundle(args) -> int:
    """DIR holds the data, the wheels and the state file as scripts/gpu-session.sh (and
    scripts/campaign-slot.sh) read them: DIR/data, DIR/wheels, DIR/state.tar.gz. Without
    --state, the state is written here: the ledger and the checkpoints that fit --max-upload-mib
    (`bundle_state`); with it, that state is carried as it is."""
    from shared.config.schema import data_root

    check_parts(args)
    given = args.state is not None
    args.state = args.state or args.output / SLOT_STATE
    check_carried_state(args.state, args.output / SLOT_STATE)
    members = state_defaults(args)
    runs, _ = campaign_runs(args.targets, args.scale, args.copy_spec)
    out, runs_dir, shipped_runs = args.output, args.root / RUNS_DIR, args.root / SHIPPED / "runs"
    sources = data_files(runs, args.copy_spec, data_root(RunConfig(data_root=args.data_root)))
    upload_budget(args.max_upload_mib, sum(source.stat().st_size for source, _ in sources))  # before any write
    unsaved = [] if given else not_here(members, runs_dir, shipped_runs)
    if unsaved:
        raise CampaignError(f"{args.state} holds {len(unsaved)} runs further than here (e.g. {unsaved[0]}); "
                            f"import it first")
    for source, place in sources:
        (out / "data" / place).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, out / "data" / place)
    names = [] if args.no_wheels else wheels(out / "wheels", args.wheels_from)
    if not given:
        bundle_state(args, runs, out)
    elif args.state.resolve() != (out / SLOT_STATE).resolve():  # checked above: nothing there, or the same bytes
        for part in state_files(args.state):
            shutil.copy2(part, out / part.name.replace(args.state.name, SLOT_STATE, 1))  # the name the slot reads
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    limit = f" of the {args.max_upload_mib:g} MiB limit" if args.max_upload_mib is not None else ""
    if args.max_upload_mib is not None and size > args.max_upload_mib * 2**20:
        raise CampaignError(f"bundle {out}: {size / 2**20:.1f} MiB is over --max-upload-mib {args.max_upload_mib:g}")
    print(f"bundled {out}: data for {len(runs)} runs, {len(names)} wheels, state {out / SLOT_STATE} (ledger of "
          f"{len(getattr(args, 'ledger', ()))} finished runs); {size / 2**20:.1f} MiB{limit}")
    return 0


def not_here(members: dict[str, bytes], runs_dir: Path, shipped_runs: Path) -> list[str]:
    """The runs of a state that this machine has not got as far: a finished run neither here nor
    shipped, a checkpoint ahead of the one here (a returned state not imported yet)."""
    return [rid for (kind, rid), files in state_runs(members).items()
            if not is_finished(rid, runs_dir, shipped_runs)
            and (kind == "finished" or rounds_done(runs_dir / rid) < history_rounds(files.get("metrics.jsonl", b"")))]


def bundle_state(args, runs: dict[str, RunConfig], out: Path) -> None:
    """DIR/state.tar.gz: the ledger of the runs finished here or shipped (no finished run's
    text), and the checkpoints here, the most advanced first, while data, wheels and state stay
    within --max-upload-mib; each checkpoint left out is said in one line."""
    runs_dir, shipped_runs = args.root / RUNS_DIR, args.root / SHIPPED / "runs"
    args.ledger = frozenset(rid for rid in runs if is_finished(rid, runs_dir, shipped_runs))  # shipped or here
    args.carried_rounds, args.bundling = None, True
    others = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and not p.name.startswith(SLOT_STATE))
    budget = upload_budget(args.max_upload_mib, others)
    if budget is not None:  # parts that hold the bytes left: the checkpoints that do not fit stay out
        args.part_mib, args.max_parts = state_parts(budget, part_bytes(args.part_mib))
    written = save(args, runs_dir)
    for run in written.left_out:
        print(f"note: run {run.run_id}'s checkpoint ({run.size / 2**20:.1f} MiB, {run.rounds} rounds) is left out of "
              f"{args.state}: --max-upload-mib {args.max_upload_mib:g}; the session starts it again", file=sys.stderr)


# --- command line -------------------------------------------------------------------------------

def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("targets", nargs="+", metavar="TARGET", help="papers/<paper>/<table|fig*>, as for Snakemake")
    p.add_argument("--scale", choices=["paper", "small", "smoke"], help="default: the state file's, else paper")
    p.add_argument("--copy", metavar="NAME=FILE|SHA256", help="train on a copy of dataset NAME (dataset.copy)")
    p.add_argument("--root", type=Path, default=Path("."), help="the project (default: .)")
    p.add_argument("--data-root", help="the data root (default: $FEDREPRO_DATA or ./data)")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m shared.campaign", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    t = commands.add_parser("train", help="train the targets' missing runs for M minutes")
    add_run_options(t)
    t.add_argument("--minutes", type=float, required=True)
    t.add_argument("--state", type=Path, required=True, help="the state file (continued if it exists)")
    t.add_argument("--device", default="auto", help="trainer.device (default: auto)")
    t.add_argument("--clients-per-step", type=int, default=1, metavar="N",
                   help="trainer.clients_per_step; 2 or more trains groups in a batched step on a CPU too")
    t.add_argument("--part-mib", type=float, default=PART_MIB, help="split a larger state file into parts")
    t.add_argument("--max-parts", type=int, default=SLOT_RETURN_FILES, metavar="N",
                   help="the files a slot returns: checkpoints that would take more stay out of the state file")
    t.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a runtime key for every run (e.g. trainer.cuda_graphs=false); others would change run ids")
    t.add_argument("--timing", type=Path, metavar="FILE", help="write where each unit's seconds went (JSON)")
    s = commands.add_parser("status", help="finished, in progress, missing, GPU-hours left")
    add_run_options(s)
    s.add_argument("--state", type=Path)
    i = commands.add_parser("import", help="verify a state file, ship its runs, rebuild their tables")
    i.add_argument("file", type=Path)
    i.add_argument("--root", type=Path, default=Path("."))
    b = commands.add_parser("bundle", help="data, wheels and state for an offline machine")
    add_run_options(b)
    b.add_argument("-o", "--output", type=Path, required=True)
    b.add_argument("--state", type=Path, help=f"the state file to carry (default: DIR/{SLOT_STATE}, made if absent)")
    b.add_argument("--wheels-from", type=Path, help="copy wheels from this folder instead of pip download")
    b.add_argument("--no-wheels", action="store_true")
    b.add_argument("--max-upload-mib", type=float, metavar="M",
                   help="data, wheels and state together at most M MiB (default: no limit)")
    b.add_argument("--part-mib", type=float, default=PART_MIB, help=argparse.SUPPRESS)
    b.add_argument("--max-parts", type=int, default=SLOT_RETURN_FILES, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """0 on success, 1 if a run raised, 2 with one line on stderr for what is refused."""
    args = parser().parse_args(argv)
    try:
        return {"train": train, "status": status, "import": import_state, "bundle": bundle}[args.command](args)
    except (CampaignError, TargetError, RunFilesError, ConfigError, DataError, LedgerError, OSError,
            subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

