import hashlib
import io
import json
import pickle
import tarfile
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from shared.config.schema import ConfigError
from shared.data import datasets as data
from shared.data.datasets import Archive, DataError, load_dataset
from shared.targets.configs import load_config


def make_fake_cifar10(path, per_batch=20):
    """A miniature cifar-10-python.tar.gz in the official on-disk format."""
    rng = np.random.default_rng(0)

    def batch(n):
        return {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": (np.arange(n) % 10).tolist()}

    members = {f"cifar-10-batches-py/data_batch_{i}": batch(per_batch) for i in range(1, 6)}
    members["cifar-10-batches-py/test_batch"] = batch(per_batch)
    members["cifar-10-batches-py/batches.meta"] = {b"label_names": [f"name{i}".encode() for i in range(10)]}
    with tarfile.open(path, "w:gz") as tar:
        for name, obj in members.items():
            blob = pickle.dumps(obj)
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_cifar_server(tmp_path, monkeypatch):
    """The CIFAR-10 archive served from a file:// URL, its checksum registered as official."""
    served = tmp_path / "server" / "cifar-10-python.tar.gz"
    served.parent.mkdir()
    md5 = make_fake_cifar10(served)
    spec = dict(data.CIFAR["cifar10"], archive=Archive(served.as_uri(), served.name, md5))
    monkeypatch.setitem(data.CIFAR, "cifar10", spec)
    return served


def cifar_cfg(root):
    return load_config(None, ["dataset=cifar10", f"data_root={root}"])


def test_cifar_download_verify_convert_and_cache(fake_cifar_server, tmp_path):
    root = tmp_path / "root"
    ds = load_dataset(cifar_cfg(root))
    assert ds.train.x.shape == (100, 3, 32, 32) and ds.train.x.dtype == torch.uint8
    assert ds.test.x.shape == (20, 3, 32, 32)
    assert ds.train.y[:10].tolist() == list(range(10))
    assert ds.classes[3] == "name3" and ds.augment
    # the pixel layout is the official one: row-major 3x32x32 per sample
    with tarfile.open(root / "cifar-10-python.tar.gz") as tar:
        first = pickle.load(tar.extractfile("cifar-10-batches-py/data_batch_1"), encoding="bytes")
    assert torch.equal(ds.train.x[0].flatten(), torch.from_numpy(first[b"data"][0]))
    # The cache alone is enough afterwards.
    (root / "cifar-10-python.tar.gz").unlink()
    fake_cifar_server.unlink()
    again = load_dataset(cifar_cfg(root))
    assert torch.equal(again.train.x, ds.train.x)


def test_checksum_mismatch_is_refused_before_unpacking(fake_cifar_server, tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    (root / "cifar-10-python.tar.gz").write_bytes(b"not the archive")
    monkeypatch.setattr(data, "convert_cifar", lambda *a: pytest.fail("unpacked an unverified archive"))
    with pytest.raises(DataError, match="fails verification: md5"):
        load_dataset(cifar_cfg(root))


def test_missing_data_without_network_says_what_to_do(fake_cifar_server, tmp_path):
    fake_cifar_server.unlink()  # the "network" no longer has it
    with pytest.raises(DataError, match=r"cifar-10-python.tar.gz is not in .* and downloading .* failed"):
        load_dataset(cifar_cfg(tmp_path / "root"))
    assert not list((tmp_path / "root").glob("*.part"))


def test_corrupt_cache_is_rebuilt(fake_cifar_server, tmp_path):
    root = tmp_path / "root"
    load_dataset(cifar_cfg(root))
    (root / "cache" / "cifar10.pt").write_bytes(b"garbage")
    assert len(load_dataset(cifar_cfg(root)).train) == 100


def write_image_folder(root, classes=("cat", "ant", "bee"), per_class=(4, 2)):
    rng = np.random.default_rng(1)
    for split, n in zip(("train", "test"), per_class):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / split / c / f"{i}.png")


@pytest.mark.parametrize("as_zip", [False, True])
def test_image_folder_reader(tmp_path, as_zip):
    folder = tmp_path / "imgs"
    write_image_folder(folder)
    path = folder
    if as_zip:
        path = tmp_path / "imgs.zip"
        with zipfile.ZipFile(path, "w") as z:
            for f in folder.rglob("*.png"):
                z.write(f, f"wrapped/{f.relative_to(folder)}")
    cfg = load_config(None, ["dataset=imagefolder", f"dataset.path={path}", f"data_root={tmp_path / 'root'}"])
    ds = load_dataset(cfg)
    assert ds.classes == ["ant", "bee", "cat"]  # sorted, as torchvision's ImageFolder
    assert ds.train.x.shape == (12, 3, 8, 8) and ds.test.x.shape == (6, 3, 8, 8)
    assert ds.train.y.bincount().tolist() == [4, 4, 4]
    pixels = np.array(Image.open(folder / "train" / "ant" / "0.png"))
    assert torch.equal(ds.train.x[0], torch.from_numpy(pixels).permute(2, 0, 1))


def test_an_image_folder_changed_inside_is_read_anew(tmp_path):
    """The cache follows every file under the folder: an image rewritten or added in a class
    folder (the top folder's time unchanged) is read, not the former cache."""
    folder = tmp_path / "imgs"
    write_image_folder(folder)
    cfg = load_config(None, ["dataset=imagefolder", f"dataset.path={folder}", f"data_root={tmp_path / 'root'}"])
    before = load_dataset(cfg)
    Image.fromarray(np.full((8, 8, 3), 7, dtype=np.uint8)).save(folder / "train" / "ant" / "0.png")
    Image.fromarray(np.full((8, 8, 3), 9, dtype=np.uint8)).save(folder / "train" / "bee" / "9.png")
    after = load_dataset(cfg)
    assert len(before.train) == 12 and len(after.train) == 13
    assert (after.train.x[0] == 7).all() and not torch.equal(before.train.x[0], after.train.x[0])
    caches = sorted((tmp_path / "root" / "cache").glob("imagefolder-*.pt"))
    (folder / "train" / ".DS_Store").write_bytes(b"a file the listing does not read")
    load_dataset(cfg)
    assert sorted((tmp_path / "root" / "cache").glob("imagefolder-*.pt")) == caches  # no cache of its own


def test_corrupt_image_folder_zip(tmp_path):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"PK\x03\x04 truncated")
    cfg = load_config(None, ["dataset=imagefolder", f"dataset.path={bad}", f"data_root={tmp_path}"])
    with pytest.raises(DataError, match="not a readable zip"):
        load_dataset(cfg)


def test_corrupt_image_is_named(tmp_path):
    folder = tmp_path / "imgs"
    write_image_folder(folder)
    (folder / "train" / "bee" / "1.png").write_bytes(b"not a png")
    cfg = load_config(None, ["dataset=imagefolder", f"dataset.path={folder}", f"data_root={tmp_path}"])
    with pytest.raises(DataError, match=r"cannot decode image train/bee/1.png"):
        load_dataset(cfg)


def test_missing_image_folder(tmp_path):
    cfg = load_config(None, ["dataset=imagefolder", f"dataset.path={tmp_path / 'nope'}", f"data_root={tmp_path}"])
    with pytest.raises(DataError, match="does not exist"):
        load_dataset(cfg)


def test_synthetic_is_seeded_and_balanced(tiny_cfg):
    a, b = load_dataset(tiny_cfg()), load_dataset(tiny_cfg())
    assert torch.equal(a.train.x, b.train.x)
    assert a.train.y.bincount().tolist() == [60] * 10


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(
        ConfigError, match=r"dataset.name='mnist' is unknown; valid: \['ag_news', 'cifar10', 'cifar100', 'femnist'"
    ):
        load_config(None, ["dataset=mnist"])


def test_data_costs_times_download_conversion_and_a_later_load(fake_cifar_server, tmp_path, capsys):
    from benchmarks.data_costs import main

    root, out = tmp_path / "root", tmp_path / "costs.json"
    assert main(["cifar10", f"data_root={root}", "--out", str(out)]) == 0
    first = json.loads(out.read_text())["datasets"]["cifar10"]
    assert first["downloaded"] == ["cifar-10-python.tar.gz"] and not first["cached_before"]
    assert (first["train"], first["test"], first["classes"]) == (100, 20, 10) and first["cache_mb"] > 0
    assert "[data] downloaded cifar-10-python.tar.gz" in capsys.readouterr().out
    assert main(["cifar10", f"data_root={root}", "--out", str(out)]) == 0  # the cache is used
    assert json.loads(out.read_text())["datasets"]["cifar10"]["cached_before"]
    assert (
        main(["cifar10", f"data_root={root}", "--rebuild", "--out", str(out)]) == 0
    )  # converted again, not downloaded
    rebuilt = json.loads(out.read_text())["datasets"]["cifar10"]
    assert not rebuilt["cached_before"] and rebuilt["downloaded"] == []
    assert main(["nonexistent", "--out", str(out)]) == 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda arrays: arrays.pop("train_y"),
        lambda arrays: arrays.update(train_y=arrays["train_y"][:-1]),
        lambda arrays: arrays.update(test_y=arrays["test_y"] + 100),
        lambda arrays: arrays.update(train_x=arrays["train_x"][:, :, :5]),
        lambda arrays: arrays.update(classes="airplane"),
    ],
    ids=["a key missing", "labels short", "labels beyond the classes", "images of another shape", "classes not a list"],
)
def test_a_cache_that_loads_but_is_wrong_is_rebuilt(damage, fake_cifar_server, tmp_path, capsys):
    root = tmp_path / "root"
    first = load_dataset(cifar_cfg(root))
    cache = root / "cache" / "cifar10.pt"
    arrays = torch.load(cache, weights_only=True)
    damage(arrays)
    torch.save(arrays, cache)
    capsys.readouterr()
    again = load_dataset(cifar_cfg(root))
    assert torch.equal(again.train.x, first.train.x) and torch.equal(again.test.y, first.test.y)
    (line,) = [err for err in capsys.readouterr().err.splitlines() if "cifar10.pt" in err]
    assert line.endswith("; rebuilding it")
