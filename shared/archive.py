"""Finished runs in one file, to move them between machines (a GPU cluster and a laptop, a
colleague's checkout, a paper's supplementary material) without rerunning anything.

    python -m shared.archive pack TARGET... -o FILE [--force] [--models] [--scale smoke|small|paper]
                                           [--config scale=smoke ...]
    python -m shared.archive unpack FILE [--into DIR]

A TARGET is written as for Snakemake: `papers/fedssd/table2`, `papers/fedcad/fig3`,
`papers/fedcad/search_fedprox`, a whole paper `papers/fedssd` (or `fedssd`: its tables and
figures) or `fedssd_searches`. `pack` finds the runs the targets need at the scale (the run ids
are what the workflow computes, so they do not depend on the device or on speed switches) and
writes one tar (gzip-compressed when FILE ends in .gz or .tgz) holding, for each run that has
finished (its metrics.json exists, whatever its status), metrics.json, metrics.jsonl,
config.yaml, partition.csv and, with --models, model.pt. Runs not finished are listed in the
manifest as missing; their checkpoints are never packed. FedCAD's fig1 reads a run's model.pt:
pack it with --models.

`pack` never replaces a file: an existing FILE is refused unless --force is given, and FILE
may not lie in a run directory.

`unpack` checks the whole archive first (every member's SHA-256 and size against the manifest,
each member streamed and at most its size limit (MAX_*_BYTES); no absolute paths, `..`, links or members
the manifest does not list; tar headers parsed by shared/runs/tar_reading.py; each run's identity:
the run id in its metrics.json and the hash of its config.yaml are its directory's name; each
result what the trainer writes: shared/campaign/run_schema.py) and only then writes, into DIR/results/runs/ (DIR
defaults to the current directory, the project root the workflow runs in), holding each run's
lock (a run being trained is refused) and refusing a symbolic link where a run's directory or
file goes. A run already finished there (a result: completed, diverged or suspect) is left as
it is; a recorded failure or a damaged metrics.json there is replaced by the archive's run, the
old file moved aside (metrics.json.replaced-<time>). Each run's metrics.json is written
last, so an interrupted unpack leaves unfinished runs, which the workflow reruns, never a run
that looks finished and is not. After unpacking, `snakemake -n TARGET` schedules only the
runs the archive did not hold.

Errors (unknown target, a damaged, unsafe or foreign archive, a destination that is taken)
print one line and exit with code 2, before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import time
import zlib
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from shared.campaign.state_reading import EXPANSION_FLOOR, EXPANSION_RATIO, run_config
from shared.runs.files import (
    MAX_CONFIG_BYTES,
    MAX_MEMBER_BYTES,
    MAX_MODEL_BYTES,
    MAX_SMALL_BYTES,
    MODEL_FILE,
    RUN_FILES,
    RUN_ID,
    RunFilesError,
    add_member,
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
    temporary_path,
)
from shared.runs.locking import claim_runs, move_aside_non_result
from shared.runs.strict_text import strict_json
from shared.runs.tar_reading import Member, TarRefused, TarStream, decompressed, open_regular
from shared.targets.resolve import TargetError, needed_runs

FORMAT = "fedrepro-runs/1"
MANIFEST = "manifest.json"
RUNS_DIR = Path("results") / "runs"
CHUNK = 1024**2
MEMBER = re.compile(rf"runs/({RUN_ID.pattern})/({'|'.join(re.escape(f) for f in (*RUN_FILES, MODEL_FILE))})")
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


def write_archive(out: Path, files: list[tuple[str, bytes, float]], manifest: dict) -> None:
    """The tar under a temporary name of this process, then renamed: a reader never sees half
    an archive, and two packers writing the same name do not mix their members."""
    compressed = out.name.endswith((".gz", ".tgz"))
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w:gz" if compressed else "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data, mtime in files:
                add_member(tar, name, data, mtime)
            add_member(tar, MANIFEST, json.dumps(manifest, indent=1).encode(), time.time())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def check_destination(out: Path, runs_dir: Path, force: bool) -> None:
    """An archive replaces no file unless asked (--force), and never a run's file."""
    if out.resolve().is_relative_to(runs_dir.resolve()):
        raise ArchiveError(f"-o {out} lies in {runs_dir}, which holds the runs' own files; write the archive elsewhere")
    if out.is_dir():
        raise ArchiveError(f"-o {out} is a directory; name the archive's file")
    if out.exists() and not force:
        raise ArchiveError(f"-o {out} exists; pass --force to replace it, or choose another name")


def pack(targets: list[str], scale: str, out: Path, runs_dir: Path, models: bool = False, force: bool = False) -> dict:
    """Write the archive of the targets' finished runs; returns its manifest. The manifest is
    the archive's last member (its checksums are of the members before it)."""
    check_destination(out, runs_dir, force)
    started = time.perf_counter()
    run_ids = needed_runs(targets, scale)
    files, packed, missing = collect(run_ids, runs_dir, models)
    manifest = {
        "format": FORMAT,
        "targets": targets,
        "scale": scale,
        "models": models,
        "runs": {"needed": len(run_ids), "packed": len(packed), "missing": len(missing)},
        "packed": packed,
        "missing": missing,
        "members": [{"path": name, "sha256": sha256(data), "size": len(data)} for name, data, _ in files],
        "packed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    manifest["packing_seconds"] = round(time.perf_counter() - started, 3)
    write_archive(out, files, manifest)
    return manifest


# --- unpack: checks -------------------------------------------------------------------------


@contextlib.contextmanager
def opened(archive: Path):
    """The archive's members (shared/runs/tar_reading.py: headers checked before they are parsed),
    its stream expanding to at most what a state file may (EXPANSION_FLOOR, EXPANSION_RATIO)."""
    with open_regular(archive) as raw:
        limit = EXPANSION_FLOOR + EXPANSION_RATIO * os.fstat(raw.fileno()).st_size
        yield TarStream(
            decompressed([raw], limit, f"expands to more than {megabytes(limit)} (a damaged or hostile archive)")
        )


def check_member(member: Member) -> None:
    """Refuse what could write outside results/runs/<id>/ or is not a run's file."""
    name = member.name
    if member.islink():
        raise ArchiveError(f"member {name!r} is a link; archives of runs hold regular files only")
    if not member.isfile():
        raise ArchiveError(f"member {name!r} is not a regular file")
    path = PurePosixPath(name)
    if path.is_absolute() or re.match(r"[A-Za-z]:", name) or name.startswith("\\"):
        raise ArchiveError(f"member {name!r} has an absolute path")
    if ".." in path.parts or ".." in name.split("\\"):
        raise ArchiveError(f"member {name!r} points outside the archive's directory (..)")
    if name != MANIFEST and not MEMBER.fullmatch(name):
        raise ArchiveError(
            f"member {name!r} is not a run's file (runs/<run id>/<{'|'.join((*RUN_FILES, MODEL_FILE))}>)"
        )


def read_member(tar: TarStream, member: Member, sink=None) -> tuple[str, int, bytes | None]:
    """A member's SHA-256 and size, read in chunks (never whole into memory) into `sink` if
    given; a run's text files are returned too (to check them: `run_problem`). A member over its
    size limit is refused before it is read."""
    name = PurePosixPath(member.name).name
    small = name in RUN_FILES or member.name == MANIFEST
    limits = {"config.yaml": MAX_CONFIG_BYTES, "metrics.json": MAX_SMALL_BYTES, MODEL_FILE: MAX_MODEL_BYTES}
    limit = MAX_SMALL_BYTES if member.name == MANIFEST else limits.get(name, MAX_MEMBER_BYTES)
    if member.size > limit:
        raise ArchiveError(f"member {member.name!r} is {megabytes(member.size)}, over the limit of {megabytes(limit)}")
    digest, size, kept = hashlib.sha256(), 0, []
    for chunk in tar.chunks():
        size += len(chunk)
        if size > limit:
            raise ArchiveError(f"member {member.name!r} is over the limit of {megabytes(limit)}")
        digest.update(chunk)
        if sink is not None:
            sink.write(chunk)
        if small:
            kept.append(chunk)
    return digest.hexdigest(), size, b"".join(kept) if small else None


def scan(archive: Path) -> tuple[dict, dict[str, tuple[str, int]], dict[str, bytes]]:
    """One pass over the archive, writing nothing: every member checked, its SHA-256 and size,
    the manifest, and each run's config.yaml and metrics.json."""
    digests: dict[str, tuple[str, int]] = {}
    small: dict[str, bytes] = {}
    manifest = None
    try:
        with opened(archive) as tar:
            while (member := tar.next()) is not None:
                check_member(member)
                if member.name in digests or (member.name == MANIFEST and manifest is not None):
                    raise ArchiveError(f"member {member.name!r} appears twice")
                digest, size, data = read_member(tar, member)
                if member.name == MANIFEST:
                    manifest = parse_manifest(data)
                    continue
                digests[member.name] = (digest, size)
                if data is not None:
                    small[member.name] = data
    except (OSError, EOFError, zlib.error) as exc:
        raise ArchiveError(f"cannot read {archive}: {exc}") from None
    except TarRefused as exc:
        raise ArchiveError(f"cannot read {archive}: {exc}") from None
    if manifest is None:
        raise ArchiveError(f"{archive} has no {MANIFEST}; it was not written by python -m shared.archive pack")
    return manifest, digests, small


def parse_manifest(data: bytes) -> dict:
    """The manifest, if it has every key unpack reads, of its type (a hand-made one may not)."""
    try:
        manifest = strict_json(data)
        valid = (
            manifest["format"] == FORMAT
            and isinstance(manifest["scale"], str)
            and isinstance(manifest["targets"], list)
            and all(isinstance(t, str) for t in manifest["targets"])
            and isinstance(manifest["members"], list)
            and all(
                isinstance(e["path"], str) and isinstance(e["sha256"], str) and isinstance(e["size"], int)
                for e in manifest["members"]
            )
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        valid = False
    if not valid:
        raise ArchiveError(
            f"{MANIFEST} is not a {FORMAT} manifest (format, targets, scale and members, each of its type)"
        )
    return manifest


def verify(archive: Path) -> dict:
    """The manifest, once every member matches it and it lists nothing the archive lacks."""
    manifest, digests, small = scan(archive)
    listed = {}
    for entry in manifest["members"]:
        if not MEMBER.fullmatch(entry["path"]):
            raise ArchiveError(f"the manifest lists {entry['path']!r}, which is not a run's file")
        listed[entry["path"]] = (entry["sha256"], entry["size"])
    for name, (digest, size) in digests.items():
        if name not in listed:
            raise ArchiveError(f"member {name!r} is not in the manifest")
        if (digest, size) != listed[name]:
            raise ArchiveError(
                f"member {name!r} fails its checksum (manifest: sha256 {listed[name][0][:12]}..., "
                f"{listed[name][1]} bytes; archive: sha256 {digest[:12]}..., {size} bytes)"
            )
    absent = sorted(set(listed) - set(digests))
    if absent:
        raise ArchiveError(f"the manifest lists {absent[0]!r}, which the archive lacks ({len(absent)} such)")
    for run in sorted({MEMBER.fullmatch(name).group(1) for name in digests}):
        check_identity(run, small)
        files = {name.rsplit("/", 1)[1]: data for name, data in small.items() if name.startswith(f"runs/{run}/")}
        problem = run_problem(run, files)
        if problem:
            raise ArchiveError(f"run {run}: {problem}; the archive is not what pack wrote")
    return manifest


def run_problem(rid: str, files: dict[str, bytes]) -> str | None:
    """What the campaign's import checks of a finished run (shared/campaign/carried_runs.py), for a
    result; a recorded failure (which the workflow trains again) need only be one."""
    from shared.campaign.carried_runs import finished_problem

    if "config.yaml" not in files or "metrics.json" not in files:
        return "it has no config.yaml or no metrics.json"
    cfg, status = run_config(files["config.yaml"]), run_status(files["metrics.json"])
    if cfg is None:
        return "its config.yaml is not a run's config"
    if is_final(status):
        return finished_problem(rid, files, cfg)
    return None if records_failure(files["metrics.json"]) else "its metrics.json is neither a result nor a failure"


# --- unpack: writing ------------------------------------------------------------------------


def write_members(archive: Path, expected: dict[str, tuple[str, int]], runs_dir: Path, runs: set[str]) -> dict:
    """Second pass: each member of the runs `runs`, streamed into a temporary file beside its
    destination, checked again as written (the archive could change between passes);
    returns destination -> temporary file. On any error the temporary files are removed."""
    staged: dict[Path, Path] = {}
    try:
        with opened(archive) as tar:
            while (member := tar.next()) is not None:
                match = MEMBER.fullmatch(member.name)
                if not match or match.group(1) not in runs:
                    continue
                dest = runs_dir / match.group(1) / match.group(2)
                tmp = temporary_path(dest)
                staged[dest] = tmp
                remove_dead_temporaries(dest.parent, dest.name)  # a killed unpack's (links removed, never followed)
                tmp.unlink(missing_ok=True)
                with open(tmp, "xb") as sink:  # x: never through a link planted at this name
                    digest, size, _ = read_member(tar, member, sink)
                if (digest, size) != expected.get(member.name):
                    raise ArchiveError(f"member {member.name!r} changed while it was being unpacked")
    except BaseException:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise
    return staged


def commit(staged: dict[Path, Path]) -> None:
    """Rename the staged files into place, each run's metrics.json last; the run's checkpoint
    (from an unfinished attempt of the same run) is then stale and removed, as the trainer
    removes it on finishing."""
    last = [dest for dest in staged if dest.name == "metrics.json"]
    for dest in [d for d in staged if d.name != "metrics.json"] + last:
        if dest.name == "metrics.json":
            move_aside_non_result(dest)
        os.replace(staged[dest], dest)
    for dest in last:
        (dest.parent / "checkpoint.pt").unlink(missing_ok=True)


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
    manifest = verify(archive)
    runs_dir = into / RUNS_DIR
    members = {e["path"]: (e["sha256"], e["size"]) for e in manifest["members"]}
    run_ids = sorted({MEMBER.fullmatch(path).group(1) for path in members})
    with ExitStack() as locks:
        candidates = [rid for rid in run_ids if not holds_result(runs_dir / rid)]
        check_space(
            runs_dir, sum(size for path, (_, size) in members.items() if MEMBER.fullmatch(path).group(1) in candidates)
        )
        claim_runs(runs_dir, candidates, locks)
        written = [rid for rid in candidates if not holds_result(runs_dir / rid)]  # as the locks hold it
        kept = sorted(set(run_ids) - set(written))
        differing = [
            rid
            for rid in kept
            if f"runs/{rid}/metrics.json" in members
            and sha256((runs_dir / rid / "metrics.json").read_bytes()) != members[f"runs/{rid}/metrics.json"][0]
        ]
        staged = write_members(archive, members, runs_dir, set(written))
        commit(staged)
    return {
        "manifest": manifest,
        "runs_dir": runs_dir,
        "written": written,
        "kept": kept,
        "differing": differing,
        "files": len(staged),
        "bytes": sum(size for path, (_, size) in members.items() if MEMBER.fullmatch(path).group(1) in written),
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
            print(
                f"packed {runs['packed']} of {runs['needed']} runs needed by {' '.join(args.targets)} at scale={scale} "
                f"({runs['missing']} missing, listed in its manifest) into {args.output}: "
                f"{len(manifest['members'])} files, {megabytes(size)}"
            )
        else:
            report = unpack(args.archive, args.into)
            kept = report["kept"]
            note = f"; {len(kept)} already finished there, left as they were" if kept else ""
            note += f" ({len(report['differing'])} of them differ from the archive's)" if report["differing"] else ""
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
