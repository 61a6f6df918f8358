"""The workflow's partition job (workflow/rules/tables.smk, rule partition): a run's partition
(its clients' training samples per class) computed without training the run, for a figure of
partitions (FedSSD Fig. 6, FedCAD Fig. 3, FedGKD Fig. 3), which then costs a CPU second, not a
run's GPU-hours. The counts are the ones the run saves in its partition.csv: its federation
built on the CPU as the run builds it (shared/data/federation.py), nothing trained.

    python -m shared.partition_job --run ID --out FILE --scale S [--runs DIR] [--configs FILE]
        [runtime key=value ...]

Where the run is in --runs with its partition.csv (trained, restored from results/shipped/ or
unpacked from an archive), that file is written, so no data is needed. Else the run's config is
found as a run job finds it (shared/workflow_job.py: --configs, else by expanding the targets
at --scale), with the runtime overrides (the data root), and its data loaded. Exit codes: 0
written, 1 raised, 2 refused input or data (one line)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from shared.config.schema import ConfigError
from shared.data.catalog import DataError
from shared.data.federation import build_federation
from shared.run import input_error
from shared.runs.files import MAX_MEMBER_BYTES, RunFilesError, read_text, write_atomically
from shared.runs.partition_files import PARTITION_FILE, read_partition, write_partition
from shared.workflow_job import workflow_configs


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m shared.partition_job", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("args", nargs="*", help="runtime key=value overrides")
    parser.add_argument("--run", required=True, metavar="ID", help="the run's id")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the CSV to write")
    parser.add_argument("--scale", default="paper", help="the scale whose runs to look up")
    parser.add_argument("--runs", type=Path, metavar="DIR", help="the runs folder, where the run may have its own")
    parser.add_argument("--configs", metavar="FILE", help="the workflow's run id -> config file (shared.workflow_job)")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = argument_parser().parse_intermixed_args(argv)  # the runtime overrides come after the options
    started = time.monotonic()
    own = ns.runs / ns.run / PARTITION_FILE if ns.runs else None
    data = readable_partition(own) if own is not None and own.is_file() else None
    if data is not None:
        write_atomically(ns.out, lambda tmp: tmp.write_bytes(data))
        print(f"partition of run {ns.run}: the run's own ({own}) -> {ns.out}")
        return 0
    try:
        (cfg,) = workflow_configs([ns.run], ns.scale, ns.args, ns.configs)
        federation = build_federation(cfg, torch.device("cpu"))
    except (ConfigError, DataError, FileNotFoundError) as exc:
        return input_error(exc)
    counts = federation.counts
    write_partition(ns.out, counts, federation.dataset.classes)
    print(
        f"partition of run {ns.run}: {len(counts)} clients, {int(counts.sum())} samples in "
        f"{time.monotonic() - started:.0f} s -> {ns.out}"
    )
    return 0


def readable_partition(path: Path) -> bytes | None:
    """The file's bytes where it holds a client's counts a row (None: damaged, computed anew)."""
    try:
        read_partition(path)
        return read_text(path, MAX_MEMBER_BYTES, lambda data: data)
    except (RunFilesError, OSError):
        return None


if __name__ == "__main__":
    sys.exit(main())
