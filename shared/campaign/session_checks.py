"""What a GPU session does before anything costly (the gate, training): `environment_record`
(environment.json), then `check_carry`: the carried state (readable, every checksum verified,
made for the session's targets and scale) and the carried data (each archive the targets' runs
read, present, with its published checksum; a copy, unpacked and found by its SHA-256). A failure is one
line (`CarryError`), said within seconds of the start: a session on a machine without network
would otherwise find it minutes later, when a run first reads its data and tries to download it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from shared.campaign.carried_data import UnpackError, unpack_all
from shared.campaign.ledger import read_ledger
from shared.campaign.state import expected_runs, manifest_copy, read_state, state_exists, state_runs
from shared.campaign.state_reading import FIRST, CampaignError
from shared.data.catalog import DataError
from shared.runs.files import write_atomically
from shared.runs.provenance import SOURCE_ENV, environment
from shared.targets.copies import Copy

STATE = "state.tar.gz"  # the carried state's name in the bundle (or its parts)
SOURCE_FILE = "source-commit.txt"  # the commit the bundle's checkout was at (shared.runs.provenance SOURCE_ENV)


def carried_source(carry: Path) -> dict[str, str]:
    """The environment a session's steps take the checkout's commit from, where the copy has no
    .git: the bundle's SOURCE_FILE, its first line (provenance checks its form)."""
    try:
        with open(carry / SOURCE_FILE, "rb") as file:
            line = file.read(100).decode("ascii", "replace").strip()
    except OSError:
        return {}
    return {SOURCE_ENV: line} if line else {}


def environment_record(path: Path) -> dict:
    """environment.json: what the session ran on (shared.runs.provenance's record, torch's view of the
    GPU, nvidia-smi's report). Run in a child process, so the session's own opens no CUDA context."""
    import torch

    cuda = torch.cuda.is_available()
    env = {
        **environment(),
        "torch": torch.__version__,
        "cuda_available": cuda,
        "executable": sys.executable,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if cuda:
        props = torch.cuda.get_device_properties(0)
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        env["gpu0"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
        }
        env["bf16_supported"] = torch.cuda.is_bf16_supported()
    try:
        env["nvidia_smi"] = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        env["nvidia_smi"] = None
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps(env, indent=1, default=str) + "\n"))
    return env


class CarryError(Exception):
    """The bundle cannot serve the session; the message is one line."""


@dataclass(frozen=True)
class Carried:
    """What the carried state holds for the session: the scale it trains at, the copy its runs
    train on (None: the official data), the runs it finished, and its --first (the cells its
    campaign trains first, as given: shared/campaign/first_cells.py)."""

    scale: str
    copy: Copy | None = None
    finished: frozenset[str] = frozenset()
    first: list[str] | None = None


def check_carry(carry: Path, targets: list[str], scale: str | None) -> Carried:
    """What the carried state holds (none carried: a new state at `scale`, default paper), once
    it and the carried data have been checked; CarryError where they fail."""
    state = carry / STATE
    manifest, finished = carried_manifest(state, targets, scale) if state_exists(state) else ({}, frozenset())
    scale = scale or manifest.get("scale") or "paper"
    copy = manifest_copy(manifest) if manifest else None
    check_data(carry / "data", targets, scale, copy)
    return Carried(scale, copy, finished, manifest.get(FIRST))


def carried_manifest(state: Path, targets: list[str], scale: str | None) -> tuple[dict, frozenset[str]]:
    """The carried state's manifest, read as `train` will read it, for these targets at this
    scale, and the runs it holds finished (its ledger's and its finished runs')."""
    try:
        manifest, members = read_state(state)
    except (CampaignError, ValueError, OSError) as exc:  # ValueError: the ledger's or a member's refusal
        raise CarryError(f"the carried state {state} cannot be read: {' '.join(str(exc).split())}") from None
    missing = [t for t in targets if t not in manifest.get("targets", [])]
    if missing:
        raise CarryError(
            f"the carried state {state} was bundled for {' '.join(manifest.get('targets', [])) or 'no target'}, "
            f"not {' '.join(missing)}: its ledger and data do not cover them (bundle again with these targets)"
        )
    if scale and manifest.get("scale") != scale:
        raise CarryError(f"--scale {scale}: the carried state {state} holds runs at scale {manifest.get('scale')}")
    return manifest, read_ledger(manifest) | {rid for _, rid in state_runs(members, ("finished",))}


def check_data(root: Path, targets: list[str], scale: str, copy: Copy | None) -> None:
    """Each official archive the targets' runs read under `root`, with its published checksum;
    or the copy the state names, unpacked first where it travelled packed. Synthetic data needs
    nothing."""
    from shared.data.catalog import COPIES, file_digest, find_copy
    from shared.data.datasets import CIFAR  # loads torch

    try:
        unpack_all(root / COPIES)
    except UnpackError as exc:
        raise CarryError(f"the carried data: {exc}") from None
    if copy is not None:
        try:
            find_copy(root, copy.sha256)
        except DataError as exc:
            raise CarryError(f"the carried data: {' '.join(str(exc).split())}") from None
        return
    names = {cfg.dataset.name for cfg in expected_runs(tuple(targets), scale, None).values()}
    for name in sorted(names & set(CIFAR)):
        archive = CIFAR[name]["archive"]
        path = root / archive.filename
        if not path.is_file():
            raise CarryError(
                f"{path} is missing: the targets' runs read it and the machine has no network "
                f"(python -m shared.campaign bundle {' '.join(targets)} -o DIR carries it)"
            )
        algorithm, expected = ("md5", archive.md5) if archive.md5 else ("sha256", archive.sha256)
        if file_digest(path, algorithm) != expected:
            raise CarryError(f"{path} fails its {algorithm} checksum: it is corrupt or not the official archive")
