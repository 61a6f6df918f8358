"""FEMNIST, Tiny-ImageNet and Office-Caltech-10: where each comes from, what is verified, and
how it becomes the uint8 tensors of `shared.data.datasets`, cached once under <data root>/cache/.

FEMNIST (LEAF, Caldas et al. 2018; 28x28 grey handwriting, each sample's writer kept for
`partition.kind=writers`):
- `femnist_digits`, the 10 digit classes: NIID-Bench's FEMNIST archive `femnist.tar.gz`, the
  file NIID-Bench's and FedCSD's released code download, is downloaded and its MD5 checked
  before it is read. It holds LEAF's train/test split as torch tensors (images, labels,
  samples per writer, writers in order).
- `femnist`, all 62 classes: the JSON files of LEAF's own preprocessing, which no one
  distributes with a checksum. Run LEAF's `data/femnist/preprocess.sh -s niid --sf 1.0 -k 0
  -t sample` (it downloads NIST Special Database 19's by_class.zip and by_write.zip from NIST
  and converts them) and copy its `data/train/` and `data/test/` (or just `data/all_data/`)
  into <data root>/femnist/. Only their structure is checked: users, 784 pixels in [0, 1] per
  sample, labels 0..61. Without train/ and test/, each writer's samples are split 90/10 by
  LEAF's rule (at least one of each) with a fixed seed; LEAF's own seed defaults to the clock.

Tiny-ImageNet (200 classes, 64x64): cs231n's tiny-imagenet-200.zip, MD5-checked; the labelled
validation images (val_annotations.txt) serve as the test split, regrouped by class and read
like an image folder. Normalised with mean = std = 0.5 and not augmented, as MOON's code does.

Office-Caltech-10 (Gong et al. 2012; 10 classes in 4 domains): FedBN's distribution
(office_caltech_10_dataset.zip from FedBN's README, a Google Drive link that cannot be fetched
without a browser, so it is put into the data root by hand, zipped or unzipped). FedBN's
per-domain split files (<domain>_train.pkl / _test.pkl, paths and class names) define the
train/test split; without them each domain is split 80/20 per class with a fixed seed, the
ratio of FedBN's files (FedCSD's test accuracies are multiples of 1/32 on DSLR's 157 images:
20%). No checksum exists: the four domains and ten classes are checked. Images are resized to
256x256 and scaled to [0, 1] without normalisation; training adds a random flip and a rotation
of up to 30 degrees (FedBN's `transform_office`). The domain of every sample, train and test,
is kept: one client per domain (`partition.kind=domains`) and accuracy per domain.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import string
import tarfile
from pathlib import Path

import numpy as np
import torch

from shared.config.schema import DatasetConfig
from shared.data.catalog import DATASETS
from shared.data.datasets import (
    IMAGE_SUFFIXES,
    Archive,
    DataError,
    Dataset,
    cached,
    convert_listing,
    dataset_from_arrays,
    decode_images,
    fetch_archive,
    open_tree,
)

# --- FEMNIST ----------------------------------------------------------------------------------

FEMNIST_CLASSES = [*string.digits, *string.ascii_uppercase, *string.ascii_lowercase]  # LEAF's label order
NIID_BENCH_FEMNIST = Archive(
    "https://raw.githubusercontent.com/tao-shen/FEMNIST_pytorch/master/femnist.tar.gz",
    "femnist.tar.gz",
    "59c65cec646fc57fe92d27d83afdf0ed",
)
LEAF_TRAIN_FRACTION = 0.9


def to_uint8(pixels: torch.Tensor | np.ndarray, source: str) -> torch.Tensor:
    """LEAF's grey levels (floats in [0, 1], ink dark) as uint8."""
    pixels = torch.as_tensor(pixels)
    if pixels.dtype == torch.uint8:
        return pixels
    if not pixels.is_floating_point() or (pixels.numel() and not (0 <= pixels.min() and pixels.max() <= 1)):
        raise DataError(f"{source}: pixels are neither uint8 nor floats in [0, 1]")
    return (pixels.float() * 255).round().to(torch.uint8)


def read_leaf_json(files: list[Path]) -> tuple[torch.Tensor, torch.Tensor, list[str], torch.Tensor]:
    """LEAF json files -> images (N, 1, 28, 28), labels, writer names, each sample's writer."""
    images, labels, writers, owners = [], [], [], []
    for file in files:
        try:
            data = json.loads(file.read_text())
            users, user_data = data["users"], data["user_data"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise DataError(f"{file} is not a LEAF json file (users, user_data): {exc!r}") from exc
        for user in users:
            try:
                x = np.asarray(user_data[user]["x"], dtype=np.float32)
                y = np.asarray(user_data[user]["y"], dtype=np.int64)
            except (KeyError, ValueError, TypeError) as exc:
                raise DataError(f"{file}: writer {user} has no readable x/y samples ({exc!r})") from exc
            if not len(y):
                continue
            if x.shape != (len(y), 28 * 28) or y.min() < 0 or y.max() >= len(FEMNIST_CLASSES):
                raise DataError(f"{file}: writer {user}'s samples are not 784-pixel images with labels 0..61")
            images.append(to_uint8(x, f"{file}: writer {user}").view(-1, 1, 28, 28))
            labels.append(torch.from_numpy(y))
            owners.append(torch.full((len(y),), len(writers), dtype=torch.int64))
            writers.append(user)
    if not images:
        raise DataError(f"{files[0].parent} holds no FEMNIST samples")
    return torch.cat(images), torch.cat(labels), writers, torch.cat(owners)


def leaf_sample_split(owner: torch.Tensor, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """LEAF's `-t sample` split: per writer with at least 2 samples, max(1, int(0.9 n)) of them
    (1 of 2) train, the rest test; writers with fewer are left out."""
    train, test = [], []
    for writer in range(int(owner.max()) + 1):
        idx = rng.permutation(np.flatnonzero(owner.numpy() == writer))
        if len(idx) < 2:
            continue
        n_train = 1 if len(idx) == 2 else max(1, int(LEAF_TRAIN_FRACTION * len(idx)))
        train.append(idx[:n_train])
        test.append(idx[n_train:])
    return np.concatenate(train), np.concatenate(test)


def leaf_split(folder: Path) -> str:
    """Which split a LEAF FEMNIST folder gives: "leaf-split" (its train/ and test/) or
    "seeded-split" (all_data/, split here), so that each has a cache of its own."""
    own = all(any(folder.glob(f"{part}/*.json")) for part in ("train", "test"))
    return "leaf-split" if own else "seeded-split"


def convert_leaf_femnist(folder: Path) -> dict:
    train_files, test_files = sorted(folder.glob("train/*.json")), sorted(folder.glob("test/*.json"))
    all_files = sorted(folder.glob("all_data/*.json"))
    if train_files and test_files:
        train_x, train_y, writers, train_owner = read_leaf_json(train_files)
        test_x, test_y, _, _ = read_leaf_json(test_files)
    elif all_files:
        x, y, writers, owner = read_leaf_json(all_files)
        train, test = leaf_sample_split(owner, np.random.default_rng(0))
        train_x, train_y, train_owner = x[train], y[train], owner[train]
        test_x, test_y = x[test], y[test]
    else:
        raise DataError(
            f"FEMNIST (62 classes) is not in {folder}: expected LEAF's json files in {folder}/train/ and "
            f"{folder}/test/ (or {folder}/all_data/). Make them with LEAF (github.com/TalwalkarLab/leaf): "
            f"cd data/femnist && ./preprocess.sh -s niid --sf 1.0 -k 0 -t sample, which downloads NIST SD19; "
            f"then copy data/train and data/test there. The 10-digit variant downloads by itself: "
            "dataset.name=femnist_digits."
        )
    return dict(
        train_x=train_x,
        train_y=train_y,
        train_group=train_owner,
        groups=writers,
        test_x=test_x,
        test_y=test_y,
        classes=FEMNIST_CLASSES,
    )


def convert_niid_bench_femnist(archive: Path) -> dict:
    """training.pt / test.pt of NIID-Bench's archive: (images, labels, samples per writer)."""
    with tarfile.open(archive, "r:gz") as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
        arrays: dict = {"classes": FEMNIST_CLASSES[:10]}
        for split, member in (("train", "training.pt"), ("test", "test.pt")):
            if member not in members:
                raise DataError(f"{archive} holds no {member}; members: {sorted(members)}")
            try:  # weights_only: the file may hold tensors and numbers, nothing that runs code
                content = torch.load(io.BytesIO(tar.extractfile(members[member]).read()), weights_only=True)
            except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
                raise DataError(f"{archive}:{member} is not a torch file of tensors and numbers ({exc})") from exc
            try:
                x, y, per_writer = content
                x, y, per_writer = torch.as_tensor(x), torch.as_tensor(y).long(), torch.as_tensor(per_writer).long()
            except (TypeError, ValueError) as exc:
                raise DataError(f"{archive}:{member} is not (images, labels, samples per writer)") from exc
            if x.shape[1:] != (28, 28) or len(y) != len(x) or int(per_writer.sum()) != len(y):
                raise DataError(
                    f"{archive}:{member}: {tuple(x.shape)} images, {len(y)} labels and "
                    f"{int(per_writer.sum())} samples over the writers do not match"
                )
            if len(y) and not (0 <= y.min() and y.max() < 10):
                raise DataError(f"{archive}:{member}: labels outside 0..9; not NIID-Bench's digits-only FEMNIST")
            arrays[f"{split}_x"] = to_uint8(x, f"{archive}:{member}").unsqueeze(1)
            arrays[f"{split}_y"] = y
            if split == "train":
                arrays["train_group"] = torch.repeat_interleave(torch.arange(len(per_writer)), per_writer)
                arrays["groups"] = [f"writer{i}" for i in range(len(per_writer))]
    return arrays


def load_femnist(name: str, cfg: DatasetConfig, root: Path) -> Dataset:
    if name == "femnist_digits":
        arrays = cached(
            root / "cache" / f"{name}.pt", lambda: convert_niid_bench_femnist(fetch_archive(NIID_BENCH_FEMNIST, root))
        )
    else:  # a cache per split: LEAF's train/ and test/ added later are read, not shadowed
        folder = root / "femnist"
        arrays = cached(root / "cache" / f"{name}-{leaf_split(folder)}.pt", lambda: convert_leaf_femnist(folder))
    # NIID-Bench feeds FEMNIST through ToTensor alone: no normalisation, no augmentation.
    return dataset_from_arrays(name, arrays, mean=(0.0,), std=(1.0,), augment=False, group_kind="writer")


# --- Tiny-ImageNet ---------------------------------------------------------------------------

TINY_IMAGENET = Archive(
    "http://cs231n.stanford.edu/tiny-imagenet-200.zip", "tiny-imagenet-200.zip", "90528d7ca1a48142e341f4ef8d21d0de"
)


def tiny_imagenet_listing(names: list[str], open_file, source: Path) -> dict[str, list[tuple[str, str]]]:
    """train/<wnid>/images/* by folder; val/images/* by val_annotations.txt (file, wnid, box)."""
    annotations = [n for n in names if n.endswith("val/val_annotations.txt")]
    if not annotations:
        raise DataError(f"{source} has no val/val_annotations.txt: not the Tiny-ImageNet archive")
    with open_file(annotations[0]) as f:
        rows = [line.split("\t") for line in f.read().decode().splitlines() if line.strip()]
    val_class = {row[0]: row[1] for row in rows if len(row) >= 2}
    listing: dict[str, list[tuple[str, str]]] = {"train": [], "test": []}
    for name in names:
        parts = Path(name).parts
        if not name.lower().endswith(IMAGE_SUFFIXES) or len(parts) < 3 or parts[-2] != "images":
            continue
        if len(parts) >= 4 and parts[-4] == "train":
            listing["train"].append((parts[-3], name))
        elif parts[-3] == "val":
            if parts[-1] not in val_class:
                raise DataError(f"{source}: {name} has no class in val_annotations.txt")
            listing["test"].append((val_class[parts[-1]], name))
    return listing


def convert_tiny_imagenet(archive: Path) -> dict:
    names, open_file = open_tree(archive)
    return convert_listing(tiny_imagenet_listing(names, open_file, archive), open_file, archive)


def load_tiny_imagenet(name: str, cfg: DatasetConfig, root: Path) -> Dataset:
    arrays = cached(root / "cache" / f"{name}.pt", lambda: convert_tiny_imagenet(fetch_archive(TINY_IMAGENET, root)))
    return dataset_from_arrays(name, arrays, mean=(0.5,) * 3, std=(0.5,) * 3, augment=False)


# --- Office-Caltech-10 ------------------------------------------------------------------------

OFFICE_DOMAINS = DATASETS["office_caltech10"].domains
OFFICE_CLASSES = [
    "back_pack",
    "bike",
    "calculator",
    "headphones",
    "keyboard",
    "laptop_computer",
    "monitor",
    "mouse",
    "mug",
    "projector",
]  # FedBN's label order
OFFICE_FOLDER, OFFICE_ZIP = "office_caltech_10", "office_caltech_10_dataset.zip"
OFFICE_SIDE = 256
OFFICE_TEST_FRACTION = 0.2


class SplitFileUnpickler(pickle.Unpickler):
    """FedBN's split files are pickled numpy arrays of strings. A pickle can run arbitrary code,
    so nothing but numpy's array reconstruction may be loaded from one."""

    ALLOWED = {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        *(
            (module, name)
            for module in ("numpy.core.multiarray", "numpy._core.multiarray")
            for name in ("_reconstruct", "scalar")
        ),
    }

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a split file")
        return super().find_class(module, name)


def office_source(root: Path) -> Path | None:
    for candidate in (root / OFFICE_FOLDER, root / OFFICE_ZIP):
        if candidate.exists():
            return candidate
    return None


def office_files(source: Path):
    """{path inside office_caltech_10/: name to open}, and how to open one."""
    names, open_file = open_tree(source)
    prefix = OFFICE_FOLDER + "/"
    return {name[len(prefix) :] if name.startswith(prefix) else name: name for name in names}, open_file


def split_file_names(domain: str) -> list[str]:
    return [f"{domain}_train.pkl", f"{domain}_test.pkl"]


def has_fedbn_split(files: dict) -> bool:
    wanted = [name for domain in OFFICE_DOMAINS for name in split_file_names(domain)]
    present = [name for name in wanted if name in files]
    if present and len(present) < len(wanted):
        raise DataError(
            f"Office-Caltech-10 has some of FedBN's split files but not {sorted(set(wanted) - set(present))}"
        )
    return bool(present)


def read_fedbn_split(domain: str, split_file: str, files: dict, open_file, source: Path) -> list[tuple[int, str]]:
    """(class index, file) for each entry of a FedBN split file."""
    try:
        with open_file(files[split_file]) as f:
            paths, labels = SplitFileUnpickler(f).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise DataError(f"{source}: {split_file} is not a FedBN split file (paths, class names): {exc}") from exc
    entries = []
    for path, label in zip(paths, labels):
        parts = Path(str(path)).parts
        key = "/".join(parts[parts.index(domain) :]) if domain in parts else str(path)
        if key not in files:
            raise DataError(f"{source}: {split_file} names {path}, which is not there")
        if str(label) not in OFFICE_CLASSES:
            raise DataError(f"{source}: {split_file} has the unknown class {label!r}")
        entries.append((OFFICE_CLASSES.index(str(label)), files[key]))
    return entries


def seeded_split(domain: str, files: dict, source: Path, rng: np.random.Generator):
    """Each class of the domain split 80/20 at random; ceil(20%) of the domain test, as
    scikit-learn's StratifiedShuffleSplit (FedBN's splitter) counts, spread over the classes by
    largest remainder."""
    by_class: dict[int, list[str]] = {}
    for key, name in sorted(files.items()):
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == domain and key.lower().endswith(IMAGE_SUFFIXES):
            if parts[1] not in OFFICE_CLASSES:
                raise DataError(f"{source}: {domain}/{parts[1]} is not one of the ten classes {OFFICE_CLASSES}")
            by_class.setdefault(OFFICE_CLASSES.index(parts[1]), []).append(name)
    if sorted(by_class) != list(range(len(OFFICE_CLASSES))):
        missing = [OFFICE_CLASSES[c] for c in range(len(OFFICE_CLASSES)) if c not in by_class]
        raise DataError(f"{source}: domain {domain} lacks images of {missing} (expected {domain}/<class>/*.jpg)")
    sizes = np.array([len(by_class[c]) for c in sorted(by_class)])
    total_test = math.ceil(OFFICE_TEST_FRACTION * sizes.sum())
    exact = sizes * total_test / sizes.sum()
    n_test = np.floor(exact).astype(int)
    largest_remainders_first = np.argsort(n_test - exact, kind="stable")
    n_test[largest_remainders_first[: total_test - n_test.sum()]] += 1
    train, test = [], []
    for c, k in zip(sorted(by_class), n_test):
        names = [by_class[c][i] for i in rng.permutation(len(by_class[c]))]
        test += [(c, n) for n in names[:k]]
        train += [(c, n) for n in names[k:]]
    return train, test


def convert_office(source: Path, fedbn_split: bool) -> dict:
    files, open_file = office_files(source)
    rng = np.random.default_rng(0)
    entries: dict[str, list[tuple[int, int, str]]] = {"train": [], "test": []}  # (domain, class, file)
    for d, domain in enumerate(OFFICE_DOMAINS):
        if fedbn_split:
            train, test = (read_fedbn_split(domain, f, files, open_file, source) for f in split_file_names(domain))
        else:
            train, test = seeded_split(domain, files, source, rng)
        entries["train"] += [(d, c, n) for c, n in train]
        entries["test"] += [(d, c, n) for c, n in test]
    arrays: dict = {"classes": OFFICE_CLASSES, "groups": list(OFFICE_DOMAINS)}
    for split, rows in entries.items():
        arrays[f"{split}_x"] = decode_images(
            [n for _, _, n in rows],
            open_file,
            source,
            OFFICE_SIDE,
            grey_unless_three_bands=True,
            what=f"its {split} split",
        )
        arrays[f"{split}_y"] = torch.tensor([c for _, c, _ in rows], dtype=torch.int64)
        arrays[f"{split}_group"] = torch.tensor([d for d, _, _ in rows], dtype=torch.int64)
    return arrays


def load_office_caltech10(name: str, cfg: DatasetConfig, root: Path) -> Dataset:
    # Two caches, so that adding FedBN's split files later is noticed instead of shadowed; "grey":
    # images of other than three bands in grey as FedBN's loader has them (caches before kept colour)
    caches = {
        True: root / "cache" / f"{name}-fedbn-split-grey.pt",
        False: root / "cache" / f"{name}-seeded-split-grey.pt",
    }
    source = office_source(root)
    if caches[True].exists():
        fedbn_split = True
    elif source is not None:
        fedbn_split = has_fedbn_split(office_files(source)[0])
    elif caches[False].exists():
        fedbn_split = False
    else:
        raise DataError(
            f"Office-Caltech-10 is not in {root}: put FedBN's {OFFICE_ZIP} (the office-caltech10 link in "
            f"github.com/med-air/FedBN's README), zipped or unzipped as {OFFICE_FOLDER}/, into the data root. "
            f"Any copy laid out as {OFFICE_FOLDER}/<domain>/<class>/*.jpg works; without FedBN's "
            f"<domain>_train.pkl/_test.pkl files each domain is split 80/20 per class with a fixed seed."
        )
    if not fedbn_split and not caches[False].exists():
        print(f"[data] {source}: FedBN's split files are not there; splitting each domain 80/20 per class (seed 0)")
    arrays = cached(caches[fedbn_split], lambda: convert_office(source, fedbn_split))
    # FedBN: Resize(256, 256), RandomHorizontalFlip, RandomRotation(+-30), ToTensor (no normalisation).
    return dataset_from_arrays(
        name, arrays, mean=(0.0,) * 3, std=(1.0,) * 3, augment=True, crop_pad=0, max_rotation=30.0, group_kind="domain"
    )
