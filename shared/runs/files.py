"""What a run directory's files say and how they are written, without torch.

Planning (every Snakemake start, every SLURM job's), shipping runs and unpacking archives read
a run's metrics.json and config.yaml, write files atomically, set damaged ones aside and take
a run's lock; none of them loads a model, so none of them should pay for importing torch.
shared/runs/directory.py (the writer of a run, with checkpoints) builds on these, and
shared/runs/locking.py claims a run's directory for a writer other than its trainer. A finished
run's files travel (shared.archive, shared.campaign's state) as tar members checked here: their
names and size limits, checksums, and that they are the run their directory names.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tarfile
import time
from pathlib import Path

import yaml

from shared.config.schema import ConfigError, RunConfig, from_dict, run_id
from shared.runs.strict_text import StrictTextError, strict_json, strict_yaml

FINAL = ("completed", "diverged", "suspect")  # statuses that are results: neither retried nor re-trained
CLIENT_STATE = "client_state"  # per-client state files that checkpoints name (shared/runs/tensor_files.py)
# A per-client state file's name in CLIENT_STATE: the state's name (a method attribute), the
# client, and the round that wrote it; the campaign carries the files of this form
CLIENT_STATE_NAME = re.compile(r"[A-Za-z0-9_]{1,64}-[0-9]{1,9}-r[0-9]{1,9}\.pt")  # short: a path stays far below 255
CLIENT_STATE_MANIFEST = "client_state_files"  # what a checkpoint holds in place of a method's per-client state


def client_state_name(state: str, client: int, round: int) -> str:
    return f"{state}-{client}-r{round}.pt"


class RunFilesError(Exception):
    """A run's files, or where they go, that a writer other than the trainer refuses; one line.
    `reason`: the line without the file's name (a run's own directory names the file itself)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


def refused(path: Path, reason: str) -> RunFilesError:
    return RunFilesError(f"{printable(path)}: {reason}", reason)


class LockHeld(Exception):
    """Another process holds a run's lock; the message is its pid (or "unknown")."""


def is_final(status) -> bool:
    return isinstance(status, str) and status.split(":")[0] in FINAL


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def summary_problem(summary) -> str | None:
    """What makes a metrics.json unusable as a run's summary (None: nothing). The fields the
    tables read must have their types, so that a tampered file is set aside here instead of
    failing every table that reads it."""
    if not isinstance(summary, dict):
        return "not a JSON object"
    if not isinstance(summary.get("status"), str) or not isinstance(summary.get("run_id"), str):
        return "status and run_id must be strings"
    numbers = ("final_acc", "best_acc", "wall_time_s")
    if any(not is_number(summary.get(key)) and summary.get(key) is not None for key in numbers):
        return f"{', '.join(numbers)} must be numbers or null"
    lists = ("eval_rounds", "global_acc", "global_loss", "local_acc")
    if any(not isinstance(summary.get(key, []), list) for key in lists):
        return f"{', '.join(lists)} must be lists"
    if not isinstance(summary.get("rounds_to_target", {}), dict):
        return "rounds_to_target must be a mapping"
    return None


def history_problem(history, rounds: int) -> str | None:
    """What makes a run's history (a checkpoint's, metrics.jsonl's) unusable (None: nothing): one
    record per round done."""
    if not isinstance(history, list) or len(history) > rounds:
        return f"its history is not a list of at most {rounds} rounds"
    for number, record in enumerate(history, 1):
        if not (isinstance(record, dict) and same_round(record.get("round"), number)) or not is_number(
            record.get("train_loss")
        ):
            return f"its history's record {number} is malformed"
    return None


def same_round(value, number: int) -> bool:
    """`value` is the round `number`, an integer (a tensor, which compares as a tensor, is not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value == number


def recorded_run_id(config: Path) -> str | None:
    """The run id a run's config.yaml names (None: it cannot be read, or names none)."""
    return named_run_id(config.read_bytes())


def named_run_id(config: bytes) -> str | None:
    """The run id the text of a run's config.yaml names (None: it is not YAML, or names none)."""
    try:
        recorded = strict_yaml(config)
    except (yaml.YAMLError, ValueError):  # ValueError: not UTF-8
        return None
    return recorded.get("run_id") if isinstance(recorded, dict) else None


# A folder whose files are written elsewhere before the rename into it -> that elsewhere, on the
# same filesystem (`stage_elsewhere`): a folder that is returned as it is at any moment (a GPU
# session's OUTDIR, killed from outside) then never holds a half-written temporary file.
STAGING: dict[Path, Path] = {}


def stage_elsewhere(folder: Path, staging: Path) -> None:
    """This process writes `folder`'s files in `staging` (made if absent) before renaming them into it."""
    Path(staging).mkdir(parents=True, exist_ok=True)
    STAGING[Path(folder).resolve()] = Path(staging).resolve()


def temporary_path(path: Path, name: str | None = None) -> Path:
    """Where this process writes `path` before renaming it: per process, so two writers never
    share one; hidden, and removed on a run's next start if a kill leaves it (`claim`); in the
    folder's staging folder where it has one (`stage_elsewhere`). `name`: another name than
    the default."""
    path = Path(path)
    folder = STAGING.get(path.parent.resolve(), path.parent) if STAGING else path.parent
    return folder / (name or f".{path.name}.{os.getpid()}.tmp")


TEMPORARY = re.compile(r"\.(.+)\.([0-9]{1,10})\.(tmp|old)")  # `temporary_path`'s names and folders': the owner's pid


def is_alive(pid: int) -> bool:
    """Whether a process of this id runs (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0
    return True


def remove_dead_temporaries(folder: Path, name: str | None = None, prefix: str | None = None) -> None:
    """The temporary files and folders a killed writer left in `folder` (of `name` only, or of
    names starting with `prefix` only, where given): each names its owner's pid, and one whose
    owner runs is left to it."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        match = TEMPORARY.fullmatch(path.name)
        if not match or (name is not None and match.group(1) != name) or is_alive(int(match.group(2))):
            continue
        if prefix is not None and not match.group(1).startswith(prefix):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def write_atomically(path: Path, write) -> None:
    """`write(tmp)` then rename: readers see the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as exc:  # a full disk, a kill: no partial file is left for the next start to clear
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write() names no file: the message does
            exc.filename = str(path)
        raise


def write_json(obj, path: Path) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=1)))


def write_history(history: list[dict], path: Path) -> None:
    """metrics.jsonl: one JSON record per round (`read_history` reads it)."""
    write_atomically(path, lambda tmp: tmp.write_text("".join(json.dumps(h) + "\n" for h in history)))


def write_folder_atomically(out: Path, write) -> None:
    """`write(tmp)` fills a hidden folder beside `out`, which then takes its place: a build that
    fails (a full disk, a bug) leaves the old folder or none, never a half-written one."""
    out = Path(out)
    tmp, old = out.with_name(f".{out.name}.{os.getpid()}.tmp"), out.with_name(f".{out.name}.{os.getpid()}.old")
    remove_dead_temporaries(out.parent, out.name)  # a killed build's; a live one's stays
    try:
        write(tmp)
        if out.exists():
            os.replace(out, old)
        try:
            os.replace(tmp, out)
        except OSError:  # the old folder goes back rather than being lost
            if old.exists() and not out.exists():
                os.replace(old, out)
            raise
    except OSError as exc:
        if exc.filename is None:  # a failed write() names no file: the message names the folder
            exc.filename = str(out)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def aside_path(path: Path, label: str) -> Path:
    """A free name beside `path` to move it to: `<file>.<label>-<time>`, with `-1`, `-2`, ...
    when a file was set aside under that name in the same second (never over an earlier one).
    The caller holds the run's lock, so no other process takes the name in between."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.{label}-{stamp}")
    n = 0
    while aside.exists() or aside.is_symlink():
        n += 1
        aside = path.with_name(f"{path.name}.{label}-{stamp}-{n}")
    return aside


def move_aside_checkpoint(run_dir: Path) -> list[Path]:
    """A run's checkpoint, with its history and per-client state, moved to names of their own
    beside them (`aside_path`, label "replaced") before another checkpoint takes its place:
    never lost. Returns where they went ([]: no checkpoint there). Call it holding the run's lock."""
    if not (run_dir / "checkpoint.pt").is_file():
        return []
    moved = []
    for name in ("checkpoint.pt", "metrics.jsonl", CLIENT_STATE):
        if (run_dir / name).exists():
            moved.append(aside_path(run_dir / name, "replaced"))
            os.replace(run_dir / name, moved[-1])
    return moved


def hold_lock(path: Path):
    """The open, flock-ed file `path`, holding this process's pid, for as long as the handle
    stays open (the kernel releases it when the process dies, so a crash leaves no stale
    lock). Raises LockHeld with the holder's pid when another process holds it."""
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise LockHeld(holder) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def rounds_done(run_dir: Path) -> int:
    """Rounds of a run in progress (its checkpoint's history is metrics.jsonl); -1: no checkpoint."""
    if not (run_dir / "checkpoint.pt").is_file() or not (run_dir / "metrics.jsonl").is_file():
        return -1
    return history_rounds((run_dir / "metrics.jsonl").read_bytes())


def history_rounds(metrics_jsonl: bytes) -> int:
    """The rounds a run's history (metrics.jsonl, a line per round) records."""
    return metrics_jsonl.count(b"\n")


# --- a run's files as its readers see them (tables, figures, shared.curves), finished or not ----


def read_text(path: Path, limit: int, parse):
    """`parse` of a run's file read whole, at most `limit` bytes; RunFilesError in one line where
    it is larger, is not the text it should be, or nests deeper than text of runs does."""
    data = read_at_most(path, limit)
    if data is None:
        raise refused(path, f"is not a regular file of at most {megabytes(limit)}, as a run writes")
    try:
        return parse(data)
    except (ValueError, RecursionError, yaml.YAMLError) as exc:
        raise refused(path, f"is not what a run writes ({printable(' '.join(str(exc).split())[:100])})") from None


def read_run_config(run_dir: Path) -> dict:
    """A run's config.yaml as written; {} where there is none (not started)."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return {}
    config = read_text(path, MAX_CONFIG_BYTES, strict_yaml) or {}
    if not isinstance(config, dict):
        raise refused(path, "is not a mapping of a run's config")
    return config


def read_summary(run_dir: Path, name: str = "metrics.json") -> dict:
    """A run's metrics.json (its summary, written last), or the copy of it named `name`;
    FileNotFoundError where the run has none."""
    path = run_dir / name
    summary = read_text(path, MAX_SMALL_BYTES, strict_json)
    if not isinstance(summary, dict):
        raise refused(path, "is not a run's summary (a JSON object)")
    return summary


def read_history(run_dir: Path) -> list[dict] | None:
    """The records of a run's metrics.jsonl, which the trainer rewrites after every round; None
    where there is none. A last line that is not JSON is left out: the trainer replaces the file
    atomically, but a copy may have been taken mid-write, its last line cut short. Any other line
    that is not JSON is damage: RunFilesError, naming the line."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return None
    lines = [line for line in read_text(path, MAX_MEMBER_BYTES, bytes.decode).splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = strict_json(line)
        except StrictTextError as exc:  # whole, but not as the trainer writes it: a key twice, nested deep
            raise RunFilesError(f"{printable(path)}: line {number}: {exc}") from None
        except (ValueError, RecursionError):
            if number < len(lines):
                raise RunFilesError(f"{printable(path)}: line {number} is not JSON") from None
            continue
        if not isinstance(record, dict):
            raise RunFilesError(f"{printable(path)}: line {number} is not a round's record")
        records.append(record)
    return records


# --- a finished run's files, as they travel ----------------------------------------------------

# What a finished run keeps, in the order packed; metrics.json, whose presence makes a run
# finished for the workflow, is written last on unpacking.
RUN_FILES = ("config.yaml", "partition.csv", "metrics.jsonl", "metrics.json")
MODEL_FILE = "model.pt"
# An unpacked member's size limit: a ResNet-50's model.pt is about 100 MB, a run's other files
# are far smaller; a bigger member is a damaged or hostile archive (a decompression bomb).
MAX_MODEL_BYTES = 2 * 1024**3
# partition.csv, metrics.jsonl: some 65 kB for 100 rounds, 10 MB for 10,000 clients of 200 classes
MAX_MEMBER_BYTES = 32 * 1024**2
SMALL_FILES = ("config.yaml", "metrics.json")  # read into memory to check a run's identity
# metrics.json: some 9 kB for 100 rounds; JSON is parsed whole, and takes up to 24 times its text
MAX_SMALL_BYTES = 4 * 1024**2
KEPT = ".metrics.json.kept"  # a copy of a finished run's metrics.json (shared/runs/directory.py `keep`)
MAX_CONFIG_BYTES = 2**16  # a run's config.yaml: some 2 kB; YAML parses at about 1 MB a second
RUN_ID = re.compile(r"[0-9a-f]{16}")  # a run directory's name (shared.config.schema.run_id)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_state(run_dir: Path) -> str:
    """finished (a metrics.json is there: a result, or a recorded failure, which is not final
    but retried: FINAL), unfinished (started, possibly with a checkpoint)
    or absent."""
    if (run_dir / "metrics.json").is_file():
        return "finished"
    return "unfinished" if run_dir.is_dir() else "absent"


def kept_at(run_dir: Path) -> float | None:
    """The time of the finished run's kept copy of its metrics.json (KEPT, written as it finished)
    where metrics.json is that copy byte for byte; None where there is no such copy. A job of the
    run puts it back rather than train the run again (a group job does so beside the runs it
    trains, and Snakemake then touches metrics.json)."""
    summary, kept = run_dir / "metrics.json", run_dir / KEPT
    try:
        if (
            kept.stat().st_size == summary.stat().st_size <= MAX_SMALL_BYTES
            and kept.read_bytes() == summary.read_bytes()
        ):
            return kept.stat().st_mtime
    except OSError:  # no kept copy, or no metrics.json
        pass
    return None


def finished_at(run_dir: Path) -> float:
    """When the run's result was written: its kept copy's time (`kept_at`), else its
    metrics.json's; OSError where it has no metrics.json."""
    written = (run_dir / "metrics.json").stat().st_mtime
    kept = kept_at(run_dir)
    return written if kept is None else min(written, kept)


def holds_result(run_dir: Path) -> bool:
    """Whether unpacking leaves this run as it is: its metrics.json is readable and records a
    result (completed, diverged, suspect). A recorded failure or a damaged file is replaced by
    the archive's run, and moved aside first (shared.archive `commit`)."""
    try:
        metrics = read_at_most(run_dir / "metrics.json", MAX_SMALL_BYTES)
    except OSError:
        return False
    return metrics is not None and records_result(metrics)


def read_at_most(path: Path, limit: int, follow_links: bool = True) -> bytes | None:
    """A regular file's bytes, or None where it holds more than `limit` or is no regular file (a
    link to a device or a pipe, which could be endless or never answer): never more than
    limit + 1 bytes read, and opened without waiting on a pipe; `follow_links=False`: a link
    itself is refused (OSError)."""
    flags = os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    with open(path, "rb", opener=lambda p, mode: os.open(p, mode | flags)) as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def records_result(metrics: bytes) -> bool:
    """Whether a metrics.json's bytes are a run's summary recording a result (the workflow
    neither retries nor retrains one: FINAL), not a failure."""
    try:
        summary = strict_json(metrics)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return summary_problem(summary) is None and is_final(summary["status"])


def records_failure(metrics: bytes) -> bool:
    """Whether a metrics.json's bytes are a summary recording a failure (status failed: ...)."""
    try:
        summary = strict_json(metrics)
    except (ValueError, RecursionError):
        return False
    return summary_problem(summary) is None and summary["status"].startswith("failed")


def run_status(metrics: bytes) -> str:
    try:
        return str(json.loads(metrics).get("status", "unknown"))
    except (ValueError, AttributeError, RecursionError):
        return "unreadable metrics.json"


def run_members(run_dir: Path, folder: str, names: tuple[str, ...]) -> list[tuple[str, bytes, float]]:
    """(folder/name, bytes, mtime) of the run's files among `names` that exist, in that order."""
    return [
        (f"{folder}/{name}", (run_dir / name).read_bytes(), (run_dir / name).stat().st_mtime)
        for name in names
        if (run_dir / name).is_file()
    ]


def add_member(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(mtime), 0o644
    tar.addfile(info, io.BytesIO(data))


def check_identity(run: str, small: dict[str, bytes]) -> None:
    """A run's files are the run its directory names: metrics.json says so, and its config.yaml
    hashes to it (a file moved from another run, or edited, would be installed as finished)."""

    metrics, config = small.get(f"runs/{run}/metrics.json"), small.get(f"runs/{run}/config.yaml")
    try:
        recorded = strict_json(metrics)["run_id"] if metrics is not None else run
        values = strict_yaml(config) if config is not None else None
        hashed = run_id(from_dict(RunConfig, {k: v for k, v in values.items() if k != "run_id"})) if values else run
        named = values.get("run_id", run) if values else run
    except StrictTextError as exc:
        raise RunFilesError(f"run {run}: its metrics.json or config.yaml is refused: {exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, yaml.YAMLError, ConfigError):
        raise RunFilesError(
            f"run {run}: its metrics.json or config.yaml cannot be read; the archive is damaged"
        ) from None
    if not recorded == hashed == named == run:
        raise RunFilesError(
            f"run {run}: its files belong to another run (metrics.json: {str(recorded)[:16]}, config.yaml "
            f"hashes to {hashed}); the archive is not what pack wrote"
        )


def printable(text) -> str:
    """Text as a terminal may show it: control characters (from another machine's files, which
    could move the cursor over an `error:` line) written as escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"
