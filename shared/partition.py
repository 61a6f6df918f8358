"""Splitting a training set over clients: IID, Dirichlet label skew, #K=k label skew, by
writer (FEMNIST) and by domain (Office-Caltech-10).

The algorithms follow NIID-Bench (Li et al., ICDE'22), whose code MOON, FedCAD, FedSSD and
FedCSD reuse. A partition depends only on the labels (or the samples' writers or domains), the
partition config and the seed, so every method of a table sees the same clients.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from shared.config import ConfigError, PartitionConfig

MAX_DIRICHLET_DRAWS = 1000


def iid(labels: np.ndarray, num_classes: int, cfg: PartitionConfig, rng: np.random.Generator) -> list[np.ndarray]:
    return np.array_split(rng.permutation(len(labels)), cfg.clients)


def dirichlet(labels: np.ndarray, num_classes: int, cfg: PartitionConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """Per class, split its samples over clients in Dir(beta) proportions; a client that already
    holds N/n samples gets no more. Redraw until every client holds `min_size` samples."""
    n, total = cfg.clients, len(labels)
    for _ in range(MAX_DIRICHLET_DRAWS):
        parts: list[list[int]] = [[] for _ in range(n)]
        for c in range(num_classes):
            idx = rng.permutation(np.flatnonzero(labels == c))
            share = rng.dirichlet(np.full(n, cfg.beta))
            share *= np.array([len(p) < total / n for p in parts])
            share /= share.sum()
            cuts = (np.cumsum(share) * len(idx)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(idx, cuts)):
                part.extend(chunk.tolist())
        if min(len(p) for p in parts) >= cfg.min_size:
            return [rng.permutation(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ConfigError(
        f"partition: no Dirichlet draw with beta={cfg.beta} gave each of {n} clients at least "
        f"partition.min_size={cfg.min_size} samples in {MAX_DIRICHLET_DRAWS} tries; "
        f"lower min_size or the number of clients, or raise beta"
    )


def classes(labels: np.ndarray, num_classes: int, cfg: PartitionConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """#K=k: client i holds class i mod K and k-1 other distinct random classes; each class is
    split equally among the clients that hold it."""
    held = []
    for i in range(cfg.clients):
        others = rng.permutation([c for c in range(num_classes) if c != i % num_classes])
        held.append([i % num_classes, *others[: cfg.k - 1].tolist()])
    parts: list[list[np.ndarray]] = [[] for _ in range(cfg.clients)]
    for c in range(num_classes):
        holders = [i for i, h in enumerate(held) if c in h]
        if not holders:  # fewer clients than classes: this class goes unused, as in NIID-Bench
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        for i, chunk in zip(holders, np.array_split(idx, len(holders))):
            parts[i].append(chunk)
    return [np.concatenate(p).astype(np.int64) for p in parts]


def writers(groups: np.ndarray, cfg: PartitionConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """NIID-Bench's "real" FEMNIST partition: permute the writers, split them into `clients`
    groups of (nearly) equal count, and give each client every sample of its writers."""
    ids = np.unique(groups)
    if cfg.clients > len(ids):
        raise ConfigError(f"partition.clients={cfg.clients} exceeds the {len(ids)} writers of the training data")
    return [np.flatnonzero(np.isin(groups, chunk)) for chunk in np.array_split(rng.permutation(ids), cfg.clients)]


def domains(groups: np.ndarray, cfg: PartitionConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """Feature skew (FedBN, FedCSD's Office-Caltech-10): client i holds all of domain i, or with
    `domain_share` its first share x (the smallest domain's size) samples, as FedBN's
    fed_office.py trims every domain to half the smallest (no randomness; `rng` keeps the
    signature of the other kinds)."""
    ids = np.unique(groups)
    if cfg.clients != len(ids):
        raise ConfigError(f"partition.kind=domains makes one client per domain: partition.clients must be "
                          f"{len(ids)} (the domains in the training data), not {cfg.clients}")
    parts = [np.flatnonzero(groups == d) for d in ids]
    if cfg.domain_share is None:
        return parts
    keep = int(cfg.domain_share * min(len(p) for p in parts))
    if keep < 1:
        raise ConfigError(f"partition.domain_share={cfg.domain_share} keeps no sample of the smallest domain "
                          f"({min(len(p) for p in parts)} training samples)")
    return [p[:keep] for p in parts]


LABEL_PARTITIONS = {"iid": iid, "dirichlet": dirichlet, "classes": classes}
GROUP_PARTITIONS = {"writers": writers, "domains": domains}  # by each sample's writer / domain
PARTITIONS = sorted([*LABEL_PARTITIONS, *GROUP_PARTITIONS])


def partition(labels: np.ndarray, num_classes: int, cfg: PartitionConfig, seed: int,
              groups: np.ndarray | None = None) -> list[np.ndarray]:
    """Indices into `labels` for each client; validates the parameters against the data first.
    `groups` holds each sample's writer or domain id, which the writers and domains kinds split by."""
    labels = np.asarray(labels)
    if cfg.kind not in PARTITIONS:
        raise ConfigError(f"partition.kind={cfg.kind!r} is unknown; valid: {PARTITIONS}")
    if cfg.clients < 1 or cfg.clients > len(labels):
        raise ConfigError(f"partition.clients={cfg.clients} must lie in [1, {len(labels)}] (the training samples)")
    if cfg.kind == "dirichlet":
        if not cfg.beta > 0:
            raise ConfigError(f"partition.beta={cfg.beta} must be > 0 (Dirichlet concentration)")
        if cfg.clients * cfg.min_size > len(labels):
            raise ConfigError(
                f"partition.min_size={cfg.min_size} x {cfg.clients} clients exceeds the "
                f"{len(labels)} training samples; valid min_size: [0, {len(labels) // cfg.clients}]")
    if cfg.kind == "classes" and not 1 <= cfg.k <= num_classes:
        raise ConfigError(f"partition.k={cfg.k} must lie in [1, {num_classes}] (the number of classes)")
    rng = np.random.default_rng([seed, 0x9A27])  # a stream of its own, apart from training's
    if cfg.kind in GROUP_PARTITIONS:
        if groups is None:
            raise ConfigError(f"partition.kind={cfg.kind} needs each sample's {cfg.kind[:-1]}, which this dataset does not record")
        return GROUP_PARTITIONS[cfg.kind](np.asarray(groups), cfg, rng)
    return LABEL_PARTITIONS[cfg.kind](labels, num_classes, cfg, rng)


def count_matrix(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """Clients x classes sample counts."""
    labels = np.asarray(labels)
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def save_count_matrix(counts: np.ndarray, class_names: list[str], path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame(counts, columns=class_names)
    frame.index.name = "client"
    frame.to_csv(path)


def plot_count_matrix(counts: np.ndarray, path: Path, title: str = "") -> None:
    """Client-by-class heatmap with the counts written in, like FedSSD's Fig. 6."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    clients, num_classes = counts.shape
    fig, ax = plt.subplots(figsize=(max(4, 0.5 * num_classes + 1.5), max(3, 0.4 * clients + 1)))
    sns.heatmap(counts, annot=num_classes <= 20 and clients <= 30, fmt="d", cmap="Blues", cbar=True,
                ax=ax, annot_kws={"size": 7})
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    # python -m shared.partition results/runs/<id>/partition.csv  ->  partition.png beside it
    import sys

    import pandas as pd

    for csv in sys.argv[1:]:
        frame = pd.read_csv(csv, index_col="client")
        target = Path(csv).with_suffix(".png")
        plot_count_matrix(frame.to_numpy(), target, Path(csv).parent.name)
        print(target)
