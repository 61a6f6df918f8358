"""`bundle`: what an offline GPU machine needs beside the checkout: the data its runs read (a
copy packed, shared/campaign/carried_data.py), the wheels it may lack, and a state file of the runs
finished and in progress here."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from shared.campaign.carried_data import PACKED, pack
from shared.campaign.ledger import state_parts, upload_budget
from shared.campaign.session_checks import SOURCE_FILE
from shared.campaign.state import CAMPAIGN_STATE, RUNS_DIR, part_bytes, state_defaults, state_files, state_runs
from shared.campaign.state_reading import CampaignError
from shared.campaign.train import check_parts, save
from shared.config.schema import RunConfig
from shared.data.catalog import data_root
from shared.runs.files import history_rounds, rounds_done, write_atomically
from shared.runs.locking import RunBusy, claim_runs
from shared.runs.provenance import git_commit
from shared.runs.shipped import SHIPPED, is_finished
from shared.targets.copies import Copy, campaign_runs

BUNDLED_STATE = "state.tar.gz"  # the state file's name in a bundle, where scripts/gpu-session.sh reads it
# What a GPU machine with torch, pandas, seaborn, matplotlib and pytest (and so NumPy and
# Pillow) may lack of what `train` imports; Snakemake it never imports
OFFLINE_WHEELS = ("pyyaml>=6",)


def data_files(runs: dict[str, RunConfig], copy: Copy | None, data_root: Path) -> list[tuple[Path, Path]]:
    """(source, place under the bundle's data root) of the files the runs read: the copy, packed
    (its place named as it is, and PACKED), or the official archives found in the local data root."""
    from shared.data.catalog import COPIES
    from shared.data.datasets import CIFAR

    if copy is not None:
        if copy.path is None:
            raise CampaignError(
                "bundle needs the copy's file: --copy NAME=FILE, "
                "or NAME=SHA256 with the file under the data root's copies/"
            )
        return [(copy.path, Path(COPIES) / (copy.path.name + PACKED))]
    names = {cfg.dataset.name for cfg in runs.values()}
    found = [
        (data_root / CIFAR[n]["archive"].filename, Path(CIFAR[n]["archive"].filename)) for n in names if n in CIFAR
    ]
    absent = [str(src) for src, _ in found if not src.is_file()]
    if absent:
        raise CampaignError(f"{absent[0]} is not here to bundle; download it first (or train on a copy: --copy)")
    return found


def carry_data(sources: list[tuple[Path, Path]], root: Path, max_upload_mib: float | None) -> None:
    """Each source at its place under `root`, packed where data_files says so; refused in one
    line, before any write, where the data alone leaves no room for a state."""
    with tempfile.TemporaryDirectory() as packing:
        staged = [(staged_file(source, place, Path(packing)), place) for source, place in sources]
        upload_budget(max_upload_mib, sum(file.stat().st_size for file, _ in staged))
        for file, place in staged:
            (root / place).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, root / place)
    for source, place in sources:
        unpacked = root / place.with_name(source.name)
        if place.name != source.name and unpacked.exists():  # an earlier bundle's, which the device would get too
            print(f"note: {unpacked} (unpacked) travels too; remove it to carry less", file=sys.stderr)


def staged_file(source: Path, place: Path, packing: Path) -> Path:
    """The file that goes to `place`: `source` itself, or packed into the folder `packing` where
    the place names it packed."""
    if place.name != source.name + PACKED:
        return source
    pack(source, packing / place.name)
    return packing / place.name


def wheels(out: Path, wheels_from: Path | None) -> list[str]:
    """Wheels of what the GPU machine may lack (OFFLINE_WHEELS), for CPython 3.12 on Linux:
    copied from a folder, or downloaded here with pip (the machine itself has no network)."""
    out.mkdir(parents=True, exist_ok=True)
    if wheels_from is not None:
        for wheel in wheels_from.glob("*.whl"):
            shutil.copy2(wheel, out / wheel.name)
    else:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--platform",
                "manylinux2014_x86_64",
                "--platform",
                "manylinux_2_17_x86_64",
                "-d",
                str(out),
                *OFFLINE_WHEELS,
            ],
            check=True,
        )
    return sorted(p.name for p in out.glob("*.whl"))


def check_carried_state(source: Path, place: Path) -> None:
    """Refused in one line, before anything is written: a state at the bundle's place that is not
    --state's bytes (it may be a newer session's state; moving it aside would hide it from the session)."""
    there, carried = state_files(place), state_files(source)
    if not there or source.resolve() == place.resolve():
        return
    same = [p.name.replace(source.name, place.name, 1) for p in carried] == [p.name for p in there] and all(
        a.read_bytes() == b.read_bytes() for a, b in zip(carried, there)
    )
    if not same:
        raise CampaignError(
            f"{place} (or its parts) holds another state than --state {source}, perhaps a newer "
            f"session's; import or move it away first"
        )


def bundle(args) -> int:
    """DIR holds the data, the wheels and the state file as scripts/gpu-session.sh reads them:
    DIR/data, DIR/wheels, DIR/state.tar.gz. Without
    --state, the campaign's state (CAMPAIGN_STATE) is carried where it exists, else one is
    written here: the ledger and the checkpoints that fit --max-upload-mib
    (`bundle_state`); with it, that state is carried as it is."""

    check_parts(args)
    if args.state is None and (args.root / CAMPAIGN_STATE).is_file():  # the campaign goes on from its state
        args.state = args.root / CAMPAIGN_STATE
    given = args.state is not None
    args.state = args.state or args.output / BUNDLED_STATE
    check_carried_state(args.state, args.output / BUNDLED_STATE)
    members = state_defaults(args)
    runs, _ = campaign_runs(args.targets, args.scale, args.copy_spec)
    out, runs_dir, shipped_runs = args.output, args.root / RUNS_DIR, args.root / SHIPPED / "runs"
    check_none_training(runs_dir, runs)
    sources = data_files(runs, args.copy_spec, data_root(args.data_root))
    unsaved = [] if given else not_here(members, runs_dir, shipped_runs)
    if unsaved:
        raise CampaignError(
            f"{args.state} holds {len(unsaved)} runs further than here (e.g. {unsaved[0]}); import it first"
        )
    carry_data(sources, out / "data", args.max_upload_mib)
    names = [] if args.no_wheels else wheels(out / "wheels", args.wheels_from)
    if not given:
        bundle_state(args, runs, out)
    elif args.state.resolve() != (out / BUNDLED_STATE).resolve():  # checked above: nothing there, or the same bytes
        out.mkdir(parents=True, exist_ok=True)
        for part in state_files(args.state):
            shutil.copy2(part, out / part.name.replace(args.state.name, BUNDLED_STATE, 1))  # the name the session reads
    write_atomically(out / SOURCE_FILE, lambda path: path.write_text(git_commit(args.root) + "\n"))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    limit = f" of the {args.max_upload_mib:g} MiB limit" if args.max_upload_mib is not None else ""
    if args.max_upload_mib is not None and size > args.max_upload_mib * 2**20:
        raise CampaignError(f"bundle {out}: {size / 2**20:.1f} MiB is over --max-upload-mib {args.max_upload_mib:g}")
    carried = (
        f"{args.state}, carried as it is: the session skips the runs this checkout has shipped"
        if given
        else f"ledger of {len(args.ledger)} finished runs"
    )
    print(
        f"bundled {out}: data for {len(runs)} runs, {len(names)} wheels, state {out / BUNDLED_STATE} ({carried}); "
        f"{size / 2**20:.1f} MiB{limit}"
    )
    return 0


def check_none_training(runs_dir: Path, runs: dict[str, RunConfig]) -> None:
    """No run of the bundle is being trained here: a piece training on would go on from the
    state the bundle carries elsewhere, two states of one campaign, and the import of what comes
    back would find the run locked."""
    with ExitStack() as held:
        try:
            claim_runs(runs_dir, [rid for rid in runs if (runs_dir / rid).is_dir()], held)
        except RunBusy as busy:
            raise CampaignError(f"{busy}: stop that training first (SIGTERM saves its state), then bundle") from None


def not_here(members: dict[str, bytes], runs_dir: Path, shipped_runs: Path) -> list[str]:
    """The runs of a state that this machine has not got as far: a finished run neither here nor
    shipped, a checkpoint ahead of the one here (a returned state not imported yet)."""
    return [
        rid
        for (kind, rid), files in state_runs(members).items()
        if not is_finished(rid, runs_dir, shipped_runs)
        and (kind == "finished" or rounds_done(runs_dir / rid) < history_rounds(files.get("metrics.jsonl", b"")))
    ]


def bundle_state(args, runs: dict[str, RunConfig], out: Path) -> None:
    """DIR/state.tar.gz: the ledger of the runs finished here or shipped (no finished run's
    text), and the checkpoints here, the most advanced first, while data, wheels and state stay
    within --max-upload-mib; each checkpoint left out is said in one line."""
    runs_dir, shipped_runs = args.root / RUNS_DIR, args.root / SHIPPED / "runs"
    args.ledger = frozenset(rid for rid in runs if is_finished(rid, runs_dir, shipped_runs))  # shipped or here
    args.carried_rounds, args.bundling = None, True
    others = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and not p.name.startswith(BUNDLED_STATE))
    budget = upload_budget(args.max_upload_mib, others)
    if budget is not None:  # parts that hold the bytes left: the checkpoints that do not fit stay out
        args.part_mib, args.max_parts = state_parts(budget, part_bytes(args.part_mib) if args.part_mib else budget)
    written = save(args, runs_dir)
    for run in written.left_out:
        print(
            f"note: run {run.run_id}'s checkpoint ({run.size / 2**20:.1f} MiB, {run.rounds} rounds) is left out of "
            f"{args.state}: --max-upload-mib {args.max_upload_mib:g}; the session starts it again",
            file=sys.stderr,
        )
