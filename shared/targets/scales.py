"""The scales a table's runs are expanded at: the paper's protocol; `small`, real data and a
tenth of the rounds; `smoke`, minutes on a CPU on synthetic stand-ins shaped like the data.
Each is a function of a cell's config overrides (`SCALES`)."""

from __future__ import annotations

from typing import Callable

from shared.config.dotted import deep_merge
from shared.config.schema import ConfigError, PartitionConfig, RunConfig
from shared.data.catalog import dataset_info

# Images at most 16 pixels wide: a quarter of CIFAR's convolution cost, the bulk of a smoke run
SMOKE_MAX_SIDE = 16
# Models too heavy for CPU minutes, and their stand-ins (besides ResNet-50 -> ResNet-8): AlexNet-BN
# (57M parameters, at least 63 pixels wide) and DistilBERT (needs `transformers` and its weights).
SMOKE_MODELS = {"alexnet_bn": "resnet8", "distilbert": "text_bow"}
SMOKE_TEXT_LENGTH, SMOKE_VOCAB_SIZE = 32, 1000
SMOKE_WRITERS_PER_CLIENT = 5  # FEMNIST's writers: about 2,000 over 10 clients in FedCAD
# Per class at least 20 training samples (about 20 a client: benchmarks/smoke_learning.py) and
# 100 test samples, unless that exceeds 2,000 and 1,000 in all: Tiny-ImageNet's 200 classes then
# cost what CIFAR-100's 100 do. Every round tests the global model and each local model on the
# whole test set, so it is kept small; 1,000 rather than 500 because FedSSD's distillation
# weight (M^2 <= 1e-4) moves only predictions near the class boundary, and in 500 samples it
# printed FedAvg's number in 3 of 5 columns of its Table II. 2,000 did not end the ties (2 of 5)
# for 8% more CPU: which column ties moves with any change of the scale, so a tie is marked in
# the table instead (shared/reporting/summary.py REFERENCE_ROW).
SMOKE_TRAIN_PER_CLASS, SMOKE_TEST_PER_CLASS, SMOKE_MAX_TRAIN, SMOKE_MAX_TEST = 20, 100, 2000, 1000
SMOKE_SAMPLES_PER_CLIENT = 20
# Each sample blends in another class's template by up to 60% (SyntheticConfig.overlap): about
# one in six looks like the other class, so near-IID runs end below 100% instead of tying there.
SMOKE_OVERLAP = 0.6
# 4 rounds of 10 epochs of about 20 samples at batch size 6 (40 steps a round, 75 before at
# 3 x 2 epochs of 100 samples): local models fit their data within a round as the papers' E=10
# does, which is when the methods' terms that pull towards the global model act (FedSSD's
# only once the global model is credible, from the second or third round); MOON (mu=5) stayed
# at chance at δ=0.1 with 2 epochs a round. Batch size 6 rather than 8 (30 steps) for 1.2x the
# training CPU: at 8, FedSSD's tiny weight (M^2 <= 1e-4) changed no test prediction at δ=0.1, so
# it printed FedAvg's number there, and MOON, the slowest learner (its projection head's two
# extra layers leave their initial plateau only after about 90 steps at lr 0.01, and from the
# second round its contrastive term outweighs the cross-entropy), ended single seeds at chance;
# at 6 neither happens in FedSSD's Table II or FedCAD's Table 2 (benchmarks/README.md).
SMOKE_ROUNDS, SMOKE_LOCAL_EPOCHS, SMOKE_BATCH_SIZE = 4, 10, 6
# A Dirichlet draw is redrawn until every client holds partition.min_size samples: 10 in the
# papers' code, at most 2% of a client's 500 to 5,000 samples there, a guard against empty
# clients that rarely binds. At about 20 samples a client it is half a client's share: 10
# clients meet it in 2 draws of 3, but 100 clients (FedCAD Table 3, FedSSD Fig. 8) in about 1
# of 1,000, so their partitions could not be drawn. min_size is capped so that the clients
# together are guaranteed no more samples than 10 clients are (clients x min_size <= 100: 1 each
# for 100 clients, met by every draw): the 10-client runs keep the paper's 10 and their ids.
# Giving 100 clients 60 samples each instead would meet 10 in 19 draws of 20, for 3x the training.
SMOKE_GUARANTEED_SAMPLES = 100
# A stand-in has no rows apart from its clients' (no dev split, none that train_subset leaves out):
# where a dataset's validation split lies apart (dataset.val_source), it holds a tenth of its own out.
SMOKE_VAL_FRACTION = 0.1


def smoke_synthetic(dataset: dict, clients: int) -> dict:
    """dataset.synthetic for the stand-in of `dataset`: its shape, about 20 samples per client,
    overlapping classes (images), and what its partitions need: writer ids (FEMNIST), domains
    (Office-Caltech-10, so that per-domain accuracy is reported) or token sequences (AG News,
    SST-5)."""
    info = dataset_info(dataset.get("name", "cifar10"))
    classes = info.classes or 10  # imagefolder: CIFAR-10's shape
    if info.text:
        shape = {
            "text_length": min(SMOKE_TEXT_LENGTH, dataset.get("max_length", SMOKE_TEXT_LENGTH)),
            "vocab_size": SMOKE_VOCAB_SIZE,
        }
    else:
        shape = {"channels": info.channels, "image_size": min(info.side, SMOKE_MAX_SIDE), "overlap": SMOKE_OVERLAP}
    if info.writers:
        shape["writers"] = SMOKE_WRITERS_PER_CLIENT * clients
    if info.domains:
        shape["domains"] = list(info.domains)
    train_per_class = max(
        min(SMOKE_TRAIN_PER_CLASS, SMOKE_MAX_TRAIN // classes), SMOKE_SAMPLES_PER_CLIENT * clients // classes
    )
    test_per_class = min(SMOKE_TEST_PER_CLASS, SMOKE_MAX_TEST // classes)
    return {"num_classes": classes, "train_per_class": train_per_class, "test_per_class": test_per_class, **shape}


def smoke_scale(values: dict) -> dict:
    """Minutes on a CPU: synthetic data shaped like the dataset (`smoke_synthetic`), 4 rounds of
    10 epochs at batch size 6 (the global model leaves chance in its first round or two, and
    local models fit their data, so that the methods that distil from it differ from FedAvg),
    ResNet-50 and AlexNet-BN replaced by ResNet-8 (whose GroupNorm keeps FedCSD's lr 0.1 stable,
    as AlexNet's BatchNorm does) and DistilBERT by a small embedding model. Everything else
    (partition, method, clients, learning rate) is kept, so every code path of the paper setting
    runs, except a Dirichlet draw's min_size over many clients (`smoke_min_size`) and a
    validation split apart from the clients' data (SMOKE_VAL_FRACTION)."""
    model = values.get("model", {}).get("name", "fedavg_cnn")
    clients = values.get("partition", {}).get("clients", 10)
    synthetic = smoke_synthetic(values.get("dataset", {}), clients)
    aux = values.get("aux", {}).get("per_class", 0)
    dataset = {"name": "synthetic", "synthetic": synthetic}
    if values.get("dataset", {}).get("val_source"):
        dataset |= {"val_source": None, "val_fraction": SMOKE_VAL_FRACTION}
    partition = smoke_min_size(values.get("partition", {}))
    if values.get("partition", {}).get("writers"):  # a choice of a real dataset's writers: the stand-in's all
        partition["writers"] = None
    return deep_merge(
        values,
        {
            "partition": partition,
            "aux": {"per_class": min(aux, synthetic["train_per_class"] // 2)},
            "dataset": dataset,
            "model": {"name": "resnet8" if model.startswith("resnet50") else SMOKE_MODELS.get(model, model)},
            "federation": {"rounds": SMOKE_ROUNDS},
            "local": {"epochs": SMOKE_LOCAL_EPOCHS, "batch_size": SMOKE_BATCH_SIZE},
            "eval": {"batch_size": 500},
        },
    )


def smoke_min_size(partition: dict) -> dict:
    """partition.min_size capped by SMOKE_GUARANTEED_SAMPLES for a Dirichlet draw over many
    clients; {} where the cap leaves it as it is (an explicit min_size would be refused with
    another partition.kind, where it has no effect)."""
    defaults = PartitionConfig()
    min_size = partition.get("min_size", defaults.min_size)
    cap = max(1, SMOKE_GUARANTEED_SAMPLES // partition.get("clients", defaults.clients))
    if partition.get("kind", defaults.kind) != "dirichlet" or min_size <= cap:
        return {}
    return {"min_size": cap}


def small_scale(values: dict) -> dict:
    """Real data, a tenth of the rounds (at least 5) and at most 2 local epochs: a CPU-sized
    check that the numbers head the right way."""
    rounds = values.get("federation", {}).get("rounds", RunConfig().federation.rounds)
    epochs = values.get("local", {}).get("epochs", RunConfig().local.epochs)
    return deep_merge(values, {"federation": {"rounds": max(5, rounds // 10)}, "local": {"epochs": min(2, epochs)}})


SCALES: dict[str, Callable[[dict], dict]] = {"paper": lambda v: v, "small": small_scale, "smoke": smoke_scale}
SCALE_SEEDS = {"smoke": 2}  # at most this many of a table's seeds (still a mean and a spread)


def check_scale(scale: str) -> None:
    if scale not in SCALES:
        raise ConfigError(f"scale={scale!r} is unknown; valid: {sorted(SCALES)}")
