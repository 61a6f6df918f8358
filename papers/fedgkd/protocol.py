"""FedGKD's protocol (Section 5.1 and "Parameter Setting"): the training setup every table starts
from, its settings (three CV datasets at three alphas, two NLP datasets) and its eight methods
with their per-setting parameters, the rows that `tables.py` draws its tables from."""

from dataclasses import replace

from shared.config.dotted import deep_merge
from shared.targets.table_declarations import Column, Row

# Section 5.1: 20 clients, C=0.2, Dir(alpha), 100 rounds (Tiny-ImageNet 30), E=20, B=64, SGD lr
# 0.05, momentum 0.9, weight decay 1e-5; 90% of the training split trains, 10% validates (the
# validation losses weight FedGKD-VOTE's buffer). ResNet-8 with GroupNorm on CIFAR; ResNet-50 on
# Tiny-ImageNet, with GroupNorm except for MOON and FedGKD+, which use BatchNorm.
PROTOCOL = {
    # images augmented as the released code (FedDF's) does: a crop of the image padded with black, a flip
    "dataset": {"name": "cifar10", "val_fraction": 0.1, "augmentation": "feddf"},
    "model": {"name": "resnet8", "init": "kaiming_fan_out"},  # FedDF's ResNets' initial weights
    "partition": {"kind": "dirichlet_balanced", "clients": 20},  # the released code's (FedDF's) Dir(alpha)
    "federation": {"rounds": 100, "participation": 0.2},
    "local": {"epochs": 20, "batch_size": 64, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-5},
}
CIFAR10 = {"dataset": {"name": "cifar10"}}
CIFAR100 = {"dataset": {"name": "cifar100"}}
# Tiny-ImageNet augmented as the released code does it (RandomCrop(64, padding=4), a flip), where
# Tiny-ImageNet is otherwise left unaugmented
TINY = {
    "dataset": {"name": "tiny_imagenet", "augmentation": "always:feddf"},
    "model": {"name": "resnet50_gn"},
    "federation": {"rounds": 30},
}
# NLP: DistilBERT, Adam lr 1e-5, no weight decay, 10 rounds, 4 clients per round; AG News on 50% of
# its training split (60,000), 20 clients, E=1; SST-5 on all of it (8,544), 10 clients, E=3, as Table 2
# has them (the text's "50% and 100% ... respectively" names SST-5 first). Table 2
# gives these as the sizes the clients train on (the images' 45,000 are what remains after the 10%
# validation split), so VOTE's validation text comes from elsewhere, which the paper does not say:
# 6,000 of the 60,000 AG News rows left unused, and SST-5's development split.
NLP = {
    "dataset": {"augmentation": None},
    "model": {"name": "distilbert", "init": None},  # pretrained
    "federation": {"rounds": 10},
    "local": {"optimizer": "adam", "lr": 1e-5, "weight_decay": 0.0},
}
AG_NEWS = deep_merge(
    NLP,
    {
        "dataset": {"name": "ag_news", "train_subset": 60000, "val_source": "unused"},
        "partition": {"clients": 20, "beta": 0.1},
        "federation": {"participation": 0.2},
        "local": {"epochs": 1},
    },
)
SST5 = deep_merge(
    NLP,
    {
        "dataset": {"name": "sst5", "val_fraction": 0.0, "val_source": "dev"},
        "partition": {"clients": 10, "beta": 0.1},
        "federation": {"participation": 0.4},
        "local": {"epochs": 3},
    },
)


def setting(dataset: str, config: dict, alpha: float) -> Column:
    return Column(
        f"{dataset} α={alpha:g}", deep_merge(config, {"partition": {"beta": alpha}}), rf"{dataset} $\alpha={alpha:g}$"
    )


ALPHAS = (1.0, 0.5, 0.1)
CV_SETTINGS = [
    setting(name, config, a)
    for name, config in (("CIFAR-10", CIFAR10), ("CIFAR-100", CIFAR100), ("Tiny-ImageNet", TINY))
    for a in ALPHAS
]
TINY_LABELS = [c.label for c in CV_SETTINGS if c.label.startswith("Tiny")]
C100_LABELS = [c.label for c in CV_SETTINGS if c.label.startswith("CIFAR-100")]
NLP_SETTINGS = [
    Column("AG News α=0.1", AG_NEWS, r"AG News $\alpha=0.1$"),
    Column("SST-5 α=0.1", SST5, r"SST-5 $\alpha=0.1$"),
]
NLP_LABELS = [c.label for c in NLP_SETTINGS]


def on(labels, overrides: dict) -> dict[str, dict]:
    return {label: overrides for label in labels}


# "Parameter Setting": MOON mu 5, 5, 1, 0.1 and FedProx mu 0.01, 0.001, 0.001, 0.001 on CIFAR-10,
# CIFAR-100, Tiny-ImageNet and NLP; MOON and FedGKD+ with a 256-d projection head; FedDistill+ 0.1;
# FedGen's generator hidden size 512, 2048, 768 for ResNet-8, ResNet-50, DistilBERT (its weight
# is tuned in {0.1, 1, 10}, the choice not printed: its port's per-dataset RUNCONFIGS, 0.1 on
# CIFAR-10 and Tiny-ImageNet, 1 on CIFAR-100 and text, with the port's noise sizes 64, 2048, 768);
# FedGKD gamma 0.2 (ResNet-8, DistilBERT) and 0.1 (ResNet-50); FedGKD-VOTE's buffer 5 (CV) and 3
# (NLP). FedGKD's buffer is not stated for Table 3; its numbers match Table 7's rows M=5, 1, 5
# (CIFAR-10) and M=5, 7, 5 (CIFAR-100) at alpha = 1, 0.5, 0.1, so those are used; 5 elsewhere but
# on text, where "for NLP fine-tuning tasks, we'd suggest set M as 1" (Section 3) and Table 4's
# SST-5 number is Table 9's at M = 1.
PROJECTION = {"model": {"projection_dim": 256}}
BUFFER = {
    "CIFAR-10 α=1": 5,
    "CIFAR-10 α=0.5": 1,
    "CIFAR-10 α=0.1": 5,
    "CIFAR-100 α=1": 5,
    "CIFAR-100 α=0.5": 7,
    "CIFAR-100 α=0.1": 5,
}
METHODS = [
    Row("FedAvg", {"name": "fedavg"}),
    Row(
        "FedProx",
        {"name": "fedprox", "mu": 0.01},
        per_column={**on([*C100_LABELS, *TINY_LABELS, *NLP_LABELS], {"method": {"mu": 0.001}})},
    ),
    Row(
        "MOON",
        {"name": "moon", "mu": 5.0, "tau": 0.5},
        config=PROJECTION,
        per_column={
            **on(TINY_LABELS, {"method": {"mu": 1.0}, "model": {"name": "resnet50"}}),
            **on(NLP_LABELS, {"method": {"mu": 0.1}}),
        },
    ),
    Row("FedDistill+", {"name": "feddistill", "lam": 0.1}),
    Row(
        "FedGen",
        {"name": "fedgen", "alpha": 0.1, "hidden": 512},
        per_column={
            **on(C100_LABELS, {"method": {"alpha": 1.0}}),
            **on(TINY_LABELS, {"method": {"hidden": 2048, "noise_dim": 2048}}),
            **on(NLP_LABELS, {"method": {"alpha": 1.0, "hidden": 768, "noise_dim": 768}}),
        },
    ),
    Row(
        "FedGKD",
        {"name": "fedgkd", "gamma": 0.2, "buffer": 5},
        per_column={
            **{label: {"method": {"buffer": m}} for label, m in BUFFER.items()},
            **on(TINY_LABELS, {"method": {"gamma": 0.1}}),
            **on(NLP_LABELS, {"method": {"buffer": 1}}),
        },
    ),
    Row(
        "FedGKD-VOTE",
        # VOTE weighs its teachers by vote_lambda (0.1, "lambda is set 0.1") and reads no gamma: the
        # gamma of 0.1 on Tiny-ImageNet only mirrors FedGKD's row, and stays for the runs' ids
        {"name": "fedgkd", "gamma": 0.2, "vote": True, "buffer": 5},
        per_column={**on(TINY_LABELS, {"method": {"gamma": 0.1}}), **on(NLP_LABELS, {"method": {"buffer": 3}})},
    ),
    Row(
        "FedGKD+",
        {"name": "fedgkd", "gamma": 0.2, "buffer": 5},
        config=PROJECTION,
        per_column={
            **{label: {"method": {"buffer": m}} for label, m in BUFFER.items()},
            **on(TINY_LABELS, {"method": {"gamma": 0.1}, "model": {"name": "resnet50"}}),
            **on(NLP_LABELS, {"method": {"buffer": 1}}),
        },
    ),
]
LABELS = [r.label for r in METHODS]


def only(columns: list[Column], rows=METHODS) -> list[Row]:
    """The rows with just the per-column overrides of `columns`."""
    keep = {c.label for c in columns}
    return [replace(r, per_column={k: v for k, v in r.per_column.items() if k in keep}) for r in rows]
