"""FEMNIST, Tiny-ImageNet, Office-Caltech-10, AG News and SST-5 on small generated fixtures in
their real on-disk formats, served from file:// URLs where the real data is downloaded."""

import hashlib
import io
import json
import os
import pickle
import sys
import tarfile
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from shared.config.schema import ConfigError, PartitionConfig
from shared.data import text as text_datasets
from shared.data import vision as vision_datasets
from shared.data.datasets import Archive, DataError, load_dataset
from shared.data.federation import Augmenter, build_federation
from shared.data.partition import partition
from shared.models.registry import build_model
from shared.targets.configs import load_config
from shared.targets.scales import SMOKE_MAX_SIDE, SMOKE_MAX_TEST, SMOKE_MAX_TRAIN, smoke_scale
from shared.targets.table_declarations import expand
from shared.training import trainer

CPU = ["trainer.device=cpu", "trainer.progress=false"]


def md5(path):
    return hashlib.md5(path.read_bytes()).hexdigest()


def serve(monkeypatch, module, attribute, path):
    """Point `module.attribute`'s archive at a local file, its checksum registered as official."""
    official = getattr(module, attribute)
    monkeypatch.setattr(module, attribute, Archive(path.as_uri(), official.filename, md5(path)))


def serve_generated(tmp_path, monkeypatch, attribute, make):
    """`make` writes a small archive in the official format; it is served as vision_datasets' `attribute`."""
    path = tmp_path / "server" / getattr(vision_datasets, attribute).filename
    path.parent.mkdir(exist_ok=True)
    make(path)
    serve(monkeypatch, vision_datasets, attribute, path)
    return path


def cfg(root, *overrides):
    return load_config(None, [f"data_root={root}", *CPU, *overrides])


# --- FEMNIST ------------------------------------------------------------------------------

WRITERS_TRAIN = [5, 3, 4, 6, 2, 5, 4, 3]  # samples per writer, NIID-Bench's users_index


def make_niid_bench_femnist(path):
    """femnist.tar.gz as NIID-Bench downloads it: training.pt / test.pt = (images, labels, samples per writer)."""
    g = torch.Generator().manual_seed(0)
    with tarfile.open(path, "w:gz") as tar:
        for member, per_writer in (("training.pt", WRITERS_TRAIN), ("test.pt", [1] * len(WRITERS_TRAIN))):
            n = sum(per_writer)
            blob = io.BytesIO()
            torch.save((torch.rand(n, 28, 28, generator=g), torch.randint(10, (n,), generator=g), per_writer), blob)
            info = tarfile.TarInfo(member)
            info.size = len(blob.getvalue())
            tar.addfile(info, io.BytesIO(blob.getvalue()))


@pytest.fixture
def niid_femnist(tmp_path, monkeypatch):
    return serve_generated(tmp_path, monkeypatch, "NIID_BENCH_FEMNIST", make_niid_bench_femnist)


def test_femnist_digits_download_verify_cache_and_writers(niid_femnist, tmp_path):
    root = tmp_path / "root"
    ds = load_dataset(cfg(root, "dataset=femnist_digits"))
    assert ds.train.x.shape == (32, 1, 28, 28) and ds.train.x.dtype == torch.uint8 and ds.test.x.shape == (8, 1, 28, 28)
    assert ds.classes == list("0123456789") and ds.group_kind == "writer" and not ds.augment
    assert ds.train.group.bincount().tolist() == WRITERS_TRAIN and ds.test.group is None
    with tarfile.open(niid_femnist) as tar:
        images = torch.load(tar.extractfile("training.pt"), weights_only=True)[0]
    assert torch.equal(ds.train.x[:, 0], (images * 255).round().to(torch.uint8))  # LEAF's [0, 1] grey levels
    niid_femnist.unlink()  # the cache alone is enough afterwards
    (root / "femnist.tar.gz").unlink()
    assert torch.equal(load_dataset(cfg(root, "dataset=femnist_digits")).train.x, ds.train.x)


def test_femnist_corrupt_or_missing_archive(niid_femnist, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "femnist.tar.gz").write_bytes(b"truncated")
    with pytest.raises(DataError, match="fails verification: md5"):
        load_dataset(cfg(root, "dataset=femnist_digits"))
    niid_femnist.unlink()
    with pytest.raises(DataError, match=r"femnist.tar.gz is not in .* and downloading"):
        load_dataset(cfg(tmp_path / "elsewhere", "dataset=femnist_digits"))


def leaf_json(path, writers):
    """A LEAF json file: {users, num_samples, user_data: {user: {x: [[784 floats]], y: [labels]}}}."""
    rng = np.random.default_rng(len(writers))
    data = {"users": [], "num_samples": [], "user_data": {}}
    for user, labels in writers.items():
        data["users"].append(user)
        data["num_samples"].append(len(labels))
        data["user_data"][user] = {"x": rng.random((len(labels), 784)).round(3).tolist(), "y": labels}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return data


def test_femnist_from_leaf_train_and_test_json(tmp_path):
    folder = tmp_path / "femnist"
    train = leaf_json(
        folder / "train" / "all_data_0_niid_1_keep_0_train_9.json", {"f0001_01": [0, 35, 61], "f0002_07": [10, 11]}
    )
    leaf_json(folder / "test" / "all_data_0_niid_1_keep_0_test_9.json", {"f0001_01": [61], "f0002_07": [3]})
    ds = load_dataset(cfg(tmp_path, "dataset=femnist"))
    assert len(ds.classes) == 62 and ds.classes[10] == "A" and ds.classes[36] == "a"
    assert ds.train.y.tolist() == [0, 35, 61, 10, 11] and ds.test.y.tolist() == [61, 3]
    assert ds.groups == ["f0001_01", "f0002_07"] and ds.train.group.tolist() == [0, 0, 0, 1, 1]
    first = np.array(train["user_data"]["f0001_01"]["x"][0]).reshape(28, 28)
    assert torch.equal(ds.train.x[0, 0], torch.from_numpy((first * 255).round().astype(np.uint8)))


def test_femnist_all_data_split_by_leafs_rule(tmp_path):
    leaf_json(
        tmp_path / "femnist" / "all_data" / "all_data_0.json", {"ten": list(range(10)), "two": [1, 2], "one": [5]}
    )
    ds = load_dataset(cfg(tmp_path, "dataset=femnist"))
    # 9 + 1 of ten samples, 1 + 1 of two, and a writer with one sample left out
    assert ds.train.group.bincount().tolist() == [9, 1] and len(ds.test) == 2
    assert sorted(ds.train.y.tolist() + ds.test.y.tolist()) == sorted([*range(10), 1, 2])


def test_femnists_own_split_added_later_is_read_not_the_seeded_splits_cache(tmp_path):
    """A cache per split: LEAF's train/ and test/ added beside all_data/ after a first load are
    what the next load reads."""
    leaf_json(tmp_path / "femnist" / "all_data" / "all_data_0.json", {"ten": list(range(10)), "two": [1, 2]})
    assert len(load_dataset(cfg(tmp_path, "dataset=femnist")).test) == 2
    leaf_json(tmp_path / "femnist" / "train" / "t.json", {"ten": list(range(7))})
    leaf_json(tmp_path / "femnist" / "test" / "t.json", {"ten": [7, 8, 9]})
    ds = load_dataset(cfg(tmp_path, "dataset=femnist"))
    assert ds.train.y.tolist() == list(range(7)) and ds.test.y.tolist() == [7, 8, 9]


def test_femnist_missing_or_corrupt_json_is_explained(tmp_path):
    with pytest.raises(DataError, match=r"FEMNIST \(62 classes\) is not in .*preprocess.sh"):
        load_dataset(cfg(tmp_path, "dataset=femnist"))
    bad = tmp_path / "femnist" / "all_data" / "all_data_0.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"users": ["a"], "user_data": {"a": {"x": [[0.5, 0.5]], "y": [1]}}}')
    with pytest.raises(DataError, match="writer a's samples are not 784-pixel images"):
        load_dataset(cfg(tmp_path, "dataset=femnist"))
    bad.write_text("{not json")
    with pytest.raises(DataError, match="all_data_0.json is not a LEAF json file"):
        load_dataset(cfg(tmp_path, "dataset=femnist"))


def test_writer_partition_gives_each_client_whole_writers():
    writers = np.repeat(np.arange(40), np.arange(40) % 7 + 1)
    labels = writers % 10
    parts = partition(labels, 10, PartitionConfig(kind="writers", clients=6), seed=0, groups=writers)
    held = [set(writers[p]) for p in parts]
    assert sorted(len(h) for h in held) == [6, 6, 7, 7, 7, 7]  # 40 writers in 6 near-equal groups
    assert set().union(*held) == set(range(40)) and sum(map(len, held)) == 40  # disjoint
    assert all((np.isin(writers, list(h)) == np.isin(np.arange(len(writers)), p)).all() for h, p in zip(held, parts))
    again = partition(labels, 10, PartitionConfig(kind="writers", clients=6), seed=0, groups=writers)
    assert all((a == b).all() for a, b in zip(parts, again))
    other = partition(labels, 10, PartitionConfig(kind="writers", clients=6), seed=1, groups=writers)
    assert [set(writers[p]) for p in other] != held
    with pytest.raises(ConfigError, match="exceeds the 40 writers"):
        partition(labels, 10, PartitionConfig(kind="writers", clients=41), seed=0, groups=writers)


def test_writer_and_domain_partitions_need_such_data():
    with pytest.raises(ConfigError, match="partition.kind=writers needs writer ids.*femnist or femnist_digits"):
        load_config(None, ["dataset=cifar10", "partition=writers"])
    with pytest.raises(ConfigError, match="partition.kind=domains needs a dataset of domains.*office_caltech10"):
        load_config(None, ["dataset=femnist", "partition=domains"])
    with pytest.raises(ConfigError, match="partition.clients must be 4, not 10"):
        load_config(None, ["dataset=office_caltech10", "partition=domains", "partition.clients=10"])


# --- Tiny-ImageNet ------------------------------------------------------------------------

WNIDS = ["n02124075", "n01443537", "n09246464"]


def jpeg(mode="RGB", size=(64, 64), seed=0):
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(buffer, "JPEG")
    return buffer.getvalue()


def make_tiny_imagenet(path):
    """tiny-imagenet-200.zip's layout: train/<wnid>/images, val/images + val_annotations.txt, unlabelled test/."""
    annotations = []
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("tiny-imagenet-200/wnids.txt", "\n".join(WNIDS))
        for c, wnid in enumerate(WNIDS):
            z.writestr(f"tiny-imagenet-200/train/{wnid}/{wnid}_boxes.txt", "")
            for i in range(3):
                z.writestr(
                    f"tiny-imagenet-200/train/{wnid}/images/{wnid}_{i}.JPEG",
                    jpeg("L" if i == 2 else "RGB", seed=10 * c + i),
                )
            for i in range(2):
                name = f"val_{2 * c + i}.JPEG"
                z.writestr(f"tiny-imagenet-200/val/images/{name}", jpeg(seed=100 + 2 * c + i))
                annotations.append(f"{name}\t{wnid}\t0\t0\t63\t63")
        z.writestr("tiny-imagenet-200/val/val_annotations.txt", "\n".join(annotations) + "\n")
        z.writestr("tiny-imagenet-200/test/images/test_0.JPEG", jpeg(seed=999))


@pytest.fixture
def tiny_server(tmp_path, monkeypatch):
    return serve_generated(tmp_path, monkeypatch, "TINY_IMAGENET", make_tiny_imagenet)


def test_tiny_imagenet_download_verify_and_val_regrouped_by_class(tiny_server, tmp_path):
    ds = load_dataset(cfg(tmp_path / "root", "dataset=tiny_imagenet"))
    assert ds.classes == sorted(WNIDS)  # ImageFolder's order
    assert ds.train.x.shape == (9, 3, 64, 64) and ds.test.x.shape == (6, 3, 64, 64)  # test/ has no labels: unused
    assert ds.train.y.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2] and ds.test.y.tolist() == [0, 0, 1, 1, 2, 2]
    with zipfile.ZipFile(tiny_server) as z:  # val_2.JPEG is annotated with WNIDS[1], the first class sorted
        expected = np.array(Image.open(io.BytesIO(z.read("tiny-imagenet-200/val/images/val_2.JPEG"))).convert("RGB"))
        grey = np.array(Image.open(io.BytesIO(z.read(f"tiny-imagenet-200/train/{WNIDS[1]}/images/{WNIDS[1]}_2.JPEG"))))
    assert torch.equal(ds.test.x[0], torch.from_numpy(expected).permute(2, 0, 1))
    assert all(torch.equal(ds.train.x[2, c], torch.from_numpy(grey)) for c in range(3))  # grey -> RGB
    assert ds.mean == (0.5,) * 3 and ds.std == (0.5,) * 3 and not ds.augment


def test_tiny_imagenet_bad_archive_and_unannotated_val(tiny_server, tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    (root / "tiny-imagenet-200.zip").write_bytes(b"PK not really")
    with pytest.raises(DataError, match="fails verification"):
        load_dataset(cfg(root, "dataset=tiny_imagenet"))
    with zipfile.ZipFile(tiny_server, "a") as z:
        z.writestr("tiny-imagenet-200/val/images/val_99.JPEG", jpeg())
    serve(monkeypatch, vision_datasets, "TINY_IMAGENET", tiny_server)
    with pytest.raises(DataError, match="val_99.JPEG has no class in val_annotations.txt"):
        load_dataset(cfg(tmp_path / "other", "dataset=tiny_imagenet"))


# --- Office-Caltech-10 ----------------------------------------------------------------------

DOMAINS = ("amazon", "caltech", "dslr", "webcam")
CLASSES = vision_datasets.OFFICE_CLASSES


def make_office(root, per_class=3, split_files=True):
    """FedBN's office_caltech_10/: <domain>/<class>/*.jpg and <domain>_train.pkl / _test.pkl
    (numpy arrays of paths relative to the data root, and of class names)."""
    folder = root / "office_caltech_10"
    for d, domain in enumerate(DOMAINS):
        paths = []
        for c, label in enumerate(CLASSES):
            (folder / domain / label).mkdir(parents=True)
            for i in range(per_class):
                name = f"{domain}/{label}/frame_{i:04d}.jpg"
                (folder / name).write_bytes(
                    jpeg("L" if (c + i) % 5 == 0 else "RGB", size=(40 + 10 * d, 30), seed=d * 100 + c * 10 + i)
                )
                paths.append((f"office_caltech_10/{name}", label, i))
        if split_files:
            for split, keep in (("train", lambda i: i > 0), ("test", lambda i: i == 0)):
                chosen = [(p, label) for p, label, i in paths if keep(i)]
                with open(folder / f"{domain}_{split}.pkl", "wb") as f:
                    pickle.dump((np.array([p for p, _ in chosen]), np.array([label for _, label in chosen])), f)
    return folder


def test_office_with_fedbns_split_files(tmp_path):
    make_office(tmp_path)
    ds = load_dataset(cfg(tmp_path, "dataset=office_caltech10"))
    assert ds.classes == CLASSES and ds.groups == list(DOMAINS) and ds.group_kind == "domain"
    assert ds.train.x.shape == (4 * 10 * 2, 3, 256, 256) and ds.test.x.shape == (40, 3, 256, 256)
    assert ds.train.group.bincount().tolist() == [20] * 4 and ds.test.group.bincount().tolist() == [10] * 4
    assert ds.test.y.tolist() == list(range(10)) * 4
    first = Image.open(tmp_path / "office_caltech_10/amazon/back_pack/frame_0000.jpg").convert("RGB")
    expected = np.array(first.resize((256, 256), Image.BILINEAR)).transpose(2, 0, 1)
    assert torch.equal(ds.test.x[0], torch.from_numpy(expected))  # FedBN's Resize([256, 256])
    assert ds.augment and ds.crop_pad == 0 and ds.max_rotation == 30 and ds.mean == (0.0,) * 3


def test_office_turns_an_image_of_other_than_three_bands_grey_as_fedbns_loader(tmp_path):
    """FedBN's OfficeDataset: `if len(image.split()) != 3: Grayscale(num_output_channels=3)`; a
    CMYK JPEG in colour becomes its grey levels, an RGB one keeps its colours."""
    folder = make_office(tmp_path, per_class=2)
    cmyk = Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 40, 4), dtype=np.uint8), "CMYK")
    cmyk.save(folder / "amazon/back_pack/frame_0000.jpg", "JPEG")
    test = load_dataset(cfg(tmp_path, "dataset=office_caltech10")).test.x
    grey = Image.open(folder / "amazon/back_pack/frame_0000.jpg").convert("L").convert("RGB")
    assert torch.equal(test[0], torch.from_numpy(np.array(grey.resize((256, 256), Image.BILINEAR)).transpose(2, 0, 1)))
    assert not torch.equal(test[1][0], test[1][1])  # an RGB image keeps its colours


def test_a_split_file_that_lists_no_image_is_one_line(tmp_path):
    make_office(tmp_path, per_class=1)  # FedBN's train files list the images after the first: none
    with pytest.raises(DataError, match="its train split lists no image"):
        load_dataset(cfg(tmp_path, "dataset=office_caltech10"))


def test_office_without_split_files_is_split_80_20_with_a_fixed_seed(tmp_path):
    make_office(tmp_path, per_class=5, split_files=False)
    ds = load_dataset(cfg(tmp_path, "dataset=office_caltech10"))
    assert ds.test.group.bincount().tolist() == [10] * 4  # ceil(20% of 50) per domain
    assert (ds.test.y.bincount() == 4).all()  # one per class and domain
    (tmp_path / "office_caltech_10").rename(tmp_path / "moved")  # the cache is enough afterwards
    assert torch.equal(load_dataset(cfg(tmp_path, "dataset=office_caltech10")).test.x, ds.test.x)


def test_office_as_fedbns_zip(tmp_path):
    folder = make_office(tmp_path / "unzipped", per_class=2)
    root = tmp_path / "root"
    root.mkdir()
    with zipfile.ZipFile(root / "office_caltech_10_dataset.zip", "w") as z:
        for f in folder.rglob("*"):
            if f.is_file():
                z.write(f, f"office_caltech_10/{f.relative_to(folder)}")
    zipped = load_dataset(cfg(root, "dataset=office_caltech10"))
    unzipped = load_dataset(cfg(tmp_path / "unzipped", "dataset=office_caltech10"))
    assert len(zipped.train) == 40 and torch.equal(zipped.train.x, unzipped.train.x)
    assert torch.equal(zipped.test.group, unzipped.test.group)


def test_office_missing_partial_or_unsafe(tmp_path):
    with pytest.raises(DataError, match="Office-Caltech-10 is not in .*office_caltech_10_dataset.zip"):
        load_dataset(cfg(tmp_path, "dataset=office_caltech10"))
    folder = make_office(tmp_path, per_class=1)
    (folder / "webcam_test.pkl").unlink()
    with pytest.raises(DataError, match=r"some of FedBN's split files but not \['webcam_test.pkl'\]"):
        load_dataset(cfg(tmp_path, "dataset=office_caltech10"))
    (folder / "webcam_test.pkl").write_bytes(pickle.dumps(os.getcwd))  # a pickle may name any function
    with pytest.raises(DataError, match="webcam_test.pkl is not a FedBN split file.*not allowed"):
        load_dataset(cfg(tmp_path, "dataset=office_caltech10"))


def test_office_domains_are_the_clients_and_accuracy_is_reported_per_domain(tmp_path):
    make_office(tmp_path / "data")
    run_cfg = load_config(
        None,
        [
            f"data_root={tmp_path / 'data'}",
            *CPU,
            "dataset=office_caltech10",
            "partition=domains",
            "partition.clients=4",
            "federation.rounds=1",
            "local.epochs=1",
            "local.batch_size=10",
        ],
    )
    federation = build_federation(run_cfg, torch.device("cpu"))
    assert federation.counts.sum(1).tolist() == [20] * 4
    assert [federation.dataset.train.group[c.index].unique().tolist() for c in federation.clients] == [
        [0],
        [1],
        [2],
        [3],
    ]
    summary = trainer.run(run_cfg, tmp_path / "run")
    assert summary["status"] == "completed" and list(summary["domain_acc"]) == list(DOMAINS)
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["domain_acc"] == summary["domain_acc"]
    counts = federation.test.group.bincount()  # the pooled accuracy is the domains' weighted mean
    pooled = sum(summary["domain_acc"][d] * counts[i].item() for i, d in enumerate(DOMAINS)) / counts.sum().item()
    assert pooled == pytest.approx(summary["final_acc"])


def test_flip_and_rotation_augmentation():
    aug = Augmenter((0.0,), (1 / 255,), augment=True, device=torch.device("cpu"), pad=0, max_rotation=30)
    white = torch.full((200, 1, 32, 32), 255, dtype=torch.uint8)
    out = aug(white, torch.Generator().manual_seed(0))
    assert (out[:, 0, 16, 16] == 255).all()  # the centre stays
    assert 0.5 < (out[:, 0, 0, 0] == 0).float().mean() < 1  # corners turn black, unless the angle is small
    flip_only = Augmenter((0.0,), (1 / 255,), augment=True, device=torch.device("cpu"), pad=0)
    ramp = torch.arange(32, dtype=torch.uint8).expand(100, 1, 32, 32)
    flipped = flip_only(ramp, torch.Generator().manual_seed(0))
    same = (flipped == ramp.float()).flatten(1).all(1)
    mirrored = (flipped == ramp.float().flip(-1)).flatten(1).all(1)
    assert (same ^ mirrored).all() and 20 < same.sum() < 80


def test_rotation_under_float64_as_default_turns_the_float32_images(float64):
    """The float64 tests (batched against sequential) set torch's default dtype; the images to
    rotate stay float32, and so do the angles drawn for them (grid_sample takes one dtype)."""
    aug = Augmenter((0.0,), (1 / 255,), augment=True, device=torch.device("cpu"), pad=0, max_rotation=30)
    out = aug(torch.full((8, 1, 32, 32), 255, dtype=torch.uint8), torch.Generator().manual_seed(0))
    assert (out[:, 0, 16, 16] == 255).all()


# --- the smoke scale's synthetic stand-ins ----------------------------------------------------

SETTINGS = {
    "femnist_writers": {
        "dataset": {"name": "femnist"},
        "partition": {"kind": "writers", "clients": 10},
        "model": {"name": "resnet50"},
    },
    "femnist_digits": {"dataset": {"name": "femnist_digits"}, "partition": {"kind": "dirichlet", "beta": 0.05}},
    "tiny_imagenet": {"dataset": {"name": "tiny_imagenet"}, "model": {"name": "resnet50"}},
    "office": {
        "dataset": {"name": "office_caltech10"},
        "partition": {"kind": "domains", "clients": 4},
        "model": {"name": "alexnet_bn"},
    },
    "sst5": {
        "dataset": {"name": "sst5"},
        "partition": {"clients": 10},
        "model": {"name": "distilbert"},
        "local": {"optimizer": "adam", "lr": 1e-3, "epochs": 1},
    },
}


def smoke_config(setting, root, **overrides):
    values = smoke_scale(SETTINGS[setting])
    return load_config(
        None, {**values, "data_root": str(root), "trainer": {"device": "cpu", "progress": False}, **overrides}
    )


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_smoke_scale_stands_in_for_each_dataset(setting, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # importing it fails: the smoke scale must not need it
    run_cfg = smoke_config(setting, tmp_path)
    federation = build_federation(run_cfg, torch.device("cpu"))
    model = build_model(
        run_cfg.model.name,
        federation.num_classes,
        federation.input_shape[0],
        federation.input_shape[-1],
        text=federation.dataset.text,
    )
    x, y = next(federation.clients[0].batches(8, torch.Generator().manual_seed(0)))
    assert model(x).shape == (len(y), federation.num_classes)
    s, ds = run_cfg.dataset.synthetic, federation.dataset
    side = SMOKE_MAX_SIDE  # every image dataset shrinks to it
    expected = {  # classes, input shape, model, what the partition needs
        "femnist_writers": (62, (1, side, side), "resnet8", "writer"),
        "femnist_digits": (10, (1, side, side), "fedavg_cnn", "writer"),
        "tiny_imagenet": (200, (3, side, side), "resnet8", None),
        "office": (10, (3, side, side), "resnet8", "domain"),
        "sst5": (5, (32,), "text_bow", None),
    }[setting]
    assert (ds.num_classes, federation.input_shape, run_cfg.model.name, ds.group_kind) == expected
    assert len(ds.train) <= SMOKE_MAX_TRAIN and len(ds.test) <= SMOKE_MAX_TEST
    if setting == "femnist_writers":  # 5 writers per client, each client whole writers
        assert s.writers == 50 and all(len(ds.train.group[c.index.cpu()].unique()) == 5 for c in federation.clients)
    if setting == "office":
        assert ds.groups == list(DOMAINS) and len(federation.clients) == 4


@pytest.mark.parametrize("setting", ["office", "sst5"])
def test_smoke_runs_report_what_the_tables_read(setting, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    summary = trainer.run(smoke_config(setting, tmp_path, federation={"rounds": 1}), tmp_path / "run")
    assert summary["status"] == "completed" and summary["final_acc"] is not None
    assert (list(summary["domain_acc"]) == list(DOMAINS)) if setting == "office" else summary["domain_acc"] is None


def test_synthetic_text_is_learnable_without_transformers(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    run_cfg = tiny_cfg(
        "dataset.synthetic.text_length=16",
        "dataset.synthetic.vocab_size=100",
        "model=text_bow",
        "local.optimizer=adam",
        "local.lr=0.01",
        "federation.rounds=4",
        "local.epochs=2",
    )
    ds = load_dataset(run_cfg)
    assert ds.train.x.shape == (600, 16) and ds.train.x.dtype == torch.int64 and ds.text.pad_id == 0
    assert (ds.train.x[:, 0] != 0).all() and (ds.train.x == 0).any()  # random lengths, padded
    assert trainer.run(run_cfg, tmp_path / "run")["final_acc"] > 80


def test_text_and_image_models_do_not_mix_and_adam_is_checked():
    with pytest.raises(ConfigError, match="model.name=distilbert does not fit dataset.name=cifar10"):
        load_config(None, ["dataset=cifar10", "model=distilbert"])
    with pytest.raises(ConfigError, match="model.name=fedavg_cnn does not fit dataset.name=ag_news"):
        load_config(None, ["dataset=ag_news"])
    with pytest.raises(ConfigError, match="local.optimizer='rmsprop' is unknown"):
        load_config(None, ["local.optimizer=rmsprop"])
    with pytest.raises(ConfigError, match="method fednova models local SGD steps"):
        load_config(None, ["method=fednova", "local.optimizer=adam"])


# --- AG News and SST-5 ---------------------------------------------------------------------

AG_ROWS = [
    ("3", "Wall St. Bears Claw Back", "Short-sellers are seeing green again."),
    ("4", "Space, the final frontier", 'A "quoted", comma-laden description.'),
    ("1", "Talks resume", "Diplomats met."),
    ("2", "Cup final", "A late goal."),
]
SST_TREES = {
    "train": [
        "(3 (2 It) (4 (4 works) (2 .)))",
        "(0 (1 (1 -LRB-) (1 (1 dull) (1 -RRB-))) (0 film))",
        "(4 (4 Superb) (2 .))",
        "(1 (2 Not) (1 good))",
        "(2 (2 A) (2 film))",
    ],
    "dev": ["(2 (2 Dev) (2 line))"],
    "test": ["(2 (2 So) (2 so))", "(4 (4 Great))"],
}


def make_ag_news(folder):
    import csv

    paths = {}
    for split in ("train", "test"):
        paths[split] = folder / f"{split}.csv"
        with open(paths[split], "w", newline="") as f:
            csv.writer(f, quoting=csv.QUOTE_ALL).writerows(AG_ROWS)
    return paths


def make_sst(path):
    with zipfile.ZipFile(path, "w") as z:
        for split, trees in SST_TREES.items():
            z.writestr(f"trees/{split}.txt", "\n".join(trees) + "\n")
    return path


@pytest.fixture
def text_server(tmp_path, monkeypatch):
    served = tmp_path / "server"
    served.mkdir()
    paths = make_ag_news(served)
    monkeypatch.setattr(
        text_datasets,
        "AG_NEWS",
        {
            split: Archive(paths[split].as_uri(), text_datasets.AG_NEWS[split].filename, md5(paths[split]))
            for split in paths
        },
    )
    sst = make_sst(served / "trainDevTestTrees_PTB.zip")
    monkeypatch.setattr(
        text_datasets,
        "SST",
        Archive(sst.as_uri(), text_datasets.SST.filename, sha256=hashlib.sha256(sst.read_bytes()).hexdigest()),
    )
    return served


def test_ag_news_and_sst5_download_verify_and_parse(text_server, tmp_path):
    root = tmp_path / "root"
    ag = text_datasets.read_raw("ag_news", root)
    assert ag["train"][1] == [2, 3, 0, 1]
    assert ag["train"][0][1] == 'Space, the final frontier A "quoted", comma-laden description.'
    sst = text_datasets.read_raw("sst5", root)
    assert sst["train"] == (["It works .", "( dull ) film", "Superb .", "Not good", "A film"], [3, 0, 4, 1, 2])
    assert sst["test"] == (["So so", "Great"], [2, 4]) and sst["dev"] == (["Dev line"], [2])
    (root / "trainDevTestTrees_PTB.zip").write_bytes(b"tampered")
    with pytest.raises(DataError, match="fails verification: sha256"):
        text_datasets.read_raw("sst5", root)


def test_text_datasets_without_transformers_say_how_to_get_it(text_server, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(DataError, match="pip install -r requirements-text.txt"):
        load_dataset(cfg(tmp_path, "dataset=sst5", "model=distilbert"))


@pytest.fixture
def tiny_distilbert(tmp_path_factory):
    """A two-layer DistilBERT and a word-piece tokenizer, saved like a hub checkpoint: no network."""
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("tiny-distilbert")
    words = sorted(
        {w.lower().strip('.,"()') for _, t, d in AG_ROWS for w in f"{t} {d}".split()}
        | {
            w.lower()
            for trees in SST_TREES.values()
            for t in trees
            for w in t.replace("(", " ").replace(")", " ").split()
            if not w.isdigit()
        }
    )
    vocab = folder / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", '"', "(", ")", "-", *words]) + "\n"
    )
    transformers.DistilBertTokenizerFast(vocab_file=str(vocab)).save_pretrained(folder)
    config = transformers.DistilBertConfig(
        vocab_size=len(vocab.read_text().split()),
        dim=32,
        n_layers=2,
        n_heads=2,
        hidden_dim=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.DistilBertModel(config).save_pretrained(folder)
    return folder


def test_distilbert_on_ag_news_with_a_cached_tokenisation(text_server, tiny_distilbert, tmp_path, monkeypatch):
    run_cfg = cfg(
        tmp_path / "root",
        "dataset=ag_news",
        "model=distilbert",
        f"model.pretrained={tiny_distilbert}",
        "dataset.max_length=16",
        "partition=iid",
        "partition.clients=2",
        "federation.rounds=1",
        "local.epochs=1",
        "local.batch_size=2",
        "local.optimizer=adam",
        "local.lr=1e-4",
        "method=fedgkd",
    )
    ds = load_dataset(run_cfg)
    assert ds.train.x.shape == (4, 16) and ds.text.pad_id == 0 and ds.classes[3] == "Sci/Tech"
    assert (ds.train.x[:, 0] == 2).all()  # [CLS] first
    caches = list((tmp_path / "root" / "cache").glob("ag_news-*-len16.pt"))
    assert len(caches) == 1
    monkeypatch.setattr(text_datasets, "convert_text", lambda *a: pytest.fail("tokenised again"))
    assert torch.equal(load_dataset(run_cfg).train.x, ds.train.x)
    summary = trainer.run(run_cfg, tmp_path / "run")
    assert summary["status"] == "completed" and summary["num_parameters"] > 0


def test_unreachable_pretrained_weights_are_explained(text_server, tiny_distilbert, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match=r"model.pretrained='/nonexistent/model': cannot load its tokenizer"):
        load_dataset(cfg(tmp_path, "dataset=sst5", "model=distilbert", "model.pretrained=/nonexistent/model"))


def test_moon_cifar100_augmentation_pads_black_and_rotates_after_the_crop(tiny_cfg):
    """dataset.augmentation=moon_cifar100: RandomCrop(32, padding=4) (black padding),
    RandomHorizontalFlip, RandomRotation(15), in that order, as MOON's and FedCSD's code."""
    from shared.data.datasets import load_dataset

    ds = load_dataset(tiny_cfg("dataset.augmentation=moon_cifar100"))
    assert (ds.crop_pad, ds.pad_mode, ds.max_rotation) == (4, "constant", 15.0)
    assert (load_dataset(tiny_cfg()).pad_mode, load_dataset(tiny_cfg()).max_rotation) == ("reflect", 0.0)
    white = torch.full((400, 1, 16, 16), 255, dtype=torch.uint8)
    crop = Augmenter((0.0,), (1 / 255,), augment=True, device=torch.device("cpu"), pad=4, pad_mode="constant")
    out = crop(white, torch.Generator().manual_seed(0))
    assert (out == 0).any() and ((out == 0) | (out == 255)).all()  # black borders, where reflection has none
    moon = Augmenter(
        (0.0,), (1 / 255,), augment=True, device=torch.device("cpu"), pad=4, pad_mode="constant", max_rotation=15
    )
    g = torch.Generator().manual_seed(0)
    in_order = moon.normalize(moon.rotate(moon.crop_and_flip(white, g).float(), g))
    assert torch.equal(moon(white, torch.Generator().manual_seed(0)), in_order)
    with pytest.raises(
        ConfigError,
        match=r"dataset.augmentation='moon' is unknown; valid: \['always', 'always:feddf', 'always:moon_cifar100', "
        r"'always:niid_bench', 'feddf', 'moon_cifar100', 'niid_bench', 'none'\]",
    ):
        tiny_cfg("dataset.augmentation=moon")


def test_each_papers_tables_augment_as_its_code_does():
    """CIFAR-100 as MOON's code in FedCSD, FedSSD and FedCAD, FedGKD's images as FedDF's (black
    padding, no rotation; Tiny-ImageNet too, which is otherwise not augmented); text is never
    augmented; FedSSD's and FedCAD's CIFAR-10 keep CIFAR's default (NIID-Bench's, MOON's)."""
    from shared.targets.table_declarations import all_tables

    seen = {}
    for table in all_tables():
        for cell in expand(table, "paper"):
            seen.setdefault((table.paper, cell.config.dataset.name), set()).add(cell.config.dataset.augmentation)
    assert (
        seen[("fedcsd", "cifar100")]
        == seen[("fedssd", "cifar100")]
        == seen[("fedcad", "cifar100")]
        == {"moon_cifar100"}
    )
    assert seen[("fedgkd", "cifar10")] == seen[("fedgkd", "cifar100")] == {"feddf"}
    assert seen[("fedgkd", "tiny_imagenet")] == {"always:feddf"}
    assert seen[("fedgkd", "ag_news")] == seen[("fedgkd", "sst5")] == {None}
    assert seen[("fedssd", "cifar10")] == seen[("fedcad", "cifar10")] == {None}


def test_sst5_validates_on_its_dev_split_and_a_cache_without_it_is_rebuilt(text_server, tiny_distilbert, tmp_path):
    """dataset.val_source=dev: FedGKD-VOTE's validation split is SST-5's development split,
    whole, and the clients keep every training sentence; a tokenised cache written before the
    dev split was kept is rebuilt, not trusted."""
    run_cfg = cfg(
        tmp_path / "root",
        "dataset=sst5",
        "model=distilbert",
        f"model.pretrained={tiny_distilbert}",
        "dataset.max_length=16",
        "dataset.val_source=dev",
        "partition=iid",
        "partition.clients=2",
        "method=fedgkd",
        "method.vote=true",
    )
    federation = build_federation(run_cfg, torch.device("cpu"))
    assert federation.val.y.tolist() == [2] and federation.counts.sum() == 5
    (cache,) = (tmp_path / "root" / "cache").glob("sst5-*-len16.pt")
    arrays = torch.load(cache, weights_only=True)
    torch.save({k: v for k, v in arrays.items() if not k.startswith("dev_")}, cache)
    assert load_dataset(run_cfg).dev.y.tolist() == [2]
    assert "dev_x" in torch.load(cache, weights_only=True)
