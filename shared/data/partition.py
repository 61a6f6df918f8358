"""Splitting a training set: held-out sets (`divide`), then the rest over clients: IID,
Dirichlet label skew, #K=k label skew, by writer (FEMNIST) and by domain (Office-Caltech-10).

The algorithms follow NIID-Bench (Li et al., ICDE'22), whose code several of the papers' code
bases reuse. A partition depends only on the labels (or the samples' writers or domains), the
partition config and the seed, so every method of a table sees the same clients.

Random streams (`partition.rng`):
- unset (None): our own generator, `np.random.default_rng([seed, 0x9A27])`.
- `niid_bench`: the draws of NIID-Bench's `partition_data` (utils.py) after its
  `np.random.seed(seed); random.seed(seed)`, through `np.random.RandomState(seed)` and
  `random.Random(seed)` instances (the legacy `np.random.*` functions are methods of one global
  RandomState, so the streams are the same). Given the same label vector, seed s gives NIID-Bench's
  split s, each client's indices in the order NIID-Bench returns them (kinds iid = its "homo",
  dirichlet = "noniid-labeldir", classes = "noniid-#label{k}").

`dirichlet_balanced` is the non-iid Dirichlet partition of the FedDF code base (Lin et al.,
NeurIPS'20), which code built on it keeps (`pcode/datasets/partition_data.py`); it always draws
from `np.random.RandomState(seed)`, as that code does from its `conf.random_state`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

import shared.data.catalog as catalog
from shared.config.schema import ConfigError, PartitionConfig, RunConfig, check

MAX_DIRICHLET_DRAWS = 1000
RNGS = ("niid_bench",)  # partition.rng; None (unset) is our own generator
NIID_BENCH_KINDS = ("iid", "dirichlet", "classes")  # the kinds partition.rng=niid_bench draws as NIID-Bench does
BALANCED_GROUP = 10  # dirichlet_balanced: clients per chunk (the FedDF code's n_auxi_workers)
MAX_BALANCED_DRAWS = 100_000  # 4 classes at beta 0.1 (AG News) need about 5,000 draws a chunk

Rng = np.random.Generator | np.random.RandomState  # ours | NIID-Bench's and the FedDF code's


def iid(labels: np.ndarray, num_classes: int, cfg: PartitionConfig, rng: Rng) -> list[np.ndarray]:
    return np.array_split(rng.permutation(len(labels)), cfg.clients)


def dirichlet(labels: np.ndarray, num_classes: int, cfg: PartitionConfig, rng: Rng) -> list[np.ndarray]:
    """Per class, split its samples over clients in Dir(beta) proportions; a client that already
    holds N/n samples gets no more. Redraw until every client holds `min_size` samples.
    With a RandomState this is NIID-Bench's draw sequence: `permutation` of an array is a copy
    shuffled with `shuffle` (its `np.random.shuffle(idx_k)`), then `dirichlet`, class by class,
    and a final shuffle of each client's indices."""
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


def classes_niid_bench(
    labels: np.ndarray, num_classes: int, cfg: PartitionConfig, rng: np.random.RandomState, py_random: random.Random
) -> list[np.ndarray]:
    """#K=k as NIID-Bench's "noniid-#label{k}" draws it: client i holds class i mod K, then
    classes drawn with Python's `random.randint(0, K-1)` until it holds k distinct ones; then per
    class 0..K-1 the class's indices are shuffled (np.random) and split equally, in client order,
    among the clients that hold it; a client's indices are its chunks in class order.
    As in NIID-Bench's code, k=10 takes another branch: every client gets a share of each of the
    classes 0..9 only (all classes on a 10-class dataset; 10 of 100 on CIFAR-100), and a class no
    client holds (fewer clients than classes) is shuffled and left out (NIID-Bench stops there)."""
    parts: list[list[np.ndarray]] = [[] for _ in range(cfg.clients)]
    if cfg.k == 10:
        for c in range(min(10, num_classes)):
            idx = rng.permutation(np.flatnonzero(labels == c))
            for i, chunk in enumerate(np.array_split(idx, cfg.clients)):
                parts[i].append(chunk)
    else:
        held = []
        for i in range(cfg.clients):
            current = [i % num_classes]
            while len(current) < cfg.k:
                c = py_random.randint(0, num_classes - 1)
                if c not in current:
                    current.append(c)
            held.append(current)
        for c in range(num_classes):
            idx = rng.permutation(np.flatnonzero(labels == c))
            holders = [i for i, h in enumerate(held) if c in h]
            for i, chunk in zip(holders, np.array_split(idx, max(len(holders), 1))):
                parts[i].append(chunk)
    return [np.concatenate(p).astype(np.int64) if p else np.zeros(0, dtype=np.int64) for p in parts]


def _balanced_sizes(per_class: list[np.ndarray], m: int, beta: float, rng: np.random.RandomState) -> np.ndarray:
    """One Dirichlet draw of `dirichlet_balanced_lists` for a chunk, counting samples only (the
    same draws and arithmetic; a rejected draw costs no index lists)."""
    size = sum(len(idx) for idx in per_class)
    sizes = np.zeros(m, dtype=np.int64)
    for idx in per_class:
        share = rng.dirichlet(np.full(m, beta))
        share *= sizes < size / m
        if not share.sum():
            continue
        share /= share.sum()
        bounds = np.concatenate([[0], (np.cumsum(share) * len(idx)).astype(int)[:-1], [len(idx)]])
        sizes += np.maximum(np.diff(np.minimum(bounds, len(idx))), 0)
    return sizes


def dirichlet_balanced_lists(
    labels: np.ndarray, num_classes: int, cfg: PartitionConfig, rng: np.random.RandomState
) -> list[np.ndarray]:
    """The Dirichlet stage of `dirichlet_balanced`, before its equal cut: shuffle all samples,
    cut them into chunks of `BALANCED_GROUP` clients' worth (the last chunk takes the rest and the
    remaining clients), and in each chunk split every class over its clients in Dir(beta)
    proportions (a client already holding the chunk's average gets no more), redrawing the chunk
    until each of its clients holds at least half the chunk's average. Fewer than 10 clients:
    one chunk (the released code asserts at least 10)."""
    n, total = cfg.clients, len(labels)
    order = rng.permutation(total)  # the code shuffles its (index, label) rows in place: the same draws
    group = min(BALANCED_GROUP, n)
    splits = math.ceil(n / group)
    step = int(group / n * total)  # the code's chunk length (the last chunk runs to the end)
    lists: list[np.ndarray] = []
    remaining = n
    for s in range(splits):
        chunk = order[s * step : total if s == splits - 1 else (s + 1) * step]
        chunk_labels = labels[chunk]
        m = min(group, remaining)
        remaining -= group
        size = len(chunk)
        floor = int(0.5 * size / m)
        per_class = [chunk[chunk_labels == c] for c in range(num_classes)]
        for _ in range(MAX_BALANCED_DRAWS):  # the released code redraws without limit
            state = rng.get_state()
            if min(_balanced_sizes(per_class, m, cfg.beta, rng)) >= floor:
                rng.set_state(state)  # replay the accepted draw, now moving the indices
                break
        else:
            raise ConfigError(
                f"partition: no Dirichlet draw with beta={cfg.beta} gave each client of a chunk of "
                f"{size} samples half its average ({floor}) in {MAX_BALANCED_DRAWS} tries; raise beta"
            )
        parts: list[list[int]] = [[] for _ in range(m)]
        for idx in per_class:
            share = rng.dirichlet(np.full(m, cfg.beta))
            share *= np.array([len(p) < size / m for p in parts])
            if not share.sum():  # every client full: the class has no samples left here
                continue
            share /= share.sum()
            cuts = (np.cumsum(share) * len(idx)).astype(int)[:-1]
            for part, piece in zip(parts, np.split(idx, cuts)):
                part.extend(piece.tolist())
        lists.extend(np.asarray(p, dtype=np.int64) for p in parts)
    return lists


def dirichlet_balanced(
    labels: np.ndarray, num_classes: int, cfg: PartitionConfig, rng: np.random.RandomState
) -> list[np.ndarray]:
    """The FedDF code base's "non_iid_dirichlet" partition (`build_non_iid_by_dirichlet`, then
    `DataPartitioner.partition_indices`): the per-client
    lists of `dirichlet_balanced_lists` are concatenated in client order and cut into `clients`
    equal consecutive slices of int(N / clients) samples (the code's partition sizes 1/clients);
    the N mod clients samples at the end go unused, as there. Every client therefore holds the
    same number of samples; the label skew comes from the Dirichlet lists its slice overlaps.
    Parameters: `partition.beta` (the code's non_iid_alpha) and `partition.clients`;
    `partition.min_size` does not apply (its own rule: half a chunk's average)."""
    flat = np.concatenate(dirichlet_balanced_lists(labels, num_classes, cfg, rng))
    per = int(1.0 / cfg.clients * len(labels))
    return [flat[i * per : (i + 1) * per] for i in range(cfg.clients)]


def writers(groups: np.ndarray, cfg: PartitionConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """NIID-Bench's "real" FEMNIST partition: permute the writers, split them into `clients`
    groups of (nearly) equal count, and give each client every sample of its writers. With
    `writers`, only a seeded choice of that many writers takes part (a paper's "about 2,000")."""
    ids = np.unique(groups)
    if cfg.writers is not None:
        if cfg.writers > len(ids):
            raise ConfigError(f"partition.writers={cfg.writers} exceeds the {len(ids)} writers of the training data")
        ids = np.sort(rng.choice(ids, cfg.writers, replace=False))
    if cfg.clients > len(ids):
        raise ConfigError(f"partition.clients={cfg.clients} exceeds the {len(ids)} writers of the training data")
    return [np.flatnonzero(np.isin(groups, chunk)) for chunk in np.array_split(rng.permutation(ids), cfg.clients)]


def domains(groups: np.ndarray, cfg: PartitionConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """Feature skew (FedBN's Office-Caltech-10): client i holds all of domain i, or with
    `domain_share` its first share x (the smallest domain's size) samples, as FedBN's
    fed_office.py trims every domain to half the smallest (no randomness; `rng` keeps the
    signature of the other kinds)."""
    ids = np.unique(groups)
    if cfg.clients != len(ids):
        raise ConfigError(
            f"partition.kind=domains makes one client per domain: partition.clients must be "
            f"{len(ids)} (the domains in the training data), not {cfg.clients}"
        )
    parts = [np.flatnonzero(groups == d) for d in ids]
    if cfg.domain_share is None:
        return parts
    keep = int(cfg.domain_share * min(len(p) for p in parts))
    if keep < 1:
        raise ConfigError(
            f"partition.domain_share={cfg.domain_share} keeps no sample of the smallest domain "
            f"({min(len(p) for p in parts)} training samples)"
        )
    return [p[:keep] for p in parts]


LABEL_PARTITIONS = {"iid": iid, "dirichlet": dirichlet, "classes": classes, "dirichlet_balanced": dirichlet_balanced}
GROUP_PARTITIONS = {"writers": writers, "domains": domains}  # by each sample's writer / domain
PARTITIONS = sorted([*LABEL_PARTITIONS, *GROUP_PARTITIONS])


def check_config(cfg: PartitionConfig, seed: int | None = None) -> None:
    """The checks that need no data: partition.kind and partition.rng (and the seed range the
    legacy generators accept). shared.config.schema.validate should call it, so that a bad value stops
    a run before any data is loaded; `partition` calls it again."""
    if cfg.kind not in PARTITIONS:
        raise ConfigError(f"partition.kind={cfg.kind!r} is unknown; valid: {PARTITIONS}")
    if cfg.rng is not None and cfg.rng not in RNGS:
        raise ConfigError(f"partition.rng={cfg.rng!r} is unknown; valid: null (our generator) or {', '.join(RNGS)}")
    if cfg.rng == "niid_bench" and cfg.kind not in NIID_BENCH_KINDS:
        raise ConfigError(
            f"partition.rng=niid_bench draws only the kinds {', '.join(NIID_BENCH_KINDS)} as NIID-Bench "
            f"does, not partition.kind={cfg.kind}; leave partition.rng unset (null)"
            + (" (dirichlet_balanced always draws as its released code)" if cfg.kind == "dirichlet_balanced" else "")
        )
    legacy = cfg.rng == "niid_bench" or cfg.kind == "dirichlet_balanced"
    if legacy and seed is not None and not 0 <= seed < 2**32:
        raise ConfigError(
            f"seed={seed} must lie in [0, 2**32) for np.random.RandomState "
            f"(partition.rng=niid_bench, partition.kind=dirichlet_balanced)"
        )


def validate_partition(cfg: RunConfig) -> None:
    """The partition section, against what the dataset holds (writers, domains), before any data loads."""
    p, d = cfg.partition, cfg.dataset
    check_config(p, cfg.seed)
    if p.kind == "writers":
        check(
            catalog.has_writers(cfg),
            f"partition.kind=writers needs writer ids, which dataset.name={d.name} has not; use "
            f"{' or '.join(catalog.names_where(lambda i: i.writers))} "
            "(or synthetic with dataset.synthetic.writers > 0)",
        )
    if p.kind == "domains":
        count = len(catalog.domains(cfg))
        check(
            count > 0,
            f"partition.kind=domains needs a dataset of domains, which dataset.name={d.name} is not; "
            f"use {' or '.join(catalog.names_where(lambda i: bool(i.domains)))} "
            "(or synthetic with dataset.synthetic.domains named)",
        )
        check(
            p.clients == count,
            f"partition.kind=domains makes one client of each of the {count} domains of "
            f"{d.name}: partition.clients must be {count}, not {p.clients}",
        )
    check(p.domain_share is None or p.kind == "domains", "partition.domain_share goes only with partition.kind=domains")
    if d.val_source == "unused":
        check(
            d.train_subset is not None and d.val_fraction > 0,
            "dataset.val_source=unused holds dataset.val_fraction "
            "x dataset.train_subset rows out of the training rows that train_subset leaves: set both",
        )
    if d.val_source == "dev":
        check(
            catalog.dataset_info(d.name).dev,
            f"dataset.val_source=dev needs a development split, which "
            f"dataset.name={d.name} has not; use {' or '.join(catalog.names_where(lambda i: i.dev))}",
        )
        check(
            d.val_fraction == 0,
            "dataset.val_source=dev validates on the development split, whole: leave dataset.val_fraction at 0",
        )


def partition(
    labels: np.ndarray, num_classes: int, cfg: PartitionConfig, seed: int, groups: np.ndarray | None = None
) -> list[np.ndarray]:
    """Indices into `labels` for each client; validates the parameters against the data first.
    `groups` holds each sample's writer or domain id, which the writers and domains kinds split by."""
    labels = np.asarray(labels)
    check_config(cfg, seed)
    if cfg.clients < 1 or cfg.clients > len(labels):
        raise ConfigError(f"partition.clients={cfg.clients} must lie in [1, {len(labels)}] (the training samples)")
    if cfg.kind in ("dirichlet", "dirichlet_balanced") and not cfg.beta > 0:
        raise ConfigError(f"partition.beta={cfg.beta} must be > 0 (Dirichlet concentration)")
    if cfg.kind == "dirichlet":
        if cfg.clients * cfg.min_size > len(labels):
            raise ConfigError(
                f"partition.min_size={cfg.min_size} x {cfg.clients} clients exceeds the "
                f"{len(labels)} training samples; valid min_size: [0, {len(labels) // cfg.clients}]"
            )
    if cfg.kind == "classes" and not 1 <= cfg.k <= num_classes:
        raise ConfigError(f"partition.k={cfg.k} must lie in [1, {num_classes}] (the number of classes)")
    parts = draw(labels, num_classes, cfg, seed, groups)
    empty = [client for client, part in enumerate(parts) if len(part) == 0]
    if empty:  # an empty client would train on nothing, and a round of empty clients would fail
        raise ConfigError(
            f"partition.kind={cfg.kind} leaves {len(empty)} of {cfg.clients} clients without samples "
            f"(client {empty[0]}{', ...' if len(empty) > 1 else ''}); use fewer clients"
            + (", a larger partition.beta or partition.min_size" if "dirichlet" in cfg.kind else "")
        )
    return parts


def draw(
    labels: np.ndarray, num_classes: int, cfg: PartitionConfig, seed: int, groups: np.ndarray | None
) -> list[np.ndarray]:
    """Each client's indices, by the kind's own rule (parameters already checked)."""
    if cfg.kind == "dirichlet_balanced":  # the FedDF code's conf.random_state
        return dirichlet_balanced(labels, num_classes, cfg, np.random.RandomState(seed))
    if cfg.rng == "niid_bench":  # np.random.seed(seed); random.seed(seed), as NIID-Bench's main
        if cfg.kind == "classes":
            return classes_niid_bench(labels, num_classes, cfg, np.random.RandomState(seed), random.Random(seed))
        return LABEL_PARTITIONS[cfg.kind](labels, num_classes, cfg, np.random.RandomState(seed))
    rng = np.random.default_rng([seed, 0x9A27])  # a stream of its own, apart from training's
    if cfg.kind in GROUP_PARTITIONS:
        if groups is None:
            raise ConfigError(
                f"partition.kind={cfg.kind} needs each sample's {cfg.kind[:-1]}, which this dataset does not record"
            )
        return GROUP_PARTITIONS[cfg.kind](np.asarray(groups), cfg, rng)
    return LABEL_PARTITIONS[cfg.kind](labels, num_classes, cfg, rng)


def count_matrix(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """Clients x classes sample counts."""
    labels = np.asarray(labels)
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def take_per_class(labels: np.ndarray, amount, rng: np.random.Generator | None) -> np.ndarray:
    """Indices of `amount` samples of each class (an int, or a fraction of the class); the
    first ones in order when rng is None, else a random choice."""
    chosen = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        n = amount if isinstance(amount, int) else int(round(amount * len(idx)))
        if n > len(idx):
            raise ConfigError(f"asked for {n} samples of class {c}, which has only {len(idx)}")
        chosen.append(idx[:n] if rng is None else rng.choice(idx, n, replace=False))
    return np.sort(np.concatenate(chosen))


def out_of_unused(labels: np.ndarray, kept: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """fraction x len(kept) rows, the same share of each class, of the training rows that are
    not `kept` (dataset.val_source=unused: a validation set apart from train_subset's rows)."""
    unused = np.setdiff1d(np.arange(len(labels)), kept)
    share = fraction * len(kept) / max(len(unused), 1)
    if not len(unused) or share > 1:
        raise ConfigError(
            f"dataset.val_source=unused: dataset.train_subset leaves {len(unused)} training rows, "
            f"fewer than dataset.val_fraction x train_subset ({fraction * len(kept):.0f})"
        )
    return unused[take_per_class(labels[unused], share, rng)]


@dataclass
class Division:
    """Where each row of a training set goes (`divide`)."""

    pool: np.ndarray  # the rows the clients share out, in order
    parts: list[np.ndarray]  # each client's samples, as positions in `pool`
    counts: np.ndarray  # clients x classes
    val: np.ndarray | None  # rows held out for validation (FedGKD-VOTE; dataset.val_source=dev: none)
    aux: np.ndarray | None  # rows of the server's auxiliary set (FedCAD, FedSSD)


def divide(labels: np.ndarray, num_classes: int, cfg: RunConfig, groups: np.ndarray | None = None) -> Division:
    """A training set's rows: those it keeps (dataset.train_subset, the same share of each
    class), the validation and auxiliary sets held out of them (dataset.val_source=unused: the
    validation set out of the rows it does not keep), then the rest partitioned over the
    clients. `groups`: each row's writer or domain, where the dataset records them."""
    rng = np.random.default_rng([cfg.seed, 0xDA7A])
    pool = np.arange(len(labels))
    if cfg.dataset.train_subset is not None and cfg.dataset.train_subset < len(pool):
        pool = take_per_class(labels, cfg.dataset.train_subset / len(pool), rng)

    def hold_out(amount) -> np.ndarray:
        nonlocal pool
        picked = pool[take_per_class(labels[pool], amount, rng)]
        pool = np.setdiff1d(pool, picked)
        return picked

    if cfg.dataset.val_source == "unused":
        val = out_of_unused(labels, pool, cfg.dataset.val_fraction, rng)
    else:
        val = hold_out(cfg.dataset.val_fraction) if cfg.dataset.val_fraction > 0 else None
    aux = None
    if cfg.aux.per_class > 0:
        if cfg.aux.source == "holdout":
            aux = hold_out(cfg.aux.per_class)
        else:  # Wang et al.'s rule: the first n samples of each class, overlapping client data
            aux = pool[take_per_class(labels[pool], cfg.aux.per_class, None)]
    parts = partition(labels[pool], num_classes, cfg.partition, cfg.seed, None if groups is None else groups[pool])
    return Division(pool, parts, count_matrix(labels[pool], parts, num_classes), val, aux)
