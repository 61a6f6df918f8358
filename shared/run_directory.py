"""A run's output directory: one writer at a time, every file written atomically, and state
that survives a crash (or a corrupt file) without being trusted blindly.

    config.yaml       the resolved config (and its run id); a directory holds one run only
    partition.csv     client-by-class sample counts
    metrics.jsonl     one JSON record per round
    metrics.json      the summary, written last: its presence means the run is finished
    checkpoint.pt     after every round; removed once the run completes
    model.pt          the final global model
    .lock             held (flock) by the process writing the run; released when it exits

Checkpoints hold tensors and plain types only and are read with `weights_only=True`: a planted
pickle cannot run code. A file that cannot be read is moved aside (kept for inspection, named
`<file>.corrupt-<time>`), said in one line, and the run goes on from the last good state.
"""
from __future__ import annotations

import fcntl
import json
import os
import pickle
import sys
import time
from pathlib import Path

import torch
import yaml

from shared.config import ConfigError, RunConfig, identity, run_id, to_dict


class RunDirectoryError(ConfigError):
    """The output directory cannot take this run (another writer, another run's files)."""


def temporary_path(path: Path) -> Path:
    """Where this process writes `path` before renaming it: per process, so two writers never
    share one; hidden, and removed on a run's next start if a kill leaves it (`claim`)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_atomically(path: Path, write) -> None:
    """`write(tmp)` then rename: readers see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    write(tmp)
    os.replace(tmp, path)


def write_json(obj, path: Path) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=1)))


def write_history(history: list[dict], path: Path) -> None:
    write_atomically(path, lambda tmp: tmp.write_text("".join(json.dumps(h) + "\n" for h in history)))


def save_tensors(obj, path: Path) -> None:
    write_atomically(path, lambda tmp: torch.save(obj, tmp))


def load_tensors(path: Path, device: torch.device | str = "cpu"):
    """torch.load of tensors and plain types only; anything else is refused."""
    return torch.load(path, map_location=device, weights_only=True)


CLIENT_STATE = "client_state"  # per-client state files that checkpoints name (shared/client_state.py)


def client_state_path(run_path: Path, name: str) -> Path:
    return Path(run_path) / CLIENT_STATE / name


def prune_client_states(run_path: Path, keep: set[str]) -> None:
    """Remove the per-client state files not in `keep` (and a kill's temporary files); with
    nothing to keep (a finished run), the folder too."""
    folder = Path(run_path) / CLIENT_STATE
    if not folder.is_dir():
        return
    for file in folder.iterdir():
        if file.name not in keep:
            file.unlink(missing_ok=True)
    if not keep:
        folder.rmdir()


class RunDirectory:
    def __init__(self, path: str | Path, cfg: RunConfig):
        self.path = Path(path)
        self.cfg, self.run_id = cfg, run_id(cfg)
        self.summary, self.checkpoint = self.path / "metrics.json", self.path / "checkpoint.pt"
        self.lock_file = None

    # --- one writer -------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold the directory's lock for the life of this process (the kernel releases it when
        the process dies, so a crash leaves no stale lock)."""
        self.path.mkdir(parents=True, exist_ok=True)
        handle = open(self.path / ".lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise RunDirectoryError(f"{self.path}: another process (pid {holder}) is writing this run; "
                                    f"wait for it or stop it") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self.lock_file = handle

    def unlock(self) -> None:
        if self.lock_file is not None:
            self.lock_file.close()
            self.lock_file = None

    # --- what the directory already holds -----------------------------------------------------
    def set_aside(self, path: Path, why: str) -> None:
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(path, aside)
        print(f"warning: {path} {why}; moved to {aside.name}, continuing from the last good state", file=sys.stderr)

    def claim(self) -> dict | None:
        """The finished run's summary if this directory holds it; else None, after refusing a
        directory of another run and clearing what a crash left behind."""
        for stale in self.path.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
        config = self.path / "config.yaml"
        if config.exists():
            try:
                other = (yaml.safe_load(config.read_text()) or {}).get("run_id")
            except yaml.YAMLError:
                other = None
            if other not in (None, self.run_id):
                raise RunDirectoryError(f"{self.path} holds run {other}, another config than this one ({self.run_id}); "
                                        f"use another output directory (it is never overwritten)")
        done = self.read_summary()
        if done is not None:
            self.checkpoint.unlink(missing_ok=True)  # a kill between the summary and this removal
            return done
        write_atomically(config, lambda tmp: tmp.write_text(
            yaml.safe_dump({"run_id": self.run_id, **to_dict(self.cfg)}, sort_keys=False)))
        return None

    def read_summary(self) -> dict | None:
        if not self.summary.exists():
            return None
        try:
            done = json.loads(self.summary.read_text())
            if not isinstance(done, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            self.set_aside(self.summary, f"is unreadable ({exc})")
            return None
        if done.get("run_id") != self.run_id:
            raise RunDirectoryError(f"{self.summary} belongs to run {done.get('run_id')}, not {self.run_id}; "
                                    f"use another output directory")
        return done

    # --- checkpoints ---------------------------------------------------------------------------
    def load_checkpoint(self, device: torch.device) -> dict | None:
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
        if state.get("identity") != identity(self.cfg):
            raise RunDirectoryError(f"{self.checkpoint} belongs to a different config; remove it or use another "
                                    f"output directory")
        return state

    def save_checkpoint(self, state: dict) -> None:
        save_tensors({"identity": identity(self.cfg), **state}, self.checkpoint)

    def save_round(self, history: list[dict], state: dict) -> None:
        self.save_checkpoint({"history": history, **state})
        write_history(history, self.path / "metrics.jsonl")

    def finish(self, summary: dict, model_state: dict) -> None:
        """The final model, then the summary (the run counts as finished from here), then the
        checkpoint goes."""
        save_tensors(model_state, self.path / "model.pt")
        write_json(summary, self.summary)
        self.checkpoint.unlink(missing_ok=True)
