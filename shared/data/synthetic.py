"""Synthetic data for the tests and the smoke scale: seeded images (or token sequences) whose
class is learnable, made on the fly (`dataset.name=synthetic`, `dataset.synthetic.*`)."""

from __future__ import annotations

from pathlib import Path

import torch

from shared.config.schema import DatasetConfig, SyntheticConfig
from shared.data.catalog import TextVocabulary
from shared.data.datasets import Dataset, Split


def load_synthetic(name: str, cfg: DatasetConfig, root: Path) -> Dataset:
    """Seeded images whose class is learnable: each class is a smooth random template, and a
    sample is its template plus pixel noise. Deterministic for a given config. A template is a
    4x4 pattern of dark and bright cells per channel, blown up: classes differ by full contrast
    over about half their area, so that a few SGD steps separate them (the smoke scale's 4
    rounds; uniform grey levels left its global models at chance). `synthetic.overlap=a` blends
    into each sample another class's template by a share up to a (`blend`): harder classes,
    some of them ambiguous, so that accuracy stays below 100%.

    `synthetic.domains=[names]` gives every sample (train and test) one of these domains, each
    shifting the brightness of the channels its own way (Office-Caltech-10's feature skew);
    `synthetic.writers=n` gives every training sample one of n writers (FEMNIST's);
    `synthetic.text_length=L` makes token sequences instead of images."""
    s = cfg.synthetic
    if s.text_length:
        return synthetic_text(name, s)
    g = torch.Generator().manual_seed(12345)
    coarse = (torch.rand(s.num_classes, s.channels, 4, 4, generator=g) > 0.5).float()
    templates = torch.nn.functional.interpolate(
        coarse, size=(s.image_size, s.image_size), mode="bilinear", align_corners=False
    )
    shifts = (torch.rand(len(s.domains), s.channels, 1, 1, generator=g) - 0.5) * 0.5 if s.domains else None

    def draw(per_class: int) -> Split:
        y = torch.arange(s.num_classes).repeat_interleave(per_class)
        noise = torch.randn(len(y), s.channels, s.image_size, s.image_size, generator=g)
        x = blend(templates, y, s.overlap, g) + s.noise * 0.25 * noise
        domain = None
        if shifts is not None:
            domain = torch.arange(len(y)) % len(s.domains)  # every class in every domain
            x = x + shifts[domain]
        return Split((x.clamp(0, 1) * 255).round().to(torch.uint8), y, domain)

    train, test = draw(s.train_per_class), draw(s.test_per_class)
    classes = [f"class{i}" for i in range(s.num_classes)]
    dataset = Dataset(name, train, test, classes, (0.5,) * s.channels, (0.25,) * s.channels, augment=False)
    if s.domains:
        dataset.group_kind, dataset.groups = "domain", list(s.domains)
    if s.writers:
        train.group = torch.randint(s.writers, (len(train),), generator=g)
        dataset.group_kind, dataset.groups = "writer", [f"writer{i}" for i in range(s.writers)]
    return dataset


def blend(templates: torch.Tensor, y: torch.Tensor, overlap: float | None, g: torch.Generator) -> torch.Tensor:
    """Each sample's class template, mixed with another class's by a share drawn uniformly from
    [0, overlap): the samples mixed by nearly half lie near the class boundary, where a small
    change of the weights changes predictions, and those mixed by more than half look like the
    other class, so that accuracy stays below 100%. None: the template alone (draws nothing)."""
    if overlap is None:
        return templates[y]
    classes = len(templates)
    other = (y + torch.randint(1, classes, y.shape, generator=g)) % classes
    share = (torch.rand(len(y), generator=g) * overlap).view(-1, 1, 1, 1)
    return (1 - share) * templates[y] + share * templates[other]


def synthetic_text(name: str, s: SyntheticConfig) -> Dataset:
    """Seeded token sequences whose class is learnable: each class owns a band of the
    vocabulary, and a sequence of random length mixes tokens of its class's band with tokens
    drawn from the whole vocabulary (more of those the higher `noise`); 0 pads."""
    g = torch.Generator().manual_seed(12345)
    band = (s.vocab_size - 1) // s.num_classes
    signal = 1 / (1 + s.noise)  # the share of a sequence's tokens that come from its class's band

    def draw(per_class: int) -> Split:
        y = torch.arange(s.num_classes).repeat_interleave(per_class)
        shape = (len(y), s.text_length)
        own = 1 + y[:, None] * band + torch.randint(band, shape, generator=g)
        anywhere = torch.randint(1, s.vocab_size, shape, generator=g)
        ids = torch.where(torch.rand(shape, generator=g) < signal, own, anywhere)
        lengths = torch.randint(max(1, s.text_length // 2), s.text_length + 1, (len(y), 1), generator=g)
        ids[torch.arange(s.text_length) >= lengths] = 0
        return Split(ids, y)

    train, test = draw(s.train_per_class), draw(s.test_per_class)
    classes = [f"class{i}" for i in range(s.num_classes)]
    return Dataset(name, train, test, classes, (), (), augment=False, text=TextVocabulary(s.vocab_size, pad_id=0))
