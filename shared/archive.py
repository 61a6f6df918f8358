"""Finished runs in one file, to move them between machines (a GPU cluster and a laptop, a
colleague's checkout, a paper's supplementary material) without rerunning anything.

    python -m shared.archive pack TARGET... -o FILE [--force] [--models] [--scale smoke|small|paper]
                                           [--config scale=smoke ...]
    python -m shared.archive unpack FILE [--into DIR]

A TARGET is written as for Snakemake: `papers/fedssd/table2`, `papers/fedcad/fig4`,
`papers/fedcad/search_fedprox`, a whole paper `papers/fedssd` (or `fedssd`: its tables and
figures) or `fedssd_searches`. `pack` finds the runs the targets need at the scale (the run ids
are what the workflow computes, so they do not depend on the device or on speed switches) and
writes one transfer file of kind "archive" (shared/runs/transfer.py: format fedrepro-runs/2, the
one format runs travel in, a campaign's state file being its other kind; a tar, gzip-compressed
when FILE ends in .gz or .tgz, with manifest.json last) holding, for each run that has
finished (its metrics.json exists, whatever its status), metrics.json, metrics.jsonl,
config.yaml, partition.csv and, with --models, model.pt, and for a figure with a probe
(Figure.probe: a GPU job's computation on a finished run's model, FedCSD's Fig. 1) each probe of
a packed run that results/probes/ holds up to date (by today's code, after its run, as its
figure's probe writes it; another is named in a note and left out), so that the figure draws
where the archive is unpacked without the GPU hours. Runs not finished are listed in the
manifest as missing; their checkpoints are never packed. A probe not computed yet needs the
run's model.pt: pack it with --models.

`pack` never replaces a file: an existing FILE is refused unless --force is given, and FILE
may not lie in a run directory.

`unpack` reads archives of this version and of the previous one (fedrepro-runs/1). It checks
the whole archive first, in one pass of shared/runs/transfer.py (every member's SHA-256 and
size against the manifest, each member at most its size limit (MAX_*_BYTES; a model.pt what
its run's model needs), refused at its header; a model.pt over 1 MiB streamed to a folder of
this process beside results/runs/, never held in memory; no absolute paths, `..`, links or
members the manifest does not list; tar headers parsed by shared/runs/tar_reading.py; each
run's model.pt loaded with weights_only=True into its config's model, finite; each run's identity:
the run id in its metrics.json and the hash of its config.yaml are its directory's name; each
result what the trainer writes: shared/campaign/run_schema.py; each probe a declared figure's, of
one of its runs at the archive's scale that the archive holds as completed, at most 1 MiB, its
columns and fields the figure's probe_columns: shared/targets/probes.py) and only
then writes, into DIR/results/runs/ (DIR
defaults to the current directory, the project root the workflow runs in), holding each run's
lock (a run being trained is refused) and refusing a symbolic link where a run's directory or
file goes. A run already finished there (a result: completed, diverged or suspect) is left as
it is; a recorded failure or a damaged metrics.json there is replaced by the archive's run, the
old file moved aside (metrics.json.replaced-<time>). A run the archive holds as a failure is not
written where a checkpoint of it is: that run resumes from its checkpoint. Each run's metrics.json is written
last, so an interrupted unpack leaves unfinished runs, which the workflow reruns, never a run
that looks finished and is not. A probe goes into DIR/results/probes/ after its run: over one
there (set aside) where its run was written, where none is there where the run there is the
same (its metrics.json); the folder and the probe's file must be no links. After
unpacking, `snakemake -n TARGET` schedules only the
runs the archive did not hold.

Errors (unknown target, a damaged, unsafe or foreign archive, a destination that is taken)
print one line and exit with code 2, before anything is written.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from shared.campaign.state_reading import MEMBER as CAMPAIGN_MEMBER
from shared.campaign.state_reading import model_limit, run_config, scale_problem
from shared.runs.files import (
    MAX_CONFIG_BYTES,
    MAX_MEMBER_BYTES,
    MAX_MODEL_BYTES,
    MAX_SMALL_BYTES,
    MODEL_FILE,
    RUN_FILES,
    RUN_ID,
    RunFilesError,
    check_identity,
    holds_result,
    is_final,
    megabytes,
    printable,
    records_failure,
    remove_dead_temporaries,
    run_members,
    run_state,
    run_status,
    sha256,
)
from shared.runs.locking import claim_runs, move_aside_non_result
from shared.runs.transfer import (
    MANIFEST,  # noqa: F401 (the archive's manifest's name, for its readers)
    Kind,
    Staging,
    TransferError,
    install,
    is_outside,
    read_transfer,
    write_transfer,
)
from shared.targets.probes import (
    MAX_PROBE_BYTES,
    PROBE_NAME,
    destination_problem,
    install_probes,
    probes_dir,
    received_problem,
    target_probes,
)
from shared.targets.resolve import TargetError, needed_runs

RUNS_DIR = Path("results") / "runs"
MEMBER = re.compile(rf"runs/({RUN_ID.pattern})/({'|'.join(re.escape(f) for f in (*RUN_FILES, MODEL_FILE))})")
PROBE_MEMBER = re.compile(rf"probes/({PROBE_NAME.pattern})")  # a figure's probe of a run: its file name
# The workflow's --config keys (workflow/schemas/config.schema.yaml); only scale changes run ids.
WORKFLOW_KEYS = ("scale", "data_root", "device", "clients_per_step", "client_threads", "runs_per_job")


class ArchiveError(Exception):
    """An archive or a destination this module refuses; the message is one line (a target that
    names nothing: TargetError; a run being trained, or a link where a run goes: RunFilesError)."""


# --- pack -----------------------------------------------------------------------------------


def collect(run_ids: list[str], runs_dir: Path, models: bool) -> tuple[list[tuple[str, bytes, float]], list, list]:
    """Read the finished runs' files: (member name, bytes, mtime) for each, the packed runs
    with their status and the missing runs with their state. A file is read once, so the
    checksum in the manifest is that of the bytes in the archive."""
    names = (*RUN_FILES[:-1], *((MODEL_FILE,) if models else ()), RUN_FILES[-1])
    files, packed, missing = [], [], []
    for rid in run_ids:
        run_dir = runs_dir / rid
        state = run_state(run_dir)
        if state != "finished":
            missing.append({"run_id": rid, "state": state})
            continue
        files += run_members(run_dir, f"runs/{rid}", names)
        metrics = files[-1][1]  # metrics.json, the last name and present in a finished run
        packed.append({"run_id": rid, "status": run_status(metrics)})
    return files, packed, missing


def check_destination(out: Path, runs_dir: Path, force: bool) -> None:
    """An archive replaces no file unless asked (--force), and never a run's file."""
    if out.resolve().is_relative_to(runs_dir.resolve()):
        raise ArchiveError(f"-o {out} lies in {runs_dir}, which holds the runs' own files; write the archive elsewhere")
    if out.is_dir():
        raise ArchiveError(f"-o {out} is a directory; name the archive's file")
    if out.exists() and not force:
        raise ArchiveError(f"-o {out} exists; pass --force to replace it, or choose another name")


def pack(targets: list[str], scale: str, out: Path, runs_dir: Path, models: bool = False, force: bool = False) -> dict:
    """Write the archive of the targets' finished runs (shared/runs/transfer.py `write_transfer`:
    under a temporary name of this process, then renamed); returns its manifest. The manifest
    is the archive's last member (its checksums are of the members before it)."""
    check_destination(out, runs_dir, force)
    started = time.perf_counter()
    run_ids = needed_runs(targets, scale)
    files, packed, missing = collect(run_ids, runs_dir, models)
    completed = {run["run_id"] for run in packed if run["status"] == "completed"}
    probes, notes = target_probes(targets, scale, runs_dir, completed)
    files += [(f"probes/{path.name}", path.read_bytes(), path.stat().st_mtime) for path in probes]
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    about = {
        "targets": targets,
        "scale": scale,
        "models": models,
        "runs": {"needed": len(run_ids), "packed": len(packed), "missing": len(missing)},
        "packed": packed,
        "missing": missing,
        "packing_seconds": round(time.perf_counter() - started, 3),
    }
    return write_transfer(out, "archive", [files], about).manifest


# --- unpack: checks -------------------------------------------------------------------------


def member_problem(name: str) -> str | None:
    """Why a member could write outside results/runs/<id>/ or is not a run's file (None: it is one)."""
    outside = is_outside(name)
    if outside or MEMBER.fullmatch(name) or PROBE_MEMBER.fullmatch(name):
        return outside
    if CAMPAIGN_MEMBER.fullmatch(name):
        return (
            "is not a run's file but a campaign state's: the file looks like a campaign state, which "
            "python -m shared.campaign import FILE reads"
        )
    return f"is not a run's file (runs/<run id>/<{'|'.join((*RUN_FILES, MODEL_FILE))}>) nor a probe's"


def max_size(name: str) -> int:
    """The most a member of this name may hold (MAX_*_BYTES)."""
    limits = {"config.yaml": MAX_CONFIG_BYTES, "metrics.json": MAX_SMALL_BYTES, MODEL_FILE: MAX_MODEL_BYTES}
    return MAX_PROBE_BYTES if PROBE_MEMBER.fullmatch(name) else limits.get(name.rsplit("/", 1)[-1], MAX_MEMBER_BYTES)


def header_limit(name: str, members: dict, cache: dict) -> int:
    """A model.pt: what its run's model takes (shared/campaign/state_reading.py `model_limit`: its
    config.yaml, partition.csv and metrics.jsonl come before it, as `pack` writes them)."""
    if not name.endswith(f"/{MODEL_FILE}"):
        return max_size(name)
    return model_limit(members, name.rsplit("/", 1)[0], 1, max_size(name), cache)


def keys_problem(manifest: dict) -> str | None:
    """An archive's own keys, each of its type (those `pack` writes; an earlier version's archive
    may lack the optional ones)."""
    targets = manifest["targets"]
    if not isinstance(targets, list) or not all(isinstance(t, str) and t.isprintable() for t in targets):
        return "names no list of targets"
    counts = manifest.get("runs", {"needed": 0, "packed": 0, "missing": 0})
    if not isinstance(counts, dict) or set(counts) != {"needed", "packed", "missing"}:
        return "runs is not a mapping of needed, packed and missing"
    if any(type(n) is not int or n < 0 for n in counts.values()):
        return "runs is not a mapping to counts"
    for key, field in (("packed", "status"), ("missing", "state")):
        entries = manifest.get(key, [])
        if not isinstance(entries, list) or any(
            not isinstance(e, dict) or set(e) != {"run_id", field} or not all(isinstance(v, str) for v in e.values())
            for e in entries
        ):
            return f"{key} is not a list of run ids with their {field}"
    if type(manifest.get("models", False)) is not bool:
        return "models is not true or false"
    seconds = manifest.get("packing_seconds", 0)
    if type(seconds) not in (int, float) or not 0 <= seconds < 10**9:
        return "packing_seconds is not a number of seconds"
    return scale_problem(manifest["scale"])


ARCHIVE = Kind(
    name="archive",
    what="an archive of runs",
    reader="python -m shared.archive unpack",
    noun="a run's file",
    member_problem=member_problem,
    max_size=lambda name: max_size(name),  # looked up when called: a test may lower a limit
    member_limit=header_limit,
    keys=(frozenset({"targets", "scale"}), frozenset({"models", "runs", "packed", "missing", "packing_seconds"})),
    keys_problem=keys_problem,
    binary=lambda name: name.endswith(f"/{MODEL_FILE}"),
)


def verify(archive: Path, staging: Staging | None = None) -> tuple[dict, dict]:
    """The manifest and members (shared/runs/transfer.py: every member matching the manifest,
    a large model.pt staged in `staging`), once each run is what pack writes: its identity,
    its files as the trainer writes them, its model.pt loading into its config's model."""
    try:
        manifest, members = read_transfer(archive, ARCHIVE, stage=staging)
    except TransferError as exc:
        raise ArchiveError(str(exc)) from None
    small = {name: data for name, data in members.items() if not name.endswith(f"/{MODEL_FILE}")}
    for run in run_ids_of(members):
        check_identity(run, small)
        files = {name.rsplit("/", 1)[1]: data for name, data in members.items() if name.startswith(f"runs/{run}/")}
        problem = run_problem(run, files)
        if problem:
            raise ArchiveError(f"run {run}: {problem}; the archive is not what pack wrote")
    completed = {rid for rid in run_ids_of(members) if run_status(members[f"runs/{rid}/metrics.json"]) == "completed"}
    for name, file_name in probe_members(members).items():
        problem = received_problem(file_name, members[name], completed, manifest["scale"])
        if problem:
            raise ArchiveError(f"{name} {problem}; the archive is not what pack wrote")
    return manifest, members


def run_ids_of(names) -> list[str]:
    """The run ids of an archive's run members, sorted."""
    return sorted({match.group(1) for match in map(MEMBER.fullmatch, names) if match})


def probe_members(names) -> dict[str, str]:
    """An archive's probe members: name -> the probe's file name."""
    return {name: match.group(1) for name, match in ((n, PROBE_MEMBER.fullmatch(n)) for n in names) if match}


def run_problem(rid: str, files: dict[str, bytes]) -> str | None:
    """What the campaign's import checks of a finished run (shared/campaign/carried_runs.py), for a
    result; a recorded failure (which the workflow trains again) need only be one, with its history
    and partition, where it has them, as the trainer writes them."""
    from shared.campaign.carried_runs import finished_problem, model_problem

    if "config.yaml" not in files or "metrics.json" not in files:
        return "it has no config.yaml or no metrics.json"
    cfg, status = run_config(files["config.yaml"]), run_status(files["metrics.json"])
    if cfg is None:
        return "its config.yaml is not a run's config"
    problem = model_problem(files[MODEL_FILE], cfg) if MODEL_FILE in files else None
    if is_final(status):
        return finished_problem(rid, files, cfg) or problem
    if not records_failure(files["metrics.json"]):
        return "its metrics.json is neither a result nor a failure"
    return problem or failure_files_problem(files, cfg)


def failure_files_problem(files: dict[str, bytes], cfg) -> str | None:
    """A recorded failure's history and partition, where it has them, as the trainer writes them."""
    from shared.campaign.carried_runs import history_of
    from shared.campaign.run_schema import partition_problem

    if "metrics.jsonl" in files:
        problem = history_of(files, cfg)[1]
        if problem:
            return problem
    if "partition.csv" in files:
        problem = partition_problem(files["partition.csv"], cfg, None)
        return f"its partition.csv {problem}" if problem else None
    return None


# --- unpack: writing ------------------------------------------------------------------------


def failure_over_progress(members: dict, run_dir: Path) -> bool:
    """Whether the archive holds this run as a recorded failure while a checkpoint of it is here."""
    metrics = members.get(f"runs/{run_dir.name}/metrics.json")
    return metrics is not None and records_failure(metrics) and (run_dir / "checkpoint.pt").is_file()


def commit(members: dict, runs_dir: Path, runs: list[str]) -> int:
    """Each of these runs' members into its directory (a killed unpack's temporaries there
    removed first), each run's metrics.json last, a staged model.pt moved in; the run's
    checkpoint (from an unfinished attempt of the same run) is then stale and removed, as the
    trainer removes it on finishing. Returns the files written."""
    written = 0
    for rid in runs:
        run_dir = runs_dir / rid
        run_dir.mkdir(parents=True, exist_ok=True)
        remove_dead_temporaries(run_dir)
        files = sorted(
            (name for name in members if name.startswith(f"runs/{rid}/")), key=lambda n: n.endswith("/metrics.json")
        )
        for name in files:
            dest = run_dir / name.rsplit("/", 1)[1]
            if dest.name == "metrics.json":
                move_aside_non_result(dest)
            install(dest, members[name], move=True)
            written += 1
        (run_dir / "checkpoint.pt").unlink(missing_ok=True)
    return written


def check_space(runs_dir: Path, needed: int) -> None:
    """Refuse an unpack the disk cannot hold, before writing (with 5% to spare)."""
    existing = runs_dir
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if needed * 1.05 > free:
        raise ArchiveError(
            f"unpacking needs {megabytes(needed)}, and {existing} has {megabytes(free)} free; free space first"
        )


def unpack(archive: Path, into: Path) -> dict:
    """Verify the archive, then write its runs under into/results/runs/, leaving runs already
    finished there as they are. Returns what was written and what was left."""
    runs_dir = into / RUNS_DIR
    staging = Staging(runs_dir.parent)  # a large model.pt, streamed beside where it goes
    try:
        manifest, members = verify(archive, staging)
        sizes = {e["path"]: e["size"] for e in manifest["members"]}
        run_ids = run_ids_of(sizes)
        with ExitStack() as locks:
            candidates = [rid for rid in run_ids if not holds_result(runs_dir / rid)]
            named = probe_members(sizes)  # probes go after their runs, where checked first
            probes = {file_name: members[name] for name, file_name in named.items()}
            problem = destination_problem(runs_dir, list(probes))
            if problem:
                raise ArchiveError(problem)
            check_space(
                runs_dir, sum(n for path, n in sizes.items() if path in named or path.split("/")[1] in candidates)
            )
            claim_runs(runs_dir, candidates, locks)
            # a failure recorded elsewhere never replaces training here: the workflow retries the
            # run from its checkpoint, as the trainer keeps it on failing
            resuming = [rid for rid in candidates if failure_over_progress(members, runs_dir / rid)]
            written = [rid for rid in candidates if not holds_result(runs_dir / rid) and rid not in resuming]
            kept = sorted(set(run_ids) - set(written) - set(resuming))
            differing = [
                rid
                for rid in kept
                if f"runs/{rid}/metrics.json" in members
                and sha256((runs_dir / rid / "metrics.json").read_bytes())
                != sha256(members[f"runs/{rid}/metrics.json"])
            ]
            files = commit(members, runs_dir, written)
            same = {rid for rid in kept if rid not in differing}
            probes_written = install_probes(probes, runs_dir, set(written), same)
    finally:
        staging.remove()
    return {
        "manifest": manifest,
        "runs_dir": runs_dir,
        "written": written,
        "kept": kept,
        "resuming": resuming,
        "differing": differing,
        "files": files,
        "probes": probes_written,
        "bytes": sum(size for path, size in sizes.items() if path.split("/")[1] in written),
    }


# --- command line ---------------------------------------------------------------------------


def workflow_config(items: list[str], scale: str | None) -> str:
    """The scale from --scale or the workflow's --config scale=...; the other workflow keys
    are accepted (so a Snakemake command line can be reused) and do not change run ids."""
    values = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in WORKFLOW_KEYS:
            raise ArchiveError(f"--config {item!r}: expected KEY=VALUE with KEY one of {list(WORKFLOW_KEYS)}")
        values[key] = value
    if scale and values.get("scale", scale) != scale:
        raise ArchiveError(f"--scale {scale} and --config scale={values['scale']} disagree")
    return scale or values.get("scale", "paper")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m shared.archive", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("pack", help="write the finished runs that targets need into one file")
    p.add_argument(
        "targets", nargs="+", metavar="TARGET", help="papers/<paper>/<table|fig|search_*>, papers/<paper>, ..."
    )
    p.add_argument("-o", "--output", required=True, type=Path, help="the archive (.tar, .tar.gz or .tgz)")
    p.add_argument("--models", action="store_true", help="also pack each run's final model.pt")
    p.add_argument("--scale", choices=["paper", "small", "smoke"], help="the workflow's scale (default: paper)")
    p.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="the workflow's --config items (scale=...); end them with -- before targets",
    )
    p.add_argument("--force", action="store_true", help="replace FILE if it exists (never a run's file)")
    p.add_argument("--root", type=Path, default=Path("."), help="the project whose results/runs/ to read (default: .)")
    u = commands.add_parser("unpack", help="verify an archive, then add its runs to a project")
    u.add_argument("archive", type=Path)
    u.add_argument("--into", type=Path, default=Path("."), help="the project to write results/runs/ into (default: .)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line; 0 on success, 2 with one line on stderr for what is refused."""
    args = parser().parse_args(argv)
    try:
        if args.command == "pack":
            scale = workflow_config(args.config, args.scale)
            manifest = pack(args.targets, scale, args.output, args.root / RUNS_DIR, args.models, args.force)
            runs, size = manifest["runs"], sum(m["size"] for m in manifest["members"])
            probes = sum(1 for m in manifest["members"] if PROBE_MEMBER.fullmatch(m["path"]))
            print(
                f"packed {runs['packed']} of {runs['needed']} runs needed by {' '.join(args.targets)} at scale={scale} "
                f"({runs['missing']} missing, listed in its manifest) into {args.output}: "
                f"{len(manifest['members'])} files (figure probes: {probes}), {megabytes(size)}"
            )
        else:
            report = unpack(args.archive, args.into)
            kept = report["kept"]
            note = f"; {len(kept)} already finished there, left as they were" if kept else ""
            note += f" ({len(report['differing'])} of them differ from the archive's)" if report["differing"] else ""
            if report["probes"]:
                note += f"; figure probes: {report['probes']}, into {probes_dir(report['runs_dir'])}"
            if report["resuming"]:
                note += f"; {len(report['resuming'])} failed there, in progress here: left to resume"
            print(
                f"unpacked {len(report['written'])} runs ({report['files']} files, {megabytes(report['bytes'])}) of "
                f"{' '.join(report['manifest']['targets'])} at scale={report['manifest']['scale']} "
                f"into {report['runs_dir']}{note}"
            )
    except (ArchiveError, TargetError, RunFilesError, OSError) as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
