"""A run's output directory: one writer at a time, every file written atomically, and state
that survives a crash (or a corrupt file) without being trusted blindly.

    config.yaml       the resolved config (and its run id); a directory holds one run only
    partition.csv     client-by-class sample counts
    metrics.jsonl     one JSON record per round
    metrics.json      the summary, written last: its presence means the run is finished
    checkpoint.pt     after every round; removed once the run completes
    model.pt          the final global model
    failure.json      the error of a run whose last attempt raised (`RunDirectory.record_failure`)
    .metrics.json.kept  a copy of a finished run's metrics.json (`keep`: shared/run.py's runs)
    .lock             held (flock) by the process writing the run; released when it exits

Nothing is changed before the lock is held and the directory is known to hold this run (or
nothing): a directory of another run, or one holding files no run writes, is refused. A
finished run (status completed, diverged or suspect) is never changed. Checkpoints hold tensors
and plain types only and are read with `weights_only=True`: a planted pickle cannot run code.
A file that cannot be read, or that does not fit the run (a wrongly shaped tensor, a malformed
history, a field of the wrong type), is moved aside (kept for inspection, named
`<file>.corrupt-<time>`), said in one line, and the run goes on from the last good state; a
recorded failure is moved aside the same way (`metrics.json.failed-<time>`) when the run is
tried again.
"""

from __future__ import annotations

import copy
import errno
import math
import os
import pickle
import re
import sys
import time
import traceback
from pathlib import Path

import torch
import yaml

from shared.config.schema import ConfigError, RunConfig, excerpt, identity, run_id, to_dict

# torch-free (shared/runs/files.py: planning and shipping read runs without torch); the kill
# matrix (benchmarks/resume_matrix.py) patches write_atomically here, in files.py and in tensor_files.py
from shared.runs.files import (
    KEPT,
    LockHeld,
    RunFilesError,
    aside_path,
    history_problem,
    hold_lock,
    is_final,
    is_number,
    read_run_config,
    read_summary,
    summary_problem,
    write_atomically,
    write_history,
    write_json,
)
from shared.runs.metrics import summarize
from shared.runs.partition_files import PARTITION_FILE, write_partition
from shared.runs.provenance import environment
from shared.runs.strict_text import is_plain
from shared.runs.tensor_files import (
    load_tensors,
    prune_client_states,
    restore,
    save_checkpoint,
    save_tensors,
)

# Every name a run directory may hold: its files, what `set_aside` and a kill leave, an unpack's staging
RUN_FILE = re.compile(
    r"(\.?(config\.yaml|partition\.csv|metrics\.jsonl?|checkpoint\.pt|model\.pt|failure\.json"
    r"|metrics\.json\.kept|rerun|client_state|tensorboard)(\.(corrupt|failed|replaced)-[0-9-]+|\.[0-9]+\.tmp|\.unpack-[0-9]+)?|\.lock)"
)
# errors that mean the disk (or the quota, or the file size limit) is full: freeing space is the fix
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class RunDirectoryError(ConfigError):
    """The output directory cannot take this run (another writer, another run's files)."""


def check_output(path: str | Path) -> None:
    """An output directory that can be made and written, checked before any data loads: not a
    file, not below a file, writable."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunDirectoryError(f"--out {path} is a file, not a directory")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise RunDirectoryError(f"--out {path}: {existing} is a file, so no directory can be made below it")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunDirectoryError(f"--out {path}: {existing} is not writable; choose another --out")


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def write_error(exc: OSError) -> str:
    """One line for a failed write: a full disk says what to do."""
    where = f"{exc.filename}: " if exc.filename else ""
    if is_disk_full(exc):
        return (
            f"{where}no space left ({exc.strerror}); free space and run the same command again: "
            f"it resumes from its last checkpoint"
        )
    return f"{where}{exc.strerror or exc}"


class RunDirectory:
    def __init__(self, path: str | Path, cfg: RunConfig, keep: bool = False):
        """`keep`: keep a copy of the finished run's metrics.json (`keep`), for a later `restore_kept`."""
        self.path = Path(path)
        self.keeps = keep
        self.cfg, self.run_id = cfg, run_id(cfg)
        self.summary, self.checkpoint = self.path / "metrics.json", self.path / "checkpoint.pt"
        self.config = self.path / "config.yaml"
        self.lock_file = None
        self.identified = False  # config.yaml names this run: a file of another run in it is misplaced

    # --- one writer -------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold the directory's lock for the life of this process (the kernel releases it when
        the process dies, so a crash leaves no stale lock)."""
        self.refuse_foreign_files()
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self.lock_file = hold_lock(self.path / ".lock")
        except LockHeld as held:
            raise RunDirectoryError(
                f"{self.path}: another process (pid {excerpt(str(held))}) is writing this run; wait for it or stop it"
            ) from None

    def unlock(self) -> None:
        if self.lock_file is not None:
            self.lock_file.close()
            self.lock_file = None

    def refuse_foreign_files(self) -> None:
        """A directory holding files no run writes is not an output directory: nothing is
        written into it, not even the lock."""
        if not self.path.is_dir() or self.config.exists():
            return
        foreign = sorted(p.name for p in self.path.iterdir() if not RUN_FILE.fullmatch(p.name))
        if foreign:
            raise RunDirectoryError(
                f"{self.path} is not a run directory (it holds {excerpt(foreign)}); "
                f"use an empty or a new output directory"
            )

    # --- what the directory already holds -----------------------------------------------------
    def set_aside(self, path: Path, why: str, label: str = "corrupt") -> Path:
        """Move `path` to a name of its own beside it (never over an earlier one), saying so."""
        aside = aside_path(path, label)
        os.replace(path, aside)
        print(f"warning: {path} {why}; moved to {aside.name}, continuing from the last good state", file=sys.stderr)
        return aside

    def claim(self, restore: bool = False) -> dict | None:
        """The finished run's summary if this directory holds it; else None, after refusing a
        directory of another run and clearing what a crash left behind. Call it holding the lock.
        `restore`: a finished run whose metrics.json is gone is put back from its kept copy."""
        self.check_identity()
        for stale in self.path.glob(".*.tmp"):  # ours (RUN_FILE): the directory is this run's
            if RUN_FILE.fullmatch(stale.name):
                stale.unlink(missing_ok=True)
        done = self.read_summary()
        if done is not None and not is_final(done["status"]):
            self.set_aside(
                self.summary, f"records a failure ({excerpt(done['status'])}); the run is tried again", label="failed"
            )
            done = None
        if done is None and restore:
            done = self.restore_kept()
        if done is not None:
            self.keep(done)
            self.checkpoint.unlink(missing_ok=True)  # a kill between the summary and these removals
            prune_client_states(self.path, keep=set())
            return done
        write_atomically(
            self.config,
            lambda tmp: tmp.write_text(yaml.safe_dump({"run_id": self.run_id, **to_dict(self.cfg)}, sort_keys=False)),
        )
        return None

    def check_identity(self) -> None:
        """Refuse a directory whose config.yaml names another run; set aside one that cannot
        be read (metrics.json and the checkpoint still carry the run's identity)."""
        if not self.config.exists():
            return
        try:
            other = read_run_config(self.path).get("run_id")
        except RunFilesError as exc:
            self.set_aside(self.config, f"{exc.reason}; it is written again")
            return
        if not isinstance(other, str):
            self.set_aside(self.config, "names no run id; it is written again")
        elif other != self.run_id:
            raise RunDirectoryError(
                f"{self.path} holds run {excerpt(other)}, another config than this one "
                f"({self.run_id}); use another output directory (it is never overwritten)"
            )
        else:
            self.identified = True

    def read_summary(self, name: str = "metrics.json") -> dict | None:
        """metrics.json (or its kept copy, `name`) if it is a summary of this run; one that
        cannot be read is set aside, one of another run refused."""
        path = self.path / name
        if not path.exists():
            return None
        try:
            done = read_summary(self.path, name)
        except RunFilesError as exc:
            self.set_aside(path, exc.reason)
            return None
        if problem := summary_problem(done):
            self.set_aside(path, f"is not a run's summary ({problem})")
            return None
        if done["run_id"] != self.run_id and self.identified:
            self.set_aside(path, f"belongs to run {excerpt(done['run_id'])}, in the directory of run {self.run_id}")
            return None
        if done["run_id"] != self.run_id:
            raise RunDirectoryError(
                f"{path} belongs to run {excerpt(done['run_id'])}, not {self.run_id}; use another output directory"
            )
        return done

    def restore_kept(self) -> dict | None:
        """The kept copy of the finished run's metrics.json, put back (Snakemake deleted it
        after a job was killed or a sibling failed although the run had finished)."""
        kept = self.read_summary(KEPT)
        if kept is None or not is_final(kept["status"]):
            return None
        write_json(kept, self.summary)
        print(f"run {self.run_id}: finished before; its metrics.json put back from {KEPT}", file=sys.stderr)
        return {**kept, "restored": KEPT}

    # --- checkpoints ---------------------------------------------------------------------------
    def load_checkpoint(self, device: torch.device) -> dict | None:
        """The last checkpoint if it is a checkpoint of this run; anything else is set aside."""
        if not self.checkpoint.exists():
            return None
        try:
            state = load_tensors(self.checkpoint, device)
        except pickle.UnpicklingError:  # garbage, or objects other than tensors: never unpickled as such
            self.set_aside(self.checkpoint, "holds something other than tensors and plain values (refused unread)")
            return None
        except (EOFError, RuntimeError, OSError, ValueError) as exc:
            self.set_aside(self.checkpoint, f"is unreadable ({type(exc).__name__})")
            return None
        problem = checkpoint_problem(state, self.cfg)
        if problem:
            self.set_aside(self.checkpoint, problem)
            return None
        return state

    def resume(self, model: torch.nn.Module, method, device: torch.device) -> tuple[list[dict], float]:
        """The history and time so far, with the model's and the method's state restored from
        the last checkpoint (the method's per-client state from the files it names:
        shared/runs/tensor_files.py); ([], 0.0) and both left as they were when there is none,
        or when it does not fit them (a tensor of another shape, a missing key, a per-client
        state file that is gone: set aside)."""
        state = self.load_checkpoint(device)
        if state is None:
            return [], 0.0
        fresh = copy.deepcopy(model.state_dict()), copy.deepcopy(method.state_dict())
        try:
            model.load_state_dict(state["global"])
            method.load_state_dict(restore(state["method"], self.path))
        except (RuntimeError, KeyError, TypeError, ValueError, IndexError, AttributeError, OSError) as exc:
            model.load_state_dict(fresh[0])  # a failed load may have copied some tensors already
            method.load_state_dict(fresh[1])
            detail = " ".join(str(exc).replace("Error(s) in loading state_dict for", "").split())
            self.set_aside(
                self.checkpoint, f"does not fit this run's model or method ({type(exc).__name__}: {excerpt(detail)})"
            )
            return [], 0.0
        # metrics.jsonl follows the checkpoint it was written after: a kill between the two leaves
        # it a round short, and a last round's checkpoint goes straight to `finish`
        write_history(state["history"], self.path / "metrics.jsonl")
        return state["history"], state["elapsed"]

    def save_partition(self, counts, class_names: list[str]) -> None:
        """partition.csv: the clients' training samples (rows) of each class (columns)."""
        write_partition(self.path / PARTITION_FILE, counts, class_names)

    def save_round(self, history: list[dict], state: dict) -> None:
        """The round's checkpoint (`state`: the global model's, the method's and the time so far;
        the method's per-client state in files of its own, `save_checkpoint`), then metrics.jsonl."""
        save_checkpoint(
            {"identity": identity(self.cfg), "history": history, **state}, self.checkpoint, len(history) - 1
        )
        write_history(history, self.path / "metrics.jsonl")

    def keep(self, summary: dict) -> None:
        """A copy of a finished run's metrics.json, from which `restore_kept` puts it back."""
        if self.keeps and is_final(summary["status"]) and "restored" not in summary:
            write_json(summary, self.path / KEPT)

    def finish(self, summary: dict, model_state: dict) -> None:
        """The final model, then the summary (the run counts as finished from here), then the
        checkpoint goes."""
        save_tensors(model_state, self.path / "model.pt")
        write_json(summary, self.summary)
        self.keep(summary)
        self.checkpoint.unlink(missing_ok=True)
        prune_client_states(self.path, keep=set())

    def record_failure(self, exc: BaseException, attempt: int | None = None) -> dict:
        """metrics.json for a run that raised, status `failed: ...`: the table marks its cell
        instead of stopping. For a job's last `attempt`, failure.json beside it holds the error."""
        summary = summarize([], self.cfg, f"failed: {type(exc).__name__}: {exc}", 0.0, {"environment": environment()})
        write_json(summary, self.summary)
        if attempt is None:
            return summary
        failure = {
            "run_id": self.run_id,
            "status": summary["status"],
            "attempt": attempt,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "error": "".join(traceback.format_exception(exc)),
        }
        write_json(failure, self.path / "failure.json")
        print(
            f"run {self.run_id} failed on its last attempt ({attempt}); recorded in metrics.json and failure.json",
            file=sys.stderr,
        )
        return summary


def checkpoint_problem(state, cfg: RunConfig) -> str | None:
    """Why a loaded checkpoint cannot be resumed from (None: it can)."""
    if not isinstance(state, dict) or not {"identity", "history", "global", "method", "elapsed"} <= set(state):
        return "is not a checkpoint of a run (keys missing)"
    if not is_plain(state["identity"]) or not is_plain(state["history"]):
        return "holds values other than a config's and a history's where they belong"
    if state["identity"] != identity(cfg):
        return "belongs to a different config"
    if not isinstance(state["global"], dict) or not isinstance(state["method"], dict):
        return "holds no model or method state"
    if not is_number(state["elapsed"]) or not math.isfinite(state["elapsed"]):
        return "holds no elapsed time"
    return history_problem(state["history"], cfg.federation.rounds)
