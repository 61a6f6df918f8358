"""Snakemake's start-up, an older commit's workflow beside this one's, measured in one run.

    python -m benchmarks.startup --before REV [--repeat 3] [--scale smoke] [--target papers/fedssd/table2]

Build the target at the scale first (`snakemake --cores 1 --config scale=smoke device=cpu --
papers/fedssd/table2`): both workflows then plan a built table. REV's tree is exported into a
temporary folder whose results/ links to this checkout's (runs, tables, logs), except the
expansion cache, which is keyed by the code and so kept apart: each side reads its own cache,
written by a first, untimed call. The two sides alternate, so a busy machine slows both alike.
Measured per command: wall seconds and the CPU seconds of the Snakemake process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export(rev: str, into: Path) -> None:
    """REV's tracked files into `into`, its results/ linked to this checkout's but for the cache."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "results").mkdir(exist_ok=True)
    for entry in (ROOT / "results").iterdir():
        if entry.name != ".expansion" and not (into / "results" / entry.name).exists():
            (into / "results" / entry.name).symlink_to(entry)
    (into / ".snakemake").symlink_to(ROOT / ".snakemake")


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one command; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def a_run_id(scale: str) -> str:
    """A run of the scale, for a run job's start (the workflow writes their configs here)."""
    return min(json.loads((ROOT / "results" / ".configs" / f"{scale}.json").read_text()))


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the commit to compare with (e.g. a merge base)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", default="smoke")
    parser.add_argument("--target", default="papers/fedssd/table2")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser()
    args = parser.parse_args(argv)
    snakemake = [
        str(Path(sys.executable).with_name("snakemake")),
        "-n",
        "--config",
        f"scale={args.scale}",
        "device=cpu",
    ]
    commands = {
        f"snakemake -n {args.target} (built)": [*snakemake, "--", args.target],
        "a run job's start (--mode remote --target-jobs run:run_id=ID)": [
            *snakemake,
            "--mode",
            "remote",
            "--target-jobs",
            f"run:run_id={a_run_id(args.scale)}",
            "--allowed-rules",
            "run",
        ],
    }
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp)
        export(args.before, before)
        sides = {f"before ({args.before})": before, "after (this checkout)": ROOT}
        for cwd in sides.values():  # writes each side's expansion cache: not timed
            subprocess.run(commands[next(iter(commands))], cwd=cwd, check=True, capture_output=True)
        found = {(name, side): [] for name in commands for side in sides}
        for _ in range(args.repeat):
            for name, command in commands.items():
                for side, cwd in sides.items():
                    found[name, side].append(timed(command, cwd))
    print(f"| command | {' | '.join(sides)} |\n|---|{'---|' * len(sides)}")
    for name in commands:
        cells = []
        for side in sides:
            walls, cpus = zip(*found[name, side])
            cells.append(f"{min(walls):.1f}-{max(walls):.1f} s wall, {statistics.median(cpus):.1f} s CPU")
        print(f"| {name} | {' | '.join(cells)} |")
    print(f"\n{args.repeat} alternating repeats; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
