"""A run's directory claimed by a writer other than its trainer (unpacking an archive,
restoring or shipping a campaign's runs): locked as a trainer locks it, refused in one line
where a link stands in for it, a file takes its place, another run holds it or a trainer is
writing it; and a metrics.json without a result moved aside, never lost, before one is written
over it."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path

from shared.runs.files import (
    CLIENT_STATE,
    MODEL_FILE,
    RUN_FILES,
    LockHeld,
    RunFilesError,
    aside_path,
    hold_lock,
    recorded_run_id,
)


class RunBusy(RunFilesError):
    """A run another process (a trainer, a campaign) holds the lock of."""


def move_aside_non_result(metrics: Path) -> None:
    """Before a run's metrics.json is written over one that holds no result (a recorded failure,
    a damaged file): that one is kept beside it, never lost. Call it holding the run's lock."""
    if metrics.exists():
        aside = aside_path(metrics, "replaced")
        os.replace(metrics, aside)
        print(f"note: {metrics} held no result; moved to {aside.name}", file=sys.stderr)


def claim_runs(runs_dir: Path, run_ids: list[str], stack: ExitStack) -> None:
    """Each run's directory, made if need be and locked as a trainer locks it (released when
    `stack` closes); refused, before anything is written, where a link stands in for a run's
    directory or file, where another process trains the run, or where the directory holds
    another run. Every run is checked before the first directory is made."""
    for rid in run_ids:
        check_run_destination(runs_dir / rid, rid)
    # runs whose directory exists first: a trainer may hold one of them, and a refusal then
    # leaves no new directory behind
    for rid in sorted(run_ids, key=lambda rid: not (runs_dir / rid).is_dir()):
        run_dir = runs_dir / rid
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            stack.enter_context(hold_lock(run_dir / ".lock"))
        except LockHeld as held:
            raise RunBusy(
                f"run {rid} is being trained in {run_dir} (its lock is held by pid {held}); try "
                f"again once it has finished or stopped"
            ) from None


def check_run_destination(run_dir: Path, rid: str) -> None:
    """Where run `rid` is unpacked: no link, no file, no other run's directory."""
    # the lock is opened and truncated, the per-client folder written into and pruned: a link
    # at any of these would write or delete elsewhere
    names = (*RUN_FILES, MODEL_FILE, "checkpoint.pt", CLIENT_STATE, ".lock")
    links = [p for p in (run_dir, *(run_dir / f for f in names)) if p.is_symlink()]
    if links:
        raise RunFilesError(f"{links[0]} is a symbolic link; unpack writes runs' files only into real directories")
    if run_dir.exists() and not run_dir.is_dir():
        raise RunFilesError(f"{run_dir} is a file, where run {rid}'s directory goes")
    config = run_dir / "config.yaml"
    if config.is_file() and recorded_run_id(config) != rid:
        raise RunFilesError(f"{run_dir} holds another run's config.yaml; move it away to unpack run {rid}")
