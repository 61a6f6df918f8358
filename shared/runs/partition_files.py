"""A partition's CSV: the training samples of each client (rows) and class (columns), under a
header "client,<the classes>". A run writes its own (partition.csv in its directory, before it
trains); the workflow's partition job writes one without training (shared/partition_job.py,
results/partitions/<run id>.csv), which is what a figure of partitions draws (FedSSD Fig. 6,
FedCAD Fig. 3, FedGKD Fig. 3): the partition depends on the data, the partition's settings and
the seed alone, never on training."""

from __future__ import annotations

from pathlib import Path

from shared.runs.files import MAX_MEMBER_BYTES, RunFilesError, printable, read_text, write_atomically

PARTITION_FILE = "partition.csv"  # in a run's directory


def write_partition(path: Path, counts, class_names: list[str]) -> None:
    import pandas as pd

    frame = pd.DataFrame(counts, columns=class_names)
    frame.index.name = "client"
    write_atomically(path, frame.to_csv)


def read_partition(path: Path) -> list[list[int]]:
    """A partition's counts, a list per client (a run's: `run_dir / PARTITION_FILE`)."""
    rows = read_text(path, MAX_MEMBER_BYTES, bytes.decode).splitlines()[1:]  # under the header
    try:
        return [[int(count) for count in row.split(",")[1:]] for row in rows if row]
    except ValueError:
        raise RunFilesError(f"{printable(path)}: holds a row that is not a client's counts") from None


def partitions_dir(runs_dir: str | Path) -> Path:
    """The folder of the partition job's files: beside the runs folder (results/partitions/)."""
    return Path(runs_dir).parent / "partitions"


def partition_path(runs_dir: str | Path, run_id: str) -> Path:
    """Where the partition job saves a run's partition."""
    return partitions_dir(runs_dir) / f"{run_id}.csv"


def drawn_partition(runs_dir: str | Path, run_id: str) -> list[list[int]]:
    """The partition a figure draws of a run: the partition job's where the workflow computed it,
    else the run's own (a run trained here, or shipped: the same counts, by construction)."""
    computed = partition_path(runs_dir, run_id)
    return read_partition(computed if computed.exists() else Path(runs_dir) / run_id / PARTITION_FILE)
