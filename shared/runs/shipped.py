"""Shipped runs (results/shipped/runs/, tracked): runs finished on other machines, which
`train`, `status` and the workflow take as finished, copied into results/runs/ on demand."""

from __future__ import annotations

import shutil
import sys
from contextlib import ExitStack
from pathlib import Path

from shared.runs.files import (
    CLIENT_STATE,
    RUN_FILES,
    RunFilesError,
    holds_result,
    remove_dead_temporaries,
    write_atomically,
)
from shared.runs.locking import claim_runs, move_aside_non_result

SHIPPED = Path("results") / "shipped"


def is_finished(rid: str, runs_dir: Path, shipped_runs: Path) -> bool:
    """A result here or shipped; a recorded failure is trained again, as the workflow does."""
    return holds_result(runs_dir / rid) or holds_result(shipped_runs / rid)


def put_finished(run_dir: Path, files: dict[str, bytes]) -> bool:
    """A finished run's text files into run_dir (metrics.json last: a kill leaves no run that
    looks finished), its checkpoint and per-client state there then stale and removed; False, writing nothing,
    where run_dir holds a result already (it is never overwritten). A recorded failure there is
    moved aside, as unpacking an archive does. Call it holding the run's lock (`claim_runs`)."""
    if holds_result(run_dir):
        return False
    remove_dead_temporaries(run_dir)  # a killed import's or copy's
    for file in RUN_FILES:
        if file in files:
            if file == "metrics.json":
                move_aside_non_result(run_dir / file)
            write_atomically(run_dir / file, lambda tmp, c=files[file]: tmp.write_bytes(c))
    (run_dir / "checkpoint.pt").unlink(missing_ok=True)
    shutil.rmtree(run_dir / CLIENT_STATE, ignore_errors=True)  # what only the checkpoint needed
    return True


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
            copied += put_finished(
                runs_dir / rid, {f: (source / f).read_bytes() for f in RUN_FILES if (source / f).is_file()}
            )
    return copied
