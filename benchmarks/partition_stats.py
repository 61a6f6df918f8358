"""Client statistics of the label partitions: ours (`partition.rng` unset), NIID-Bench's draws
(`partition.rng=niid_bench`, what FedCAD's, FedSSD's and FedCSD's code inherit) and the FedDF
code base's balanced Dirichlet (`partition.kind=dirichlet_balanced`, FedGKD's released code).

    python -m benchmarks.partition_stats [--seeds 10] [--only "CIFAR-10, 10 clients" ...]

Labels: a synthetic CIFAR-10-like vector (50,000 labels, 5,000 a class, interleaved 0..9), or
CIFAR-100-like (500 a class). For our generator and NIID-Bench's, the count matrix depends on
the class sizes only (each class is shuffled before it is split), so CIFAR-10's real label order
gives the same numbers; for dirichlet_balanced the order changes which samples share a chunk, not
the statistics' distribution. FedGKD's settings use 45,000 labels (its 10% validation split
taken first). Every statistic is the mean over the seeds 0..seeds-1.
"""

from __future__ import annotations

import argparse

import numpy as np

from shared.config.schema import PartitionConfig
from shared.data.partition import count_matrix, dirichlet_balanced_lists, partition

# (setting, labels per class, classes, clients, kind, beta or k)
SETTINGS = [
    ("CIFAR-10, 10 clients, Dir(0.5)", 5000, 10, 10, "dirichlet", 0.5),
    ("CIFAR-10, 10 clients, Dir(0.1)", 5000, 10, 10, "dirichlet", 0.1),
    ("CIFAR-10, 10 clients, #K=2", 5000, 10, 10, "classes", 2),
    ("CIFAR-10, 100 clients, Dir(0.5)", 5000, 10, 100, "dirichlet", 0.5),
    ("CIFAR-100, 10 clients, Dir(0.5)", 500, 100, 10, "dirichlet", 0.5),
    ("CIFAR-100, 10 clients, Dir(0.01)", 500, 100, 10, "dirichlet", 0.01),
    ("CIFAR-10 (45k), 20 clients, Dir(1.0)", 4500, 10, 20, "dirichlet", 1.0),
    ("CIFAR-10 (45k), 20 clients, Dir(0.5)", 4500, 10, 20, "dirichlet", 0.5),
    ("CIFAR-10 (45k), 20 clients, Dir(0.1)", 4500, 10, 20, "dirichlet", 0.1),
    ("CIFAR-10 (50k), 20 clients, Dir(0.1)", 5000, 10, 20, "dirichlet", 0.1),
    ("CIFAR-100 (45k), 20 clients, Dir(0.1)", 450, 100, 20, "dirichlet", 0.1),
]


def stats(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> tuple[float, ...]:
    counts = count_matrix(labels, parts, num_classes)
    sizes = counts.sum(1)
    top_share = (counts.max(1) / np.maximum(sizes, 1)).mean()
    return (
        sizes.min(),
        sizes.max(),
        (counts > 0).sum(1).mean(),
        (counts >= 0.05 * sizes[:, None]).sum(1).mean(),
        top_share,
    )


def variants(kind: str, clients: int, value: float):
    if kind == "classes":
        yield "ours (rng unset)", PartitionConfig(kind="classes", clients=clients, k=int(value)), False
        yield (
            "NIID-Bench (rng=niid_bench)",
            PartitionConfig(kind="classes", clients=clients, k=int(value), rng="niid_bench"),
            False,
        )
        return
    yield "ours (rng unset)", PartitionConfig(kind="dirichlet", clients=clients, beta=value), False
    yield (
        "NIID-Bench (rng=niid_bench)",
        PartitionConfig(kind="dirichlet", clients=clients, beta=value, rng="niid_bench"),
        False,
    )
    balanced = PartitionConfig(kind="dirichlet_balanced", clients=clients, beta=value)
    yield "FedDF/FedGKD code: Dirichlet lists", balanced, True
    yield "FedDF/FedGKD code: clients (dirichlet_balanced)", balanced, False


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=[], help="settings whose label contains one of these")
    return parser


def main() -> None:
    args = argument_parser().parse_args()
    print(f"Synthetic labels (classes interleaved), mean over seeds 0..{args.seeds - 1}.\n")
    print(
        "| setting | partition | smallest client | largest client | classes >= 1 sample | classes >= 5% "
        "| largest class share |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for setting, per_class, num_classes, clients, kind, value in SETTINGS:
        if args.only and not any(text in setting for text in args.only):
            continue
        labels = np.arange(per_class * num_classes) % num_classes
        for name, cfg, lists in variants(kind, clients, value):
            rows = []
            for seed in range(args.seeds):
                parts = (
                    dirichlet_balanced_lists(labels, num_classes, cfg, np.random.RandomState(seed))
                    if lists
                    else partition(labels, num_classes, cfg, seed)
                )
                rows.append(stats(labels, parts, num_classes))
            lo, hi, held, held5, top = np.mean(rows, axis=0)
            print(f"| {setting} | {name} | {lo:,.0f} | {hi:,.0f} | {held:.2f} | {held5:.2f} | {top:.2f} |")


if __name__ == "__main__":
    main()
