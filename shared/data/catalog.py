"""What is known of each dataset before it is loaded: its loader, shape and structure.

The one place for these facts: the loaders (shared/data/datasets.py), the config check and the smoke
scale's synthetic stand-ins (shared/targets/scales.py) all read them here. Importing this module
imports no loader and no torch, so a config can be checked before anything heavy loads.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from shared.config.schema import FORCED_OFF, FORCED_ON, ConfigError, RunConfig, check
from shared.runs.files import write_atomically


class DataError(RuntimeError):
    """Data that is missing, cannot be fetched, or fails verification."""


DATA_ROOT_ENV = "FEDREPRO_DATA"


def data_root(configured: str | None) -> Path:
    """Where datasets are kept: the config's data_root, else $FEDREPRO_DATA, else ./data."""
    return Path(configured or os.environ.get(DATA_ROOT_ENV) or "data").expanduser()


def file_digest(path: Path, algorithm: str = "md5") -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


COPIES = "copies"  # under the data root


def find_copy(root: Path, sha256: str, remember: bool = True) -> Path:
    """The file under <root>/copies/ whose SHA-256 is `sha256`. Digests are remembered per
    (name, size, mtime) in <root>/cache/copies.json, so each file is hashed once; `remember=False`
    reads that memo and writes nothing (the workflow, locating a copy while Snakemake reads it)."""
    folder, memo_path = root / COPIES, root / "cache" / "copies.json"
    try:
        remembered = json.loads(memo_path.read_text()) if memo_path.exists() else {}
    except ValueError:  # a torn memo is only a cache: hash again
        remembered = {}
    memo = dict(remembered)
    found = None
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not path.is_file():
            continue
        stat = path.stat()
        key = f"{path.name}|{stat.st_size}|{stat.st_mtime_ns}"
        memo[key] = memo.get(key) or file_digest(path, "sha256")
        if memo[key] == sha256:
            found = path
            break
    if remember and memo != remembered:  # runs in parallel share the memo: each writes it whole, atomically
        write_atomically(memo_path, lambda tmp: tmp.write_text(json.dumps(memo, indent=1)))
    if found is None:
        raise DataError(
            f"dataset.copy={sha256[:12]}...: no file with that SHA-256 in {folder}; "
            f"put the copy (e.g. cifar10-jpeg.zip) there"
        )
    return found


@dataclass(frozen=True)
class TextVocabulary:
    """What the token ids of a text dataset index: models size their embedding by `size` and
    derive the attention mask from `pad_id`."""

    size: int
    pad_id: int


@dataclass(frozen=True)
class DatasetInfo:
    loader: str  # "module:function", imported only when the dataset loads
    classes: int | None = None  # None: known once loaded (imagefolder, synthetic)
    channels: int = 3
    side: int = 32  # images are side x side
    text: bool = False  # token ids from the tokenizer of model.pretrained
    writers: bool = False  # Split.group holds each training sample's writer (partition.kind=writers)
    domains: tuple[str, ...] = field(default=())  # Split.group holds the sample's domain (partition.kind=domains)
    train_size: int = 50_000  # samples in the full training and test splits (for cost estimates)
    test_size: int = 10_000
    display: str = ""  # its name in captions ("CIFAR-10"); empty: dataset.name
    copyable: bool = False  # dataset.copy can stand in for the official files (their classes are known)
    writer_count: int | None = None  # writers of the training split (cost estimates of partition.writers)
    dev: bool = False  # a development split besides train and test (dataset.val_source=dev)


@dataclass(frozen=True)
class Augmentation:
    """A training transform of a paper's code (dataset.augmentation), beside the crop and flip."""

    crop_pad: int  # pad by this much, then crop back to the image's size
    pad_mode: str  # "reflect", or "constant" (black)
    max_rotation: float  # then rotate by a uniform angle in +-this many degrees (0: none)
    source: str


AUGMENTATIONS: dict[str, Augmentation] = {
    "niid_bench": Augmentation(4, "reflect", 0.0, "NIID-Bench's CIFAR-10 transform (our CIFAR default)"),
    "feddf": Augmentation(
        4,
        "constant",
        0.0,
        "FedDF's and FedGKD's CIFAR and Tiny-ImageNet transform: RandomHorizontalFlip, RandomCrop(side, padding=4)",
    ),
    "moon_cifar100": Augmentation(
        4,
        "constant",
        15.0,
        "MOON's CIFAR-100 transform (FedCSD, FedSSD, FedCAD): RandomCrop(32, "
        "padding=4), RandomHorizontalFlip, RandomRotation(15)",
    ),
}

# both FEMNISTs: 28x28 grey handwriting, each training sample's writer kept
FEMNIST = dict(loader="shared.data.vision:load_femnist", channels=1, side=28, writers=True)
DATASETS: dict[str, DatasetInfo] = {
    "cifar10": DatasetInfo("shared.data.datasets:load_cifar", 10, display="CIFAR-10", copyable=True),
    "cifar100": DatasetInfo("shared.data.datasets:load_cifar", 100),
    "imagefolder": DatasetInfo("shared.data.datasets:load_image_folder"),
    "synthetic": DatasetInfo("shared.data.synthetic:load_synthetic"),
    # LEAF's 805,263 samples, each writer's split 90/10 (shared/data/vision.py), of its 3,550 users
    "femnist": DatasetInfo(**FEMNIST, classes=62, train_size=725_000, test_size=80_000, writer_count=3_550),
    # NIID-Bench's training.pt and test.pt: the 10 digits, split as TFF's EMNIST only_digits
    "femnist_digits": DatasetInfo(**FEMNIST, classes=10, train_size=341_873, test_size=40_832, writer_count=3_383),
    "tiny_imagenet": DatasetInfo("shared.data.vision:load_tiny_imagenet", 200, side=64, train_size=100_000),
    "office_caltech10": DatasetInfo(
        "shared.data.vision:load_office_caltech10",
        10,
        side=256,
        domains=("amazon", "caltech", "dslr", "webcam"),
        train_size=2_025,
        test_size=508,
    ),
    "ag_news": DatasetInfo("shared.data.text:load_text_dataset", 4, text=True, train_size=120_000, test_size=7_600),
    "sst5": DatasetInfo(
        "shared.data.text:load_text_dataset", 5, text=True, train_size=8_544, test_size=2_210, dev=True
    ),
}


def dataset_info(name: str) -> DatasetInfo:
    if name not in DATASETS:
        raise ConfigError(f"dataset.name={name!r} is unknown; valid: {sorted(DATASETS)}")
    return DATASETS[name]


def is_sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def copy_label(name: str, sha256: str, kind: str = "") -> str:
    """How every output built from a copy names its data: "CIFAR-10, JPEG copy sha256 dfaab4e…"."""
    info = dataset_info(name)
    return f"{info.display or name}, {kind + ' ' if kind else ''}copy sha256 {sha256[:7]}…"


def names_where(predicate) -> list[str]:
    return [name for name, info in DATASETS.items() if predicate(info)]


def is_text(cfg: RunConfig) -> bool:
    """Token ids instead of images: a text dataset, or synthetic data with synthetic.text_length > 0."""
    d = cfg.dataset
    return dataset_info(d.name).text or (d.name == "synthetic" and d.synthetic.text_length > 0)


def has_writers(cfg: RunConfig) -> bool:
    d = cfg.dataset
    return dataset_info(d.name).writers or (d.name == "synthetic" and d.synthetic.writers > 0)


def num_classes(cfg: RunConfig) -> int | None:
    """The classes a run tells apart (None: an image folder's, known once it loads)."""
    d = cfg.dataset
    return d.synthetic.num_classes if d.name == "synthetic" else dataset_info(d.name).classes


def domains(cfg: RunConfig) -> tuple[str, ...]:
    d = cfg.dataset
    return tuple(d.synthetic.domains) if d.name == "synthetic" else dataset_info(d.name).domains


def image_shape(cfg: RunConfig) -> tuple[int, int] | None:
    """(channels, side) of the dataset's images where known before loading (not for imagefolder)."""
    d = cfg.dataset
    if is_text(cfg) or d.name == "imagefolder":
        return None
    if d.name == "synthetic":
        return d.synthetic.channels, d.synthetic.image_size
    info = dataset_info(d.name)
    return info.channels, info.side


def validate_dataset(cfg: RunConfig) -> None:
    """The dataset section: a known name and values each dataset can take."""
    d = cfg.dataset
    dataset_info(d.name)
    check(d.name != "imagefolder" or d.path, "dataset.path is required for dataset.name=imagefolder")
    check(
        d.copy is None or dataset_info(d.name).copyable,
        f"dataset.copy applies to {', '.join(names_where(lambda i: i.copyable))}, not dataset.name={d.name}",
    )
    check(
        d.copy is None or is_sha256(d.copy),
        f"dataset.copy={d.copy!r} must be a SHA-256 (64 hex digits) of the copy's file",
    )
    transform = d.transform
    check(
        transform is None or transform in AUGMENTATIONS,
        f"dataset.augmentation={d.augmentation!r} is unknown; valid: "
        f"{sorted([FORCED_OFF, FORCED_ON, *AUGMENTATIONS, *(f'{FORCED_ON}:{name}' for name in AUGMENTATIONS)])}",
    )
    check(transform is None or not is_text(cfg), "dataset.augmentation's transforms apply to images, not token ids")
    s = d.synthetic
    check(len(set(s.domains)) == len(s.domains), f"dataset.synthetic.domains={s.domains} repeats a name")
    check(
        sum(n > 0 for n in (len(s.domains), s.writers, s.text_length)) <= 1,
        "dataset.synthetic: set at most one of domains, writers and text_length",
    )
    check(
        not s.text_length or s.overlap is None,
        "dataset.synthetic.overlap applies to images, not token sequences (text_length)",
    )
    check(
        not s.text_length or s.vocab_size > s.num_classes,
        f"dataset.synthetic.vocab_size={s.vocab_size} must exceed num_classes={s.num_classes} "
        "(a band of tokens per class)",
    )
