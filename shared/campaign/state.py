"""The state file a campaign's sessions carry: its finished runs and checkpoints, written in parts
that a session can return and read back verified; its runs restored into results/runs/. It is a
transfer file of kind "campaign" (shared/runs/transfer.py writes and reads it; what it holds:
shared/campaign/state_reading.py); a state of an earlier version (fedrepro-campaign/1) reads too."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from contextlib import ExitStack
from pathlib import Path

from shared.campaign.carried_runs import trusted
from shared.campaign.ledger import BUNDLED, advanced, read_ledger

# the state file's form and its checks: shared/campaign/state_reading.py (CampaignError: a refusal in one line)
from shared.campaign.state_reading import (
    CLIENT_STATE_FILE,
    FINISHED_FILES,
    FIRST,
    MEMBER,
    PROGRESS_FILES,
    CampaignError,
    read_checked,
    written_at,
)
from shared.config.schema import ConfigError, RunConfig
from shared.data.catalog import DataError, data_root
from shared.runs.files import (
    CLIENT_STATE,
    aside_path,
    history_rounds,
    holds_result,
    move_aside_checkpoint,
    printable,
    records_result,
    rounds_done,
    run_members,
)
from shared.runs.locking import claim_runs
from shared.runs.shipped import is_finished, put_finished
from shared.runs.transfer import (
    MAX_PARTS,
    TAR_END,
    Content,
    install,
    member_bound,
    part_paths,
    write_parts,
    write_transfer,
)
from shared.targets.copies import Copy, campaign_runs, locate, parse_copy
from shared.targets.resolve import TargetError

RESULTS = Path("results")  # everything a state's contents decide lies under it (`check_inside`)
RUNS_DIR = RESULTS / "runs"
# A campaign's state between its sessions, tracked: the checkpoints of its runs in progress (its
# finished runs live in results/shipped/ as text), which the next session, here or on a GPU, continues
CAMPAIGN_STATE = RESULTS / "campaign" / "state.tar.gz"


def state_files(path: Path) -> list[Path]:
    """The state file and its parts that are there (both forms, where a save was cut short)."""
    return [path] * path.is_file() + part_paths(path)


def state_exists(path: Path | None) -> bool:
    return path is not None and bool(state_files(path))


def read_state(path: Path, stage: Path | None = None, owner: bool = False) -> tuple[dict, dict[str, Content]]:
    """The manifest and members of a state file (or its parts), every checksum verified, a
    large checkpoint staged on disk beside `stage` (None: beside the state file). A file and
    parts side by side (a save cut short, or states carried from two machines): the valid one
    written later is read (both holding the same state, a save cut short at its last step: the
    parts), and a one-line note says which. Only the command that owns the state (`owner`:
    `train` of its --state, `import --state` rewriting its own) sets the other aside, or removes
    the whole file that holds the same state; any other reader leaves both as they are."""
    forms = [
        form for form in ([path] if os.path.lexists(path) else [], part_paths(path)) if form
    ]  # a link, a FIFO: refused
    if not forms:
        raise CampaignError(f"state file {path} does not exist (nor {path.name}.part-00, ...)")
    if len(forms) == 1:
        return read_form(path, forms[0], stage)
    return newer_form(path, forms, stage, owner)


def newer_form(
    path: Path, forms: list[list[Path]], stage: Path | None = None, owner: bool = False
) -> tuple[dict, dict[str, Content]]:
    """Of the whole file and its parts, the valid state written later (`read_state`); where
    `owner`, the other is moved aside (of two copies of one state, the whole file is removed)."""
    states, errors = [], []
    for form in forms:
        try:
            manifest, members = read_form(path, form, stage)
            states.append((written_at(manifest), form, manifest, members))  # checked: UTC, not ahead, they compare
        except CampaignError as exc:
            errors.append(exc)
    if not states:
        raise errors[0]
    same = len(states) == 2 and states[0][0] == states[1][0]
    if same and states[0][2] != states[1][2]:
        raise CampaignError(
            f"{path} and {path.name}.part-00, ... are both there, written at the same time; keep one of them"
        )
    kept = states[1] if same else max(states, key=lambda state: state[0])
    other = next(form for form in forms if form is not kept[1])
    if same and owner:
        path.unlink()  # the same state (`write_state` cut short before it removed the whole file): the parts go back
    elif owner:
        asides = [part.rename(aside_path(part, "older")) for part in other]
        aside = f"as {asides[0].name}{', ...' if len(asides) > 1 else ''}"
    if not owner or not same:
        left = f"set aside {form_name(path, other)} {aside}" if owner else f"left {form_name(path, other)} untouched"
        why = "the same state" if same else "older or damaged"
        print(
            f"note: {path}: read {form_name(path, kept[1])} (written {printable(kept[2].get('written_at'))}); "
            f"{left} ({why})",
            file=sys.stderr,
        )
    return kept[2], kept[3]


def form_name(path: Path, form: list[Path]) -> str:
    return "the whole file" if form == [path] else f"{len(form)} part{'s' * (len(form) != 1)}"


def read_form(path: Path, parts: list[Path], stage: Path | None = None) -> tuple[dict, dict[str, Content]]:
    """The verified manifest and members of the state in `parts` (the whole file, or its parts):
    read as shared/campaign/state_reading.py checks it, its targets resolved in this checkout at its
    scale and on its data, before anything is written."""
    manifest, members = read_checked(path, parts, stage)
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


def trusted_members(manifest: dict, members: dict[str, Content]) -> tuple[dict[str, Content], list[str]]:
    """The state's runs that pass shared/campaign/carried_runs.py's checks, and a line for each that does not."""
    copy = manifest_copy(manifest)
    where = f"at scale {manifest['scale']} on {copy.label if copy else 'the official data'}"
    return trusted(members, manifest_runs(manifest), where)


def named_copy(given: Copy | None, stored: Copy | None, root: str | None) -> Copy | None:
    """The copy the command names: the file given; one given by its SHA-256 as the data root
    holds it (its kind read from it, so that its label says "JPEG copy", and its file to carry),
    else as the state stored it, else as given (a plan for data not here yet); none given: the
    state's."""
    if given is None or given.path is not None:
        return given or stored
    try:
        return locate(given, data_root(root))
    except DataError:
        return stored or given


def state_defaults(args, owner: bool = False) -> dict[str, Content]:
    """--scale and --copy from an existing state file where the command line leaves them out
    (one state holds runs of one scale and one data); its targets and the command's. Returns
    the state's members: a command reads and verifies the state file once ({}: none yet). Only
    its `owner` (`read_state`) sets a form of it aside; a reader that does not own it stages a
    large checkpoint under the project's results/."""
    stage = None if owner else Path(getattr(args, "root", Path("."))) / RESULTS
    manifest, members = read_state(args.state, stage, owner) if state_exists(args.state) else ({}, {})
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
    args.copy_spec = named_copy(given, stored, getattr(args, "data_root", None))
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
    """A run in progress whose checkpoint the state file leaves out: the session could not return it."""

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


def carried_finished_size(path: Path, members: dict[str, Content]) -> int:
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
    wrote, left_out = write_members(path, files, about, max_parts * limit if max_parts and limit else None)
    size = wrote.size
    if limit and size > MAX_PARTS * limit:  # the new state stays whole: readable here, though no session returns it
        raise CampaignError(
            f"state {path}: {size / 2**20:.1f} MiB would take more than {MAX_PARTS} parts of "
            f"{part_mib:g} MiB; it is written whole"
        )
    for old in part_paths(path):  # part-00 first: what is left of them starts mid-stream and never reads
        old.unlink()
    if limit and size > limit:
        write_parts(path, limit)
        path.unlink()
    return Written(size, wrote.sizes[0], -(-size // limit) if limit else 1, tuple(left_out))


def write_members(path: Path, files: list[tuple[str, bytes, float]], about: dict, budget: int | None):
    """The state's transfer file (shared/runs/transfer.py `write_transfer`): the finished runs,
    then each run in progress, the most advanced first (most rounds), while the file stays
    within `budget` bytes (None: no limit; where the finished runs alone pass it, all: the
    state cannot come back whole anyway); a run's files add at most `member_bound`. Returns
    what was written and the runs left out."""
    finished = [file for file in files if file[0].startswith("finished/")]
    groups = [finished, *progress_by_rounds(files)]
    everything, left_out = budget is None, []

    def admit(index: int, group: list, size: int) -> bool:
        nonlocal everything
        if index == 0:
            return True
        if index == 1:  # `size`: the finished runs' bytes with the manifest's and the end's
            everything = everything or size > budget
        if everything or size + member_bound([len(data) for _, data, _ in group]) <= budget:
            return True
        rid = MEMBER.fullmatch(group[0][0]).group(2)
        left_out.append(LeftOut(rid, sum(len(data) for _, data, _ in group), progress_rounds(group)))
        return False

    return write_transfer(path, "campaign", groups, about, admit), left_out


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
    members: dict[str, Content], kinds: tuple[str, ...] = ("finished", "progress")
) -> dict[tuple[str, str], dict[str, Content]]:
    """(kind, run id) -> file -> bytes of a state's runs of those kinds. A "finished" run whose
    metrics.json records no result (a state written before failures were told apart) is left
    out: it is neither shipped nor restored as finished."""
    runs: dict[tuple[str, str], dict[str, Content]] = {}
    for name, content in members.items():
        kind, rid, file = MEMBER.fullmatch(name).groups()
        if kind in kinds:
            runs.setdefault((kind, rid), {})[file] = content
    return {
        key: files
        for key, files in sorted(runs.items())
        if key[0] != "finished" or records_result(files.get("metrics.json", b""))
    }


def restore(members: dict[str, Content], runs_dir: Path, shipped_runs: Path) -> dict[str, list[str]]:
    """Put a state's runs into runs_dir, each holding its lock (`claim_runs`: refused in one line,
    before anything is written, while another process trains one): a finished run unless one
    is finished there or shipped, a checkpoint unless the run is finished or holds at least as
    many rounds there."""

    def kept(kind: str, rid: str, files: dict[str, Content]) -> bool:
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


def put_progress(run_dir: Path, files: dict[str, Content]) -> None:
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
        install(run_dir / file, files[file])
    for stale in set(client_state_files(run_dir)) - set(files):
        (run_dir / stale).unlink()
