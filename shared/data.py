"""Datasets: download, verify, convert once into a compact tensor cache, load in seconds.

Every dataset ends up as two `Split`s of uint8 images (N, C, H, W) and int64 labels, which the
trainer moves to its device once. Normalisation and augmentation happen there, batched
(`shared.augment`), so no per-sample Python runs in the training loop.
"""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from shared.config import DATA_ROOT_ENV, ConfigError, DatasetConfig, RunConfig, data_root


class DataError(RuntimeError):
    """Data that is missing, cannot be fetched, or fails verification."""


@dataclass
class Split:
    x: torch.Tensor  # uint8, (N, C, H, W)
    y: torch.Tensor  # int64, (N,)

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, index: np.ndarray | torch.Tensor) -> "Split":
        index = torch.as_tensor(index, dtype=torch.long)
        return Split(self.x[index], self.y[index])


@dataclass
class Dataset:
    name: str
    train: Split
    test: Split
    classes: list[str]
    mean: tuple[float, ...]  # per channel, on the 0..1 scale
    std: tuple[float, ...]
    augment: bool  # random crop (pad 4, reflect) + horizontal flip by default

    @property
    def num_classes(self) -> int:
        return len(self.classes)


# --- caching ------------------------------------------------------------------------------

def atomic_save(obj, path: Path) -> None:
    """torch.save through a temporary file, so a crash never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _cached(cache: Path, build: Callable[[], dict]) -> dict:
    if cache.exists():
        try:
            return torch.load(cache, weights_only=True)
        except Exception as exc:  # a corrupt cache is rebuilt, never trusted
            print(f"[data] cache {cache} unreadable ({exc}); rebuilding")
    arrays = build()
    atomic_save(arrays, cache)
    return arrays


def _from_arrays(name: str, arrays: dict, mean, std, augment: bool) -> Dataset:
    return Dataset(
        name=name,
        train=Split(arrays["train_x"], arrays["train_y"]),
        test=Split(arrays["test_x"], arrays["test_y"]),
        classes=list(arrays["classes"]),
        mean=tuple(mean),
        std=tuple(std),
        augment=augment,
    )


# --- CIFAR-10 / CIFAR-100 from the official archives --------------------------------------

@dataclass(frozen=True)
class Archive:
    url: str
    filename: str
    md5: str  # the checksum published with the archive (also torchvision's)


CIFAR = {
    "cifar10": dict(
        archive=Archive("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                        "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),
        train=[f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)],
        test=["cifar-10-batches-py/test_batch"],
        meta=("cifar-10-batches-py/batches.meta", "label_names"),
        labels=b"labels",
        # MOON / NIID-Bench normalisation constants.
        mean=(125.3 / 255, 123.0 / 255, 113.9 / 255),
        std=(63.0 / 255, 62.1 / 255, 66.7 / 255),
    ),
    "cifar100": dict(
        archive=Archive("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                        "cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"),
        train=["cifar-100-python/train"],
        test=["cifar-100-python/test"],
        meta=("cifar-100-python/meta", "fine_label_names"),
        labels=b"fine_labels",
        mean=(0.5071, 0.4865, 0.4409),
        std=(0.2673, 0.2564, 0.2762),
    ),
}


def file_md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_archive(archive: Archive, root: Path) -> Path:
    """Return the verified archive under `root`, downloading it if it is not there."""
    path = root / archive.filename
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        print(f"[data] downloading {archive.url} -> {path}")
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
    actual = file_md5(path)
    if actual != archive.md5:
        raise DataError(
            f"{path} fails verification: md5 {actual}, expected {archive.md5}. "
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
    cache = root / "cache" / f"{name}.pt"
    arrays = _cached(cache, lambda: convert_cifar(fetch_archive(spec["archive"], root), spec))
    return _from_arrays(name, arrays, spec["mean"], spec["std"], augment=True)


# --- image folders: train/<class>/*, test/<class>/* (a directory or a .zip) ----------------

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".gif", ".tif", ".tiff", ".webp")


def _list_image_folder(names: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Relative file names -> {split: [(class, name), ...]}, classes sorted like ImageFolder."""
    splits: dict[str, list[tuple[str, str]]] = {"train": [], "test": []}
    for name in names:
        parts = Path(name).parts
        # Allow one wrapping directory (an archive of `cifar10/train/...`).
        if len(parts) >= 3 and parts[-3] in splits and name.lower().endswith(IMAGE_SUFFIXES):
            splits[parts[-3]].append((parts[-2], name))
    return splits


def convert_image_folder(path: Path) -> dict:
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - pillow ships with the environment
        raise DataError("reading an image folder needs Pillow (pip install pillow)") from exc

    if path.suffix == ".zip":
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise DataError(f"{path} is not a readable zip file ({exc})") from exc
        names = archive.namelist()
        open_file = lambda name: io.BytesIO(archive.read(name))
    else:
        names = [str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()]
        open_file = lambda name: open(path / name, "rb")

    listing = _list_image_folder(names)
    for split, files in listing.items():
        if not files:
            raise DataError(f"{path} has no images under {split}/<class>/; expected train/ and test/ folders")
    classes = sorted({c for c, _ in listing["train"]})
    unknown = sorted({c for c, _ in listing["test"]} - set(classes))
    if unknown:
        raise DataError(f"{path}: test classes {unknown} do not occur in train/")
    index = {c: i for i, c in enumerate(classes)}

    arrays = {"classes": classes}
    for split, files in listing.items():
        files.sort(key=lambda item: (index[item[0]], item[1]))
        images = []
        for _, name in files:
            try:
                with open_file(name) as f:
                    images.append(np.asarray(Image.open(f).convert("RGB")))
            except Exception as exc:
                raise DataError(f"{path}: cannot decode image {name} ({exc})") from exc
        shapes = {im.shape for im in images}
        if len(shapes) != 1:
            raise DataError(f"{path}: images of {split}/ differ in size {sorted(shapes)[:3]}; resize them first")
        arrays[f"{split}_x"] = torch.from_numpy(np.stack(images).transpose(0, 3, 1, 2).copy())
        arrays[f"{split}_y"] = torch.tensor([index[c] for c, _ in files], dtype=torch.int64)
    return arrays


def load_image_folder(name: str, cfg: DatasetConfig, root: Path) -> Dataset:
    path = Path(cfg.path).expanduser().resolve()
    if not path.exists():
        raise DataError(f"dataset.path={cfg.path} does not exist")
    stat = path.stat()
    key = hashlib.sha256(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    arrays = _cached(root / "cache" / f"imagefolder-{path.stem}-{key}.pt", lambda: convert_image_folder(path))
    pixels = arrays["train_x"].float().div_(255)
    mean = pixels.mean(dim=(0, 2, 3)).tolist()
    std = pixels.std(dim=(0, 2, 3)).tolist()
    return _from_arrays(name, arrays, mean, std, augment=arrays["train_x"].shape[-1] <= 64)


# --- synthetic data for tests -------------------------------------------------------------

def load_synthetic(name: str, cfg: DatasetConfig, root: Path) -> Dataset:
    """Seeded images whose class is learnable: each class is a smooth random template, and a
    sample is its template plus pixel noise. Deterministic for a given config."""
    s = cfg.synthetic
    g = torch.Generator().manual_seed(12345)
    coarse = torch.rand(s.num_classes, s.channels, 4, 4, generator=g)
    templates = torch.nn.functional.interpolate(coarse, size=(s.image_size, s.image_size),
                                                mode="bilinear", align_corners=False)

    def draw(per_class: int) -> Split:
        y = torch.arange(s.num_classes).repeat_interleave(per_class)
        noise = torch.randn(len(y), s.channels, s.image_size, s.image_size, generator=g)
        x = (templates[y] + s.noise * 0.25 * noise).clamp(0, 1)
        return Split((x * 255).round().to(torch.uint8), y)

    train, test = draw(s.train_per_class), draw(s.test_per_class)
    classes = [f"class{i}" for i in range(s.num_classes)]
    return Dataset(name, train, test, classes, (0.5,) * s.channels, (0.25,) * s.channels, augment=False)


DATASETS: dict[str, Callable[[str, DatasetConfig, Path], Dataset]] = {
    "cifar10": load_cifar,
    "cifar100": load_cifar,
    "imagefolder": load_image_folder,
    "synthetic": load_synthetic,
}


def load_dataset(cfg: RunConfig) -> Dataset:
    name = cfg.dataset.name
    if name not in DATASETS:
        raise ConfigError(f"dataset.name={name!r} is unknown; valid: {sorted(DATASETS)}")
    dataset = DATASETS[name](name, cfg.dataset, data_root(cfg))
    if cfg.dataset.augment is not None:
        dataset.augment = cfg.dataset.augment
    return dataset
