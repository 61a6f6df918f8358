"""Datasets: download, verify, convert once into a compact tensor cache, load in seconds.

Every dataset ends up as two `Split`s of uint8 images (N, C, H, W) (or, for text, int64 token
ids (N, L)) and int64 labels, which the trainer moves to its device once. Normalisation and
augmentation happen there, batched (`shared.data.federation.Augmenter`), so no per-sample Python
runs in the training loop. CIFAR and image folders live here; FEMNIST, Tiny-ImageNet and
Office-Caltech-10 in `shared.data.vision`; AG News and SST-5 in `shared.data.text`; the
synthetic data of the tests and the smoke scale in `shared.data.synthetic`.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import pickle
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np
import torch

from shared.config.schema import DatasetConfig, RunConfig
from shared.data.catalog import (
    AUGMENTATIONS,
    DATA_ROOT_ENV,
    DataError,
    TextVocabulary,
    data_root,
    dataset_info,
    file_digest,
    find_copy,
)
from shared.runs.tensor_files import save_tensors


@dataclass
class Split:
    x: torch.Tensor  # uint8 images (N, C, H, W), or int64 token ids (N, L) for text
    y: torch.Tensor  # int64, (N,)
    group: torch.Tensor | None = None  # int64 (N,): the sample's writer or domain (Dataset.group_kind)

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Dataset:
    name: str
    train: Split
    test: Split
    classes: list[str]
    mean: tuple[float, ...]  # per channel, on the 0..1 scale
    std: tuple[float, ...]
    augment: bool  # random crop (pad 4, reflect) + horizontal flip by default
    crop_pad: int = 4  # augmentation: pad by this much, then crop back (0: flip only)
    max_rotation: float = 0.0  # augmentation: rotate by a uniform angle in +-this many degrees
    pad_mode: str = "reflect"  # augmentation's padding: "reflect" or "constant" (black)
    # "writer" (FEMNIST: partition.kind=writers) or "domain" (Office-Caltech-10: one client per
    # domain, accuracy reported per domain); `groups` names the values of Split.group.
    group_kind: str | None = None
    groups: list[str] = field(default_factory=list)
    text: TextVocabulary | None = None  # set for token-id datasets
    dev: Split | None = None  # a development split, where the dataset has one (catalog's `dev`)

    @property
    def num_classes(self) -> int:
        return len(self.classes)


# --- caching ------------------------------------------------------------------------------

SPLITS = ("train", "test")  # every cached dataset's; a dev split besides where the catalog says so


def cached(cache: Path, build: Callable[[], dict], splits: tuple[str, ...] = SPLITS) -> dict:
    """The arrays of `cache`, built (and saved) first where it is absent, unreadable or does not
    hold a dataset's arrays of `splits`; a cache is derived data, so a bad one is rebuilt, never trusted."""
    if cache.exists():
        try:
            arrays = torch.load(cache, weights_only=True)
            problem = cache_problem(arrays, splits)
        except Exception as exc:
            problem = f"unreadable ({type(exc).__name__})"
        if problem is None:
            return arrays
        print(f"[data] cache {cache} {problem}; rebuilding it", file=sys.stderr)
    started = time.perf_counter()
    arrays = build()
    save_tensors(arrays, cache)  # atomically; a full disk is an OSError that says so
    # what a first run pays once: the job's log says so
    print(f"[data] built {cache} ({cache.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - started:.1f} s")
    return arrays


def cache_problem(arrays, splits: tuple[str, ...] = SPLITS) -> str | None:
    """Why a loaded cache is not a dataset's arrays of `splits` (None: it is): the keys, each
    split's samples and labels of one length, int64 labels that index `classes`, one sample shape."""
    keys = (*(f"{split}_{part}" for split in splits for part in "xy"), "classes")
    if not isinstance(arrays, dict) or not all(k in arrays for k in keys):
        return f"lacks some of the keys {', '.join(keys)}"
    classes = arrays["classes"]
    if not isinstance(classes, (list, tuple)) or not all(isinstance(c, str) for c in classes):
        return "holds no list of class names"
    for split in splits:
        x, y, group = arrays[f"{split}_x"], arrays[f"{split}_y"], arrays.get(f"{split}_group")
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or y.dtype != torch.int64 or y.dim() != 1:
            return f"holds no {split} tensors (int64 labels)"
        if len(x) != len(y) or group is not None and (not isinstance(group, torch.Tensor) or len(group) != len(y)):
            return f"holds {split} samples, labels or groups of different lengths"
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= len(classes)):
            return f"holds {split} labels outside the {len(classes)} classes"
    if any(arrays[f"{split}_x"].shape[1:] != arrays["train_x"].shape[1:] for split in splits):
        return "holds splits of samples of different shapes"
    return None


def dataset_from_arrays(name: str, arrays: dict, mean, std, augment: bool, **options) -> Dataset:
    """A Dataset from a cache's arrays; `train_group`/`test_group`, `groups` and the dev split
    where present."""
    return Dataset(
        name=name,
        train=Split(arrays["train_x"], arrays["train_y"], arrays.get("train_group")),
        test=Split(arrays["test_x"], arrays["test_y"], arrays.get("test_group")),
        dev=Split(arrays["dev_x"], arrays["dev_y"]) if "dev_x" in arrays else None,
        classes=list(arrays["classes"]),
        mean=tuple(mean),
        std=tuple(std),
        augment=augment,
        groups=list(arrays.get("groups", [])),
        **options,
    )


# --- CIFAR-10 / CIFAR-100 from the official archives --------------------------------------


@dataclass(frozen=True)
class Archive:
    url: str
    filename: str
    md5: str | None = None  # the checksum published with the archive (also torchvision's)
    sha256: str | None = None  # where no MD5 is published


CIFAR = {
    "cifar10": dict(
        archive=Archive(
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            "cifar-10-python.tar.gz",
            "c58f30108f718f92721af3b95e74349a",
        ),
        train=[f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)],
        test=["cifar-10-batches-py/test_batch"],
        meta=("cifar-10-batches-py/batches.meta", "label_names"),
        labels=b"labels",
        # in label order (the archive's batches.meta); a copy (dataset.copy) must hold these
        classes=("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
        # MOON's normalisation constants (NIID-Bench's CIFAR-10 transforms do not normalise)
        mean=(125.3 / 255, 123.0 / 255, 113.9 / 255),
        std=(63.0 / 255, 62.1 / 255, 66.7 / 255),
    ),
    "cifar100": dict(
        archive=Archive(
            "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
            "cifar-100-python.tar.gz",
            "eb9058c3a382ffc7106e4002c42a8d85",
        ),
        train=["cifar-100-python/train"],
        test=["cifar-100-python/test"],
        meta=("cifar-100-python/meta", "fine_label_names"),
        labels=b"fine_labels",
        mean=(0.5071, 0.4865, 0.4409),
        std=(0.2673, 0.2564, 0.2762),
    ),
}


def fetch_archive(archive: Archive, root: Path) -> Path:
    """Return the verified archive under `root`, downloading it if it is not there."""
    path = root / archive.filename
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        print(f"[data] downloading {archive.url} -> {path}")
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(archive.url, timeout=60) as response, open(tmp, "wb") as out:
                while block := response.read(1 << 20):
                    out.write(block)
        except (urllib.error.URLError, OSError) as exc:
            tmp.unlink(missing_ok=True)
            raise DataError(
                f"{archive.filename} is not in {root} and downloading {archive.url} failed ({exc}). "
                f"Download it by hand into {root}, or point data_root (or ${DATA_ROOT_ENV}) "
                f"at a directory that holds it."
            ) from exc
        os.replace(tmp, path)
        seconds = time.perf_counter() - started
        print(f"[data] downloaded {path.name} ({path.stat().st_size / 1e6:.0f} MB) in {seconds:.0f} s")
    algorithm, expected = ("md5", archive.md5) if archive.md5 else ("sha256", archive.sha256)
    actual = file_digest(path, algorithm)
    if actual != expected:
        raise DataError(
            f"{path} fails verification: {algorithm} {actual}, expected {expected}. "
            f"The file is corrupt or not the official archive; delete it to download it again."
        )
    return path


def _unpickle(tar: tarfile.TarFile, member: str) -> dict:
    # Only ever called on an archive whose checksum matched the official one.
    with tar.extractfile(member) as f:
        return pickle.load(f, encoding="bytes")


def convert_cifar(archive_path: Path, spec: dict) -> dict:
    with tarfile.open(archive_path, "r:gz") as tar:

        def read(members):
            batches = [_unpickle(tar, m) for m in members]
            x = np.concatenate([b[b"data"] for b in batches]).reshape(-1, 3, 32, 32)
            y = np.concatenate([np.asarray(b[spec["labels"]]) for b in batches])
            return torch.from_numpy(np.ascontiguousarray(x, dtype=np.uint8)), torch.from_numpy(y.astype(np.int64))

        train_x, train_y = read(spec["train"])
        test_x, test_y = read(spec["test"])
        meta_member, meta_key = spec["meta"]
        with tar.extractfile(meta_member) as f:
            classes = [c.decode() for c in pickle.load(f, encoding="bytes")[meta_key.encode()]]
    return dict(train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y, classes=classes)


def load_cifar(name: str, cfg: DatasetConfig, root: Path) -> Dataset:
    spec = CIFAR[name]
    if cfg.copy is not None:
        return load_copy(name, cfg.copy, spec, root)
    cache = root / "cache" / f"{name}.pt"
    arrays = cached(cache, lambda: convert_cifar(fetch_archive(spec["archive"], root), spec))
    return dataset_from_arrays(name, arrays, spec["mean"], spec["std"], augment=True)


# --- a copy of the official data (dataset.copy): found by its SHA-256 (catalog.find_copy) ----------


def load_copy(name: str, sha256: str, spec: dict, root: Path) -> Dataset:
    """The copy in place of the official files, with the official classes in their order and
    the official normalisation; its images in class order, each class's files by name."""
    path = find_copy(root, sha256)
    arrays = cached(root / "cache" / f"{name}-copy-{sha256[:16]}.pt", lambda: convert_image_folder(path))
    if tuple(arrays["classes"]) != spec["classes"]:
        raise DataError(f"{path}: its classes {list(arrays['classes'])} are not {name}'s {list(spec['classes'])}")
    return dataset_from_arrays(name, arrays, spec["mean"], spec["std"], augment=True)


# --- image folders: train/<class>/*, test/<class>/* (a directory or a .zip) ----------------

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".gif", ".tif", ".tiff", ".webp")
# An image folder may come from anywhere: a file, an image and all of them decoded are bounded
# (a zip's entry of a few kB can inflate to gigabytes; an image's header can claim any size)
MAX_IMAGE_FILE_BYTES, MAX_IMAGE_PIXELS, MAX_DECODED_BYTES = 64 * 2**20, 8192 * 8192, 32 * 2**30


def _list_image_folder(names: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Relative file names -> {split: [(class, name), ...]}, classes sorted like ImageFolder."""
    splits: dict[str, list[tuple[str, str]]] = {"train": [], "test": []}
    for name in names:
        parts = Path(name).parts
        # Allow one wrapping directory (an archive of `cifar10/train/...`).
        if len(parts) >= 3 and parts[-3] in splits and name.lower().endswith(IMAGE_SUFFIXES):
            splits[parts[-3]].append((parts[-2], name))
    return splits


def open_tree(path: Path) -> tuple[list[str], Callable[[str], BinaryIO]]:
    """The relative names of the files under a directory or inside a .zip, and how to open one."""
    if path.suffix == ".zip":
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise DataError(f"{path} is not a readable zip file ({exc})") from exc

        def read(name: str) -> BinaryIO:  # a member's declared size, checked before it is inflated
            if archive.getinfo(name).file_size > MAX_IMAGE_FILE_BYTES:
                raise DataError(f"it holds more than {MAX_IMAGE_FILE_BYTES >> 20} MiB, more than an image file does")
            return io.BytesIO(archive.read(name))

        return archive.namelist(), read
    names = [str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()]
    return names, lambda name: open(path / name, "rb")


def decode_images(
    names: list[str],
    open_file: Callable[[str], BinaryIO],
    source: Path,
    size: int | None = None,
    decoded: int | None = None,
    grey_unless_three_bands: bool = False,
    what: str = "a split",
) -> torch.Tensor:
    """Image files -> uint8 (N, 3, H, W), converted to RGB and, given `size`, resized to
    size x size with PIL's bilinear filter (what torchvision's Resize does to a PIL image).
    `decoded`: the images held against MAX_DECODED_BYTES, every split's (default: these);
    `what`: the images' name in an error.
    `grey_unless_three_bands`: an image of other than three bands (a palette, an alpha channel, CMYK)
    becomes its grey levels, as FedBN's loader has it (`transforms.Grayscale(3)`), where
    torchvision's ImageFolder keeps its colours."""
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - pillow ships with the environment
        raise DataError("reading images needs Pillow (pip install pillow)") from exc

    if not names:
        raise DataError(f"{source}: {what} lists no image")
    images = None  # allocated once the first image gives the size: Tiny-ImageNet is 1.2 GB
    for i, name in enumerate(names):
        try:
            with open_file(name) as f:
                image = Image.open(f)  # its size read, its pixels not yet decoded
                if image.width * image.height > MAX_IMAGE_PIXELS:
                    raise DataError(f"{image.width}x{image.height} pixels, more than {MAX_IMAGE_PIXELS:,}")
                if grey_unless_three_bands and len(image.getbands()) != 3:
                    image = image.convert("L")
                image = image.convert("RGB")
                if size is not None:
                    image = image.resize((size, size), Image.BILINEAR)
                pixels = np.asarray(image).transpose(2, 0, 1)
        except Exception as exc:
            raise DataError(f"{source}: cannot decode image {name} ({exc})") from exc
        if images is None:
            count = decoded or len(names)
            if count * pixels.size > MAX_DECODED_BYTES:
                raise DataError(
                    f"{source}: {count} images of {pixels.shape[2]}x{pixels.shape[1]} take "
                    f"{count * pixels.size / 2**30:.0f} GiB; resize them first"
                )
            images = np.empty((len(names), *pixels.shape), dtype=np.uint8)
        elif pixels.shape != images.shape[1:]:
            raise DataError(
                f"{source}: images differ in size ({name} is {pixels.shape[2]}x{pixels.shape[1]}, "
                f"{names[0]} {images.shape[3]}x{images.shape[2]}); resize them first"
            )
        images[i] = pixels
    return torch.from_numpy(images)


def convert_listing(
    listing: dict[str, list[tuple[str, str]]], open_file: Callable[[str], BinaryIO], source: Path
) -> dict:
    """{"train"/"test": [(class, file name), ...]} -> uint8 arrays, classes sorted like
    torchvision's ImageFolder."""
    for split, files in listing.items():
        if not files:
            raise DataError(f"{source} has no images under {split}/<class>/; expected train/ and test/ folders")
    classes = sorted({c for c, _ in listing["train"]})
    unknown = sorted({c for c, _ in listing["test"]} - set(classes))
    if unknown:
        raise DataError(f"{source}: test classes {unknown} do not occur in train/")
    index = {c: i for i, c in enumerate(classes)}

    arrays, decoded = {"classes": classes}, sum(len(files) for files in listing.values())
    for split, files in listing.items():
        files.sort(key=lambda item: (index[item[0]], item[1]))
        arrays[f"{split}_x"] = decode_images([name for _, name in files], open_file, source, decoded=decoded)
        arrays[f"{split}_y"] = torch.tensor([index[c] for c, _ in files], dtype=torch.int64)
    if arrays["train_x"].shape[1:] != arrays["test_x"].shape[1:]:
        raise DataError(f"{source}: train/ and test/ images differ in size; resize them first")
    return arrays


def convert_image_folder(path: Path) -> dict:
    names, open_file = open_tree(path)
    return convert_listing(_list_image_folder(names), open_file, path)


def tree_fingerprint(path: Path) -> str:
    """The path with the size and time of every image the folder's listing reads (of the
    archive, for a zip): an image changed, added or removed inside the folder gives another
    cache, which a folder's own time does not tell; other files (.DS_Store, a README) give none."""
    if path.is_file():
        names = [""]
    else:
        listing = _list_image_folder([p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()])
        names = sorted(name for files in listing.values() for _, name in files)
    digest = hashlib.sha256(str(path).encode())
    for name in names:
        stat = (path / name).stat()
        digest.update(f"|{name}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:12]


def load_image_folder(name: str, cfg: DatasetConfig, root: Path) -> Dataset:
    path = Path(cfg.path).expanduser().resolve()
    if not path.exists():
        raise DataError(f"dataset.path={cfg.path} does not exist")
    key = tree_fingerprint(path)
    arrays = cached(root / "cache" / f"imagefolder-{path.stem}-{key}.pt", lambda: convert_image_folder(path))
    pixels = arrays["train_x"].float().div_(255)
    mean = pixels.mean(dim=(0, 2, 3)).tolist()
    std = pixels.std(dim=(0, 2, 3)).tolist()
    return dataset_from_arrays(name, arrays, mean, std, augment=arrays["train_x"].shape[-1] <= 64)


def load_dataset(cfg: RunConfig) -> Dataset:
    name = cfg.dataset.name
    info = dataset_info(name)
    module, function = info.loader.split(":")
    loader = getattr(importlib.import_module(module), function)
    tokenizer = {"tokenizer": cfg.model.pretrained} if info.text else {}
    dataset = loader(name, cfg.dataset, data_root(cfg.data_root), **tokenizer)
    if cfg.dataset.augmented is not None:
        dataset.augment = cfg.dataset.augmented
    if cfg.dataset.transform is not None:
        recipe = AUGMENTATIONS[cfg.dataset.transform]
        dataset.crop_pad, dataset.pad_mode, dataset.max_rotation = recipe.crop_pad, recipe.pad_mode, recipe.max_rotation
    check_loaded(dataset)
    return dataset


def check_loaded(dataset: Dataset) -> None:
    """What only the loaded data tells (an image folder's classes and image size): a classifier
    needs two classes with training samples, and reflection padding an image wider than it."""
    present = len(torch.unique(dataset.train.y)) if len(dataset.train) else 0
    if dataset.num_classes < 2 or present < 2:
        raise DataError(
            f"dataset {dataset.name} has {present} class(es) with training samples "
            f"({dataset.num_classes} named); a classifier needs at least two"
        )
    side = dataset.train.x.shape[-1]
    if dataset.text is None and dataset.augment and dataset.pad_mode == "reflect" and dataset.crop_pad >= side:
        raise DataError(
            f"dataset {dataset.name}'s {side}x{side} images cannot be padded by {dataset.crop_pad} pixels "
            f"by reflection for augmentation; set dataset.augmentation=none or use larger images"
        )
