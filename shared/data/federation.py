"""dataset -> held-out sets -> partition -> clients, with all of a run's data on its device.

A `Client` is a view (an index tensor) into the device-resident training set; its batches are
shuffled, augmented and normalised on the device, from a generator seeded by (seed, round,
client), so a round replays identically after a resume and regardless of client order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from shared.config.schema import RunConfig
from shared.data.datasets import Dataset, Split, load_dataset
from shared.data.partition import Division, divide


class Augmenter:
    """uint8 batches -> normalised float batches, with random crop (of the image padded by
    reflection or with black) and flip, then optionally a random rotation, in torchvision's
    order (FedBN's Office-Caltech-10: flip, rotation +-30, no crop; MOON's CIFAR-100: crop of
    the zero-padded image, flip, rotation +-15)."""

    def __init__(
        self,
        mean,
        std,
        augment: bool,
        device: torch.device,
        channels_last: bool = False,
        pad: int = 4,
        max_rotation: float = 0.0,
        pad_mode: str = "reflect",
    ):
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1) * 255
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1) * 255
        self.augment, self.pad, self.channels_last, self.max_rotation = augment, pad, channels_last, max_rotation
        self.pad_mode = pad_mode

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return self.layout(self.standardize(x))

    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() - self.mean) / self.std

    def layout(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def rotate(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Each image turned about its centre by a uniform angle in +-max_rotation degrees,
        nearest pixel, corners filled black: torchvision's RandomRotation defaults."""
        angle = torch.rand(len(x), generator=generator, device=x.device, dtype=x.dtype)  # x's: grid_sample wants one
        angle = (angle * 2 - 1) * math.radians(self.max_rotation)
        cos, sin, zero = angle.cos(), angle.sin(), torch.zeros_like(angle)
        theta = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)

    def crop_and_flip(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """A random crop of the padded image (none when pad is 0) and a random flip.

        Every crop is a window of the padded image, or of its mirror image when the sample is
        flipped (the window at dx of the mirror is the mirrored window at 2p - dx); `unfold`
        makes each window a view, so one gather cuts them all. It runs on the raw pixels, before
        standardisation: uint8 is a quarter of the bytes to move, and the numbers are the same."""
        b, c, h, w = x.shape
        dev, p = x.device, self.pad
        if not p:
            flip = torch.rand(b, 1, 1, 1, generator=generator, device=dev) < 0.5
            return torch.where(flip, x.flip(-1), x)
        padded = F.pad(x, (p, p, p, p), mode=self.pad_mode)  # "constant": black, as torchvision's RandomCrop
        dy = torch.randint(0, 2 * p + 1, (b,), generator=generator, device=dev)
        dx = torch.randint(0, 2 * p + 1, (b,), generator=generator, device=dev)
        flip = torch.rand(b, generator=generator, device=dev) < 0.5
        windows = torch.stack([padded, padded.flip(-1)]).unfold(3, h, 1).unfold(4, w, 1)  # (2, b, c, 2p+1, 2p+1, h, w)
        return windows[flip.long(), torch.arange(b, device=dev), :, dy, torch.where(flip, 2 * p - dx, dx)]

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if not self.augment:
            return self.normalize(x)
        x = self.crop_and_flip(x, generator)
        if self.max_rotation:  # on the raw pixels, so that the corners are black as in torchvision
            x = self.rotate(x.float(), generator)
        return self.normalize(x)


class TokenIds:
    """The Augmenter's place for text: token ids go to the model as they are (the model derives
    its attention mask from the padding id), without normalisation or augmentation."""

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return x


AUGMENT_CHUNK = 1 << 24  # values augmented at once by Client.chunks (64 MiB as float32)


@dataclass
class Client:
    id: int
    index: torch.Tensor  # rows of the federation's training tensors, on the device
    federation: "Federation"

    @property
    def num_samples(self) -> int:
        return len(self.index)

    def epoch_length(self, batch_size: int) -> int:
        """Samples an epoch of `batches` yields: all, less a trailing batch of a single sample
        (BatchNorm cannot train on it)."""
        n = self.num_samples
        return n - 1 if n > 1 and n % batch_size == 1 else n

    def num_batches(self, batch_size: int) -> int:
        return math.ceil(self.epoch_length(batch_size) / batch_size)

    def batches(
        self, batch_size: int, generator: torch.Generator, augment: bool = True, shuffle: bool = True
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch of (normalised images or token ids, labels), `num_batches` of them."""
        for x, y in self.chunks(batch_size, generator, augment, shuffle):
            for start in range(0, len(y), batch_size):
                yield x[start : start + batch_size], y[start : start + batch_size]

    def in_order(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Every sample once, in the client's order, normalised and unaugmented, in batches: what
        a statistic of the client's data reads (an epoch of `batches` can leave one sample out)."""
        fed = self.federation
        for start in range(0, self.num_samples, batch_size):
            rows = self.index[start : start + batch_size]
            yield fed.augmenter.normalize(fed.train_x[rows]), fed.train_y[rows]

    def chunks(
        self, batch_size: int, generator: torch.Generator, augment: bool = True, shuffle: bool = True
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch of `batches`, as consecutive runs of whole batches (the last one may end
        with the epoch's short batch), each augmented at once.

        Augmentation runs on chunks of whole batches (up to AUGMENT_CHUNK values, often the
        whole epoch): a few large kernels instead of a dozen small ones per batch, which is
        what the GPU waits on with small models. The chunks do not depend on anything but the
        client and the batch size, so every trainer sees the same samples for a seed."""
        fed = self.federation
        order = self.index
        if shuffle:
            order = order[torch.randperm(len(order), generator=generator, device=order.device)]
        order = order[: self.epoch_length(batch_size)]
        per_sample = fed.train_x[0].numel()
        chunk = batch_size * max(1, AUGMENT_CHUNK // (per_sample * batch_size))
        for chunk_start in range(0, len(order), chunk):
            rows = order[chunk_start : chunk_start + chunk]
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
    augmenter: Augmenter | TokenIds
    device: torch.device

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    @property
    def input_shape(self) -> tuple[int, ...]:
        """(channels, height, width) of an image, (length,) of a token sequence."""
        return tuple(self.train_x.shape[1:])


def on_device(split: Split, device: torch.device, rows: np.ndarray | None = None) -> Split:
    """The split's rows (all of them where `rows` is None) on the device."""
    index = slice(None) if rows is None else torch.as_tensor(rows, dtype=torch.long)
    group = None if split.group is None else split.group[index].to(device)
    return Split(split.x[index].to(device), split.y[index].to(device), group)


def validation_split(dataset: Dataset, division: Division, cfg: RunConfig, device: torch.device) -> Split | None:
    """The rows held out for validation, or the dataset's dev split (dataset.val_source=dev)."""
    if cfg.dataset.val_source == "dev":
        return on_device(dataset.dev, device)
    return None if division.val is None else on_device(dataset.train, device, division.val)


def build_federation(cfg: RunConfig, device: torch.device, dataset: Dataset | None = None) -> Federation:
    """`dataset`: cfg's dataset, already loaded (runs of a group share one load)."""
    dataset = load_dataset(cfg) if dataset is None else dataset
    groups = None if dataset.train.group is None else dataset.train.group.numpy()
    division = divide(dataset.train.y.numpy(), dataset.num_classes, cfg, groups)
    pool = torch.as_tensor(division.pool)
    federation = Federation(
        dataset=dataset,
        train_x=dataset.train.x[pool].to(device),
        train_y=dataset.train.y[pool].to(device),
        test=on_device(dataset.test, device),
        clients=[],
        counts=division.counts,
        aux=None if division.aux is None else on_device(dataset.train, device, division.aux),
        val=validation_split(dataset, division, cfg, device),
        augmenter=TokenIds()
        if dataset.text
        else Augmenter(
            dataset.mean,
            dataset.std,
            dataset.augment,
            device,
            cfg.trainer.channels_last,
            dataset.crop_pad,
            dataset.max_rotation,
            dataset.pad_mode,
        ),
        device=device,
    )
    federation.clients = [
        Client(i, torch.as_tensor(p, device=device), federation) for i, p in enumerate(division.parts)
    ]
    return federation
