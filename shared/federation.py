"""dataset -> held-out sets -> partition -> clients, with all of a run's data on its device.

A `Client` is a view (an index tensor) into the device-resident training set; its batches are
shuffled, augmented and normalised on the device, from a generator seeded by (seed, round,
client), so a round replays identically after a resume and regardless of client order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from shared.config import ConfigError, RunConfig
from shared.data import Dataset, Split, load_dataset
from shared.partition import count_matrix, partition


def derive_seed(*parts: int) -> int:
    """An independent 63-bit seed for each (seed, round, client, ...) tuple."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, np.uint64)[0] >> np.uint64(1))


class Augmenter:
    """uint8 batches -> normalised float batches, with random crop (reflect pad) and flip."""

    def __init__(self, mean, std, augment: bool, device: torch.device, channels_last: bool = False, pad: int = 4):
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1) * 255
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1) * 255
        self.augment, self.pad, self.channels_last = augment, pad, channels_last

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.float() - self.mean) / self.std
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        x = self.normalize(x)
        if not self.augment:
            return x
        b, c, h, w = x.shape
        dev, p = x.device, self.pad
        padded = F.pad(x, (p, p, p, p), mode="reflect")
        dy = torch.randint(0, 2 * p + 1, (b, 1), generator=generator, device=dev)
        dx = torch.randint(0, 2 * p + 1, (b, 1), generator=generator, device=dev)
        flip = torch.rand(b, 1, generator=generator, device=dev) < 0.5
        rows = dy + torch.arange(h, device=dev)
        cols = torch.arange(w, device=dev).expand(b, w)
        cols = torch.where(flip, w - 1 - cols, cols) + dx  # crop and flip in one gather
        out = padded[torch.arange(b, device=dev).view(b, 1, 1, 1), torch.arange(c, device=dev).view(1, c, 1, 1),
                     rows.view(b, 1, h, 1), cols.view(b, 1, 1, w)]
        return out.contiguous(memory_format=torch.channels_last) if self.channels_last else out


@dataclass
class Client:
    id: int
    index: torch.Tensor  # rows of the federation's training tensors, on the device
    federation: "Federation"

    @property
    def num_samples(self) -> int:
        return len(self.index)

    def batches(self, batch_size: int, generator: torch.Generator, augment: bool = True,
                shuffle: bool = True) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch of (normalised images, labels). A trailing batch of a single sample is
        dropped (BatchNorm cannot train on it)."""
        fed = self.federation
        order = self.index
        if shuffle:
            order = order[torch.randperm(len(order), generator=generator, device=order.device)]
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            if len(rows) < 2 and len(order) > 1:
                break
            x = fed.train_x[rows]
            x = fed.augmenter(x, generator) if augment else fed.augmenter.normalize(x)
            yield x, fed.train_y[rows]


@dataclass
class Federation:
    dataset: Dataset  # the full dataset on the CPU (class names, statistics)
    train_x: torch.Tensor  # device-resident training pool the clients index into
    train_y: torch.Tensor
    test: Split  # on the device
    clients: list[Client]
    counts: np.ndarray  # clients x classes
    aux: Split | None  # server's auxiliary set (FedCAD, FedSSD), on the device
    val: Split | None  # held-out validation split (FedGKD-VOTE), on the device
    augmenter: Augmenter
    device: torch.device

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_x.shape[1:])


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


def build_federation(cfg: RunConfig, device: torch.device) -> Federation:
    dataset = load_dataset(cfg)
    rng = np.random.default_rng([cfg.seed, 0xDA7A])
    labels = dataset.train.y.numpy()
    pool = np.arange(len(labels))  # training indices still available to clients

    if cfg.dataset.train_subset is not None and cfg.dataset.train_subset < len(pool):
        fraction = cfg.dataset.train_subset / len(pool)
        pool = take_per_class(labels, fraction, rng)

    def hold_out(amount) -> np.ndarray:
        nonlocal pool
        picked = pool[take_per_class(labels[pool], amount, rng)]
        pool = np.setdiff1d(pool, picked)
        return picked

    val = hold_out(cfg.dataset.val_fraction) if cfg.dataset.val_fraction > 0 else None
    aux = None
    if cfg.aux.per_class > 0:
        if cfg.aux.source == "holdout":
            aux = hold_out(cfg.aux.per_class)
        else:  # Wang et al.'s rule: the first n samples of each class, overlapping client data
            aux = pool[take_per_class(labels[pool], cfg.aux.per_class, None)]

    parts = partition(labels[pool], dataset.num_classes, cfg.partition, cfg.seed)
    counts = count_matrix(labels[pool], parts, dataset.num_classes)

    def to_device(split: Split) -> Split:
        return Split(split.x.to(device), split.y.to(device))

    pool_t = torch.as_tensor(pool)
    federation = Federation(
        dataset=dataset,
        train_x=dataset.train.x[pool_t].to(device),
        train_y=dataset.train.y[pool_t].to(device),
        test=to_device(dataset.test),
        clients=[],
        counts=counts,
        aux=None if aux is None else to_device(dataset.train.subset(aux)),
        val=None if val is None else to_device(dataset.train.subset(val)),
        augmenter=Augmenter(dataset.mean, dataset.std, dataset.augment, device, cfg.trainer.channels_last),
        device=device,
    )
    federation.clients = [Client(i, torch.as_tensor(p, device=device), federation) for i, p in enumerate(parts)]
    return federation
