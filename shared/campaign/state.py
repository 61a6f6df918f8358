"""The state file a campaign's slots carry: its finished runs and checkpoints, written in parts
that a slot can return and read back verified; its runs restored into results/runs/."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import json
import os
import sys
import tarfile
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path

from shared.campaign.carried_runs import trusted
from shared.campaign.ledger import BUNDLED, advanced, read_ledger

# the state file's form and its checks: shared/campaign/state_reading.py (CampaignError: a refusal in one line)
from shared.campaign.state_reading import (
    CLIENT_STATE_FILE,
    FINISHED_FILES,
    FIRST,
    MANIFEST,
    MEMBER,
    PROGRESS_FILES,
    STATE_FORMAT,
    CampaignError,
    read_checked,
    written_at,
)
from shared.config.schema import ConfigError, RunConfig
from shared.data.catalog import DataError
from shared.runs.files import (
    CLIENT_STATE,
    add_member,
    aside_path,
    history_rounds,
    holds_result,
    move_aside_checkpoint,
    printable,
    records_result,
    rounds_done,
    run_members,
    sha256,
    temporary_path,
    write_atomically,
)
from shared.runs.locking import claim_runs
from shared.runs.shipped import is_finished, put_finished
from shared.targets.copies import Copy, campaign_runs, parse_copy
from shared.targets.resolve import TargetError

RESULTS = Path("results")  # everything a state's contents decide lies under it (`check_inside`)
RUNS_DIR = RESULTS / "runs"
# A campaign's state between its pieces, tracked: the checkpoints of its runs in progress (its
# finished runs live in results/shipped/ as text), which the next piece, here or on a GPU, continues
CAMPAIGN_STATE = RESULTS / "campaign" / "state.tar.gz"
TAR_END = 12 * 1024  # at most what a state file's end adds: tar's two blocks and a record's padding, gzip's trailer
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
    forms = [
        form for form in ([path] if os.path.lexists(path) else [], part_paths(path)) if form
    ]  # a link, a FIFO: refused
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
            raise CampaignError(
                f"{path} and {path.name}.part-00, ... are both there, written at the same time; keep one of them"
            )
        path.unlink()  # the same state (`write_state` cut short before it removed the whole file): the parts go back
        return states[1][2], states[1][3]
    kept = max(states, key=lambda state: state[0])
    other = next(form for form in forms if form is not kept[1])
    asides = [part.rename(aside_path(part, "older")) for part in other]

    def name(form):
        return "the whole file" if form == [path] else f"{len(form)} parts"

    print(
        f"note: {path}: read {name(kept[1])} (written {kept[2].get('written_at')}); set aside {name(other)} "
        f"as {asides[0].name}{', ...' if len(asides) > 1 else ''} (older or damaged)",
        file=sys.stderr,
    )
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


@functools.lru_cache(maxsize=8)
def expected_runs(targets: tuple[str, ...], scale: str, copy: Copy | None) -> dict[str, RunConfig]:
    """run id -> config of the runs of a state's targets (not to be changed: cached)."""
    return campaign_runs(list(targets), scale, copy)[0]


def trusted_members(manifest: dict, members: dict[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """The state's runs that pass shared/campaign/carried_runs.py's checks, and a line for each that does not."""
    copy = manifest_copy(manifest)
    where = f"at scale {manifest['scale']} on {copy.label if copy else 'the official data'}"
    return trusted(members, manifest_runs(manifest), where)


def state_defaults(args) -> dict[str, bytes]:
    """--scale and --copy from an existing state file where the command line leaves them out
    (one state holds runs of one scale and one data); its targets and the command's. Returns
    the state's members: a command reads and verifies the state file once ({}: none yet)."""
    manifest, members = read_state(args.state) if state_exists(args.state) else ({}, {})
    if args.scale and manifest.get("scale", args.scale) != args.scale:
        raise CampaignError(
            f"--scale {args.scale}: the state file {args.state} holds runs at scale {manifest['scale']}"
        )
    args.scale = args.scale or manifest.get("scale") or "paper"
    args.state_targets = list(dict.fromkeys([*manifest.get("targets", []), *args.targets]))
    given = parse_copy(args.copy)
    stored = manifest_copy(manifest) if manifest else None
    if manifest and given and (stored is None or given.sha256 != stored.sha256):
        raise CampaignError(
            f"--copy {args.copy}: the state file {args.state} holds runs on "
            f"{stored.label if stored else 'the official data'}"
        )
    args.copy_spec = given or stored
    args.ledger = read_ledger(manifest)
    args.first = getattr(args, "first", None) or manifest.get(FIRST)  # the state's choice, unless given anew
    args.carried_rounds = None
    if not manifest:
        return members
    members, refused = trusted_members(manifest, members)
    for line in refused:  # the run trains again here, as if the state had not held it
        print(f"note: {printable(line)}; it is not restored", file=sys.stderr)
    # a state `bundle` made: the one a session returns holds what it advanced (shared/campaign/ledger.py)
    args.carried_rounds = (
        {
            rid: history_rounds(files.get("metrics.jsonl", b""))
            for (_, rid), files in state_runs(members, ("progress",)).items()
        }
        if manifest.get(BUNDLED)
        else None
    )
    return members


def state_members(
    run_ids: list[str],
    runs_dir: Path,
    ledger: frozenset[str] = frozenset(),
    carried_rounds: dict[str, int] | None = None,
) -> list[tuple[str, bytes, float]]:
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
            carried_rounds is None or advanced(rid, rounds_done(run_dir), carried_rounds)
        ):
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


def write_state(
    path: Path,
    files: list[tuple[str, bytes, float]],
    about: dict,
    part_mib: float | None = None,
    max_parts: int | None = None,
) -> Written:
    """The state file: finished runs, then the checkpoints that keep it within `max_parts` parts
    (None: all), split into parts of part_mib when larger (None: one file, whatever its size).
    Every step leaves a readable state, the old one or the new (`read_state`): the new whole
    file replaces `path` (beside any old parts it is the later state), the old parts go (a torn
    set never reads), the new parts are written, each atomically (a torn set beside the whole
    file never reads), then the whole file goes (until then both hold the same state, and the
    parts are read)."""
    limit = part_bytes(part_mib) if part_mib else None
    whole = temporary_path(path, f".{os.getpid()}.{path.name}")  # hidden; ends as `path` does, so compressed alike
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        finished_size, left_out = write_members(whole, files, about, max_parts * limit if max_parts and limit else None)
        size = whole.stat().st_size
        os.replace(whole, path)
    finally:
        whole.unlink(missing_ok=True)
    if limit and size > MAX_PARTS * limit:  # the new state stays whole: readable here, though no slot returns it
        raise CampaignError(
            f"state {path}: {size / 2**20:.1f} MiB would take more than {MAX_PARTS} parts of "
            f"{part_mib:g} MiB; it is written whole"
        )
    for old in part_paths(path):  # part-00 first: what is left of them starts mid-stream and never reads
        old.unlink()
    if limit and size > limit:
        data = path.read_bytes()
        for i, start in enumerate(range(0, size, limit)):
            write_atomically(
                path.with_name(f"{path.name}.part-{i:02d}"),
                lambda tmp, chunk=data[start : start + limit]: tmp.write_bytes(chunk),
            )
        path.unlink()
    return Written(size, finished_size, -(-size // limit) if limit else 1, tuple(left_out))


def write_members(
    out: Path, files: list[tuple[str, bytes, float]], about: dict, budget: int | None
) -> tuple[int, list[LeftOut]]:
    """The state's archive at `out`: the finished runs, then each run in progress, the most
    advanced first (most rounds), while the file stays within `budget` bytes (None: no limit;
    where the finished runs alone pass it, all: the state cannot come back whole anyway). The
    compressed stream is flushed after each run, so the file's length so far is exact, and a
    run's files add at most `member_bound`. Returns the bytes up to and with the finished
    runs, and the runs left out."""
    entries = {name: {"path": name, "sha256": sha256(data), "size": len(data)} for name, data, _ in files}

    def manifest(kept):
        return {
            "format": STATE_FORMAT,
            **about,
            "members": [entries[name] for name, _, _ in kept],
            "written_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        }

    reserve = member_bound([len(json.dumps(manifest(files), indent=1))]) + TAR_END  # the manifest of all: no shorter
    finished = [file for file in files if file[0].startswith("finished/")]
    kept, left_out = list(finished), []
    with (
        open(out, "wb") as raw,
        (
            gzip.GzipFile(fileobj=raw, mode="wb") if out.name.endswith((".gz", ".tgz")) else contextlib.nullcontext(raw)
        ) as stream,
    ):
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


def state_runs(
    members: dict[str, bytes], kinds: tuple[str, ...] = ("finished", "progress")
) -> dict[tuple[str, str], dict[str, bytes]]:
    """(kind, run id) -> file -> bytes of a state's runs of those kinds. A "finished" run whose
    metrics.json records no result (a state written before failures were told apart) is left
    out: it is neither shipped nor restored as finished."""
    runs: dict[tuple[str, str], dict[str, bytes]] = {}
    for name, content in members.items():
        kind, rid, file = MEMBER.fullmatch(name).groups()
        if kind in kinds:
            runs.setdefault((kind, rid), {})[file] = content
    return {
        key: files
        for key, files in sorted(runs.items())
        if key[0] != "finished" or records_result(files.get("metrics.json", b""))
    }


def restore(members: dict[str, bytes], runs_dir: Path, shipped_runs: Path) -> dict[str, list[str]]:
    """Put a state's runs into runs_dir, each holding its lock (`claim_runs`: refused in one line,
    before anything is written, while another process trains one): a finished run unless one
    is finished there or shipped, a checkpoint unless the run is finished or holds at least as
    many rounds there."""

    def kept(kind: str, rid: str, files: dict[str, bytes]) -> bool:
        return is_finished(rid, runs_dir, shipped_runs) or (
            kind == "progress" and rounds_done(runs_dir / rid) >= history_rounds(files.get("metrics.jsonl", b""))
        )

    runs = state_runs(members)
    done = {
        "finished": [],
        "progress": [],
        "kept": [rid for (kind, rid), files in runs.items() if kept(kind, rid, files)],
    }
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
