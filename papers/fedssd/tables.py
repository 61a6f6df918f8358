"""FedSSD (He et al., "Learning Critically: Selective Self Distillation in Federated Learning
on Non-IID Data"): its tables, figures and searches as data, with the numbers the paper reports."""

from functools import partial

from papers.fedssd.class_wise import draw_class_wise, draw_confusions
from papers.fedssd.forgetting import draw_forgetting
from shared.config.dotted import deep_merge
from shared.reporting.claims import BeatsAblations, Best, FewestRounds
from shared.targets.figure_declarations import Figure
from shared.targets.table_declarations import MOON_CIFAR10, Column, Inconsistency, Metric, Reported, Row, Search, Table

R = Reported

# Section 5.1: CIFAR-10 with FedAvg-CNN, 10 clients, all participating, 100 rounds, E=10, B=64,
# SGD lr 0.01 momentum 0.9. The server holds 64 auxiliary samples per class.

# Hyperparameters the paper reports for CIFAR-10 (Section 5.1, "Baselines"); FedNTD's, which it
# does not give, are FedNTD's own defaults (tau 1, beta 1).
CIFAR10_METHODS = [
    Row("FedAvg", {"name": "fedavg"}),
    Row("FedProx", {"name": "fedprox", "mu": 0.01}),
    Row("FedCurv", {"name": "fedcurv", "lam": 1e-3}),
    Row("MOON", {"name": "moon", "mu": 5.0}, config={"model": {"projection_dim": 256}}),
    Row("FedNTD", {"name": "fedntd", "tau": 1.0, "beta": 1.0}),
    Row("FedCAD", {"name": "fedcad"}, config={"aux": {"per_class": 32}}),
    Row("FedSSD", {"name": "fedssd", "m_max": 0.01}, config={"aux": {"per_class": 64}}),
]

# The loss as printed, ||M z_g - M z||^2 with M <= M_max = 0.01, weights the squared logit
# difference by M^2 <= 1e-4; Table III has SSD ahead of a constant MSE of weight alpha = M_max,
# which a weight of at most alpha^2 could not be. The reading that weights it by M (the size of
# Table III's constant weights) is shown beside the printed row (README: the two readings).
WEIGHT_M = "the squared logit difference weighted by M instead of the printed M^2"


def weight_m(row: Row) -> Row:
    """FedSSD's row read with weight M (method.mask_weight=m), labelled as not the paper's text."""
    return Row(
        f"{row.label} (weight M)",
        {**row.method, "mask_weight": "m"},
        row.config,
        row.per_column,
        reading_of=row.label,
        reading=WEIGHT_M,
    )


CIFAR10_METHODS_AND_READING = [*CIFAR10_METHODS, weight_m(CIFAR10_METHODS[-1])]
# The runs that decide between the readings at paper scale: FedAvg and both FedSSD rows
READINGS_FIRST = ("FedAvg", "FedSSD", "FedSSD (weight M)")

FEDCAD_AUX = (
    "FedCAD's row keeps FedCAD's own 32 auxiliary samples per class; FedSSD's server holds 64, and "
    "FedSSD does not say which FedCAD used."
)

HETEROGENEITY = [
    Column("#K=2", {"partition": {"kind": "classes", "k": 2}}, r"\#K=2"),
    Column("#K=5", {"partition": {"kind": "classes", "k": 5}}, r"\#K=5"),
    Column("δ=0.1", {"partition": {"kind": "dirichlet", "beta": 0.1}}, r"$\delta=0.1$"),
    Column("δ=0.5", {"partition": {"kind": "dirichlet", "beta": 0.5}}, r"$\delta=0.5$"),
    Column("δ=10", {"partition": {"kind": "dirichlet", "beta": 10.0}}, r"$\delta=10$"),
]

# Table I: CIFAR-100 and Tiny-ImageNet use ResNet-50 (Tiny: 30 rounds). "The best weight of proximal
# term mu in FedProx and the best upper bound M_max of FedSSD for CIFAR10, CIFAR100, TinyImageNet
# are 0.01, 0.001 and 0.001": we read the three values as applying to both.
# "We design the experiment like [9]" (MOON): CIFAR-100 augmented as MOON's code does it (a crop
# of the image padded with black, a flip, a rotation of up to 15 degrees); CIFAR-10 as NIID-Bench's
# and MOON's code (reflection padding), Tiny-ImageNet not augmented, as in MOON's code.
# ResNet-50 initialised as in MOON's code (resnetcifar.py: kaiming_normal_, fan_out)
RESNET50 = {"name": "resnet50", "init": "kaiming_fan_out"}
CIFAR100 = {"dataset": {"name": "cifar100", "augmentation": "moon_cifar100"}, "model": RESNET50}
TINY = {"dataset": {"name": "tiny_imagenet"}, "model": RESNET50, "federation": {"rounds": 30}}
PER_DATASET = {  # row -> (CIFAR-100, Tiny-ImageNet) method overrides
    "FedProx": ({"mu": 0.001}, {"mu": 0.001}),
    "FedCurv": ({"lam": 1e-4}, {"lam": 1e-5}),
    "MOON": ({"mu": 1.0}, {"mu": 1.0}),
    "FedSSD": ({"m_max": 0.001}, {"m_max": 0.001}),
}
T_VS_FEDAVG = Metric("rounds_to_row", reference="FedAvg")
DATASETS = [
    Column("CIFAR10 ACC", {}, r"CIFAR10 ACC $\uparrow$"),
    Column("CIFAR10 T", {}, r"CIFAR10 T $\downarrow$", T_VS_FEDAVG),
    Column("CIFAR100 ACC", CIFAR100, r"CIFAR100 ACC $\uparrow$"),
    Column("CIFAR100 T", CIFAR100, r"CIFAR100 T $\downarrow$", T_VS_FEDAVG),
    Column("TinyImageNet ACC", TINY, r"TinyImageNet ACC $\uparrow$"),
    Column("TinyImageNet T", TINY, r"TinyImageNet T $\downarrow$", T_VS_FEDAVG),
]


def per_dataset(row: Row, columns: list[Column]) -> Row:
    """The row with its CIFAR-100 and Tiny-ImageNet hyperparameters in those columns."""
    cifar100, tiny = PER_DATASET.get(row.reading_of or row.label, ({}, {}))
    overrides = {c.label: {"method": cifar100} for c in columns if c.label.startswith("CIFAR100")}
    overrides.update({c.label: {"method": tiny} for c in columns if c.label.startswith("TinyImageNet")})
    return Row(row.label, row.method, row.config, overrides, row.reading_of, row.reading)


# Table III: alpha is KL's and MSE's constant weight and SSD's upper bound M_max
LOSS_ROWS = [
    Row(
        loss.upper(),
        {"name": "fedssd", "loss": loss},
        per_column={f"α={a:g}": {"method": {"m_max": a}} for a in (0.01, 0.1, 0.5)},
    )
    for loss in ("kl", "mse", "ssd")
]

TABLES = [
    Table(
        paper="fedssd",
        name="table1",
        caption="The top-1 test accuracy (ACC) after training the target rounds and the number of communication "
        "rounds (T) to achieve the same accuracy as running FedAvg.",
        base=MOON_CIFAR10,
        rows=[per_dataset(r, DATASETS) for r in CIFAR10_METHODS_AND_READING],
        columns=DATASETS,
        reported={  # "_" (never reached) is None
            "FedAvg": [R(70.49, 0.23), R(100), R(65.73, 0.31), R(100), R(22.78, 0.28), R(30)],
            "FedProx": [R(72.08, 0.58), R(55), R(65.79, 0.05), R(100), R(22.29, 0.69), R(25)],
            "FedCurv": [R(70.40, 0.74), R(99), R(65.54, 0.41), None, R(22.18, 0.53), R(16)],
            "MOON": [R(71.27, 0.14), R(62), R(67.32, 0.74), R(60), R(23.89, 0.27), R(16)],
            "FedNTD": [R(70.99, 0.24), R(51), R(65.23, 0.25), None, R(27.17, 0.42), R(13)],
            "FedCAD": [R(72.23, 0.23), R(35), R(65.15, 0.21), None, R(25.24, 0.26), R(12)],
            "FedSSD": [R(73.38, 0.46), R(33), R(66.19, 0.28), R(48), R(27.44, 0.19), R(10)],
        },
        curves=True,  # Fig. 7
        notes="T: the first round whose global accuracy reaches FedAvg's final accuracy at the same seed in the "
        "same setting; - where never reached; FedAvg's own is its rounds, by definition. " + FEDCAD_AUX,
    ),
    Table(
        paper="fedssd",
        name="table2",
        caption="The top-1 test accuracy with different levels of data heterogeneity on CIFAR10.",
        base=MOON_CIFAR10,
        rows=CIFAR10_METHODS_AND_READING,
        columns=HETEROGENEITY,
        reported={
            "FedAvg": [R(49.64, 1.64), R(67.82, 0.28), R(62.18, 0.54), R(70.49, 0.23), R(73.76, 0.27)],
            "FedProx": [R(50.31, 1.34), R(67.39, 0.14), R(62.61, 0.21), R(72.08, 0.58), R(73.29, 0.48)],
            "FedCurv": [R(50.37, 1.54), R(68.15, 0.46), R(62.09, 0.52), R(70.40, 0.74), R(73.49, 0.68)],
            "MOON": [R(45.15, 0.75), R(67.41, 0.13), R(62.41, 0.26), R(71.27, 0.14), R(73.37, 0.11)],
            "FedNTD": [R(49.16, 1.92), R(68.17, 0.31), R(62.59, 0.25), R(70.99, 0.24), R(73.82, 0.22)],
            "FedCAD": [R(50.75, 1.19), R(68.86, 0.37), R(62.74, 0.31), R(72.23, 0.23), R(74.10, 0.55)],
            "FedSSD": [R(53.37, 1.52), R(69.33, 0.47), R(62.84, 0.38), R(73.38, 0.46), R(74.40, 0.15)],
        },
        notes=FEDCAD_AUX,
        train_first=READINGS_FIRST,
    ),
    Table(
        paper="fedssd",
        name="table3",
        caption="The top-1 test accuracy with different loss types on CIFAR10.",
        corner=("Loss Type",),
        base=deep_merge(MOON_CIFAR10, {"aux": {"per_class": 64}}),
        rows=[*LOSS_ROWS, weight_m(LOSS_ROWS[-1])],
        columns=[Column(f"α={a:g}", {}, rf"$\alpha={a:g}$") for a in (0.01, 0.1, 0.5)],
        reported={
            "KL": [R(71.27), R(71.30), R(70.61)],
            "MSE": [R(72.66), R(71.44), R(69.51)],
            "SSD": [R(73.47), R(71.57), R(71.38)],
        },
        inconsistencies=[
            Inconsistency(
                "SSD",
                "α=0.01",
                "Tables I and II print 73.38 ± 0.46 for this configuration (FedSSD, M_max 0.01, CIFAR-10 Dir(0.5)).",
                implied=73.38,
            )
        ],
    ),
]

# What the abstract, Section 5.4 and the conclusion claim of the tables: better accuracy than the
# state of the art, in fewer communication rounds, from the selective (credibility-weighted)
# distillation.
CLAIMS = [
    Best(
        "table2",
        "FedSSD has the best mean accuracy at every level of heterogeneity on CIFAR-10.",
        "Section 5.4: consistently outperforms other baselines across different heterogeneity levels",
        rows=("FedSSD",),
    ),
    FewestRounds(
        "table1",
        "FedSSD reaches FedAvg's final accuracy in the fewest rounds on every dataset.",
        "abstract: in fewer communication rounds",
        rows=("FedSSD",),
        columns=("CIFAR10 T", "CIFAR100 T", "TinyImageNet T"),
    ),
    Best(
        "table1",
        "FedSSD's final accuracy is above FedAvg's on every dataset.",
        "Section 5.2: FedSSD outperformed all the baseline methods (CIFAR10, TinyImageNet; CIFAR100 all but MOON)",
        rows=("FedSSD",),
        columns=("CIFAR10 ACC", "CIFAR100 ACC", "TinyImageNet ACC"),
        against=("FedAvg",),
    ),
    BeatsAblations(
        "table3",
        "The selective distillation (SSD) beats constant-weight KL and MSE at every α.",
        "conclusion: critically distills the knowledge of the global model",
        rows=("SSD",),
        against=("KL", "MSE"),
    ),
]

# Fig. 8: 100 clients, 10 or 20 sampled per round, CIFAR-10 and CIFAR-100, learning curves.
PARTICIPATION_COLUMNS = [
    Column(f"{name} (C={c:g})", deep_merge(config, {"federation": {"participation": c}}))
    for name, config in (("CIFAR10", {}), ("CIFAR100", CIFAR100))
    for c in (0.1, 0.2)
]
PARTICIPATION = Table(
    paper="fedssd",
    name="fig8_grid",
    caption="Client participation",
    base=deep_merge(MOON_CIFAR10, {"partition": {"clients": 100}}),
    rows=[per_dataset(r, PARTICIPATION_COLUMNS) for r in CIFAR10_METHODS],
    columns=PARTICIPATION_COLUMNS,
    reported={},
)

# Fig. 9: the final global accuracy against the local epochs on CIFAR-10 (the values of E are not
# printed; we take 1, 5, 10 and 20).
LOCAL_EPOCHS = Table(
    paper="fedssd",
    name="fig9_grid",
    caption="Local epochs",
    base=MOON_CIFAR10,
    rows=CIFAR10_METHODS,
    columns=[Column(f"E={e}", {"local": {"epochs": e}}) for e in (1, 5, 10, 20)],
    reported={},
)

# Figs. 3-4: FedAvg with the Table II protocol at Dir(0.5) and IID, one seed, recording each
# local model's per-class accuracy. Every row's config holds the 64 auxiliary samples per class
# that Fig. 4's FedSSD probe needs (FedAvg trains without them).
CLASS_WISE = Table(
    paper="fedssd",
    name="fig3_grid",
    caption="Class-wise accuracy of the global model and the local models",
    base=deep_merge(MOON_CIFAR10, {"eval": {"local": "per_class"}, "aux": {"per_class": 64}}),
    rows=[CIFAR10_METHODS[0]],
    columns=[Column("δ=0.5", {}), Column("IID", {"partition": {"kind": "iid"}})],
    reported={},
    seeds=(0,),
)

FIGURES = [
    Figure(
        "fedssd",
        "fig2",
        "The catastrophic forgetting issue on non-IID CIFAR10: Acc_G and Acc_L, the global test accuracy "
        "and the average local test accuracy.",
        kind="custom",
        table="table2",
        rows=["FedAvg"],
        draw_with=draw_forgetting,
        draws_part=True,  # any settings and seeds: each a group of its own
    ),
    Figure(
        "fedssd",
        "fig3",
        "The class-wise test accuracy of the global model and the local model (client 0) on CIFAR10: "
        "(a) Dir(0.5), (b) IID.",
        kind="custom",
        table=CLASS_WISE,
        draw_with=draw_class_wise,
    ),
    Figure(
        "fedssd",
        "fig4",
        "Examples of confusion matrices for training on local biased data on CIFAR10 (client 8, Dir(0.5)): "
        "the data distribution, the global model, the FedAvg and the FedSSD local model.",
        kind="custom",
        table=CLASS_WISE,
        columns=["δ=0.5"],
        draw_with=partial(
            draw_confusions, rows=[CIFAR10_METHODS[0], CIFAR10_METHODS[-1], weight_m(CIFAR10_METHODS[-1])]
        ),
    ),
    Figure(
        "fedssd",
        "fig6",
        "Visualization of statistical heterogeneity among clients (default setting, Dir(0.5)).",
        kind="partitions",
        table="table1",
        columns=["CIFAR10 ACC", "CIFAR100 ACC", "TinyImageNet ACC"],
    ),
    Figure(
        "fedssd",
        "fig7",
        "The learning curves on the benchmark datasets with default settings.",
        kind="curves",
        table="table1",
        columns=["CIFAR10 ACC", "CIFAR100 ACC", "TinyImageNet ACC"],
    ),
    Figure(
        "fedssd",
        "fig8",
        "The learning curves on CIFAR10 and CIFAR100 with different client sample ratios.",
        kind="curves",
        table=PARTICIPATION,
    ),
    Figure(
        "fedssd",
        "fig9",
        "The final global model's performance with different number of local epochs on CIFAR10.",
        kind="sweep",
        table=LOCAL_EPOCHS,
    ),
]

# "The best weight of proximal term mu in FedProx and the best upper bound M_max of FedSSD ...",
# "the best weight lambda in FedCurv", "the best weight mu of model-contrastive loss": the paper
# does not print its grids; these are decades around the chosen values.
TABLE1_ACC = ["CIFAR10 ACC", "CIFAR100 ACC", "TinyImageNet ACC"]
SEARCHES = [
    Search(
        "fedssd",
        "search_fedprox",
        "table1",
        "FedProx",
        {"method.mu": [0.0001, 0.001, 0.01, 0.1]},
        TABLE1_ACC,
        "FedProx mu",
    ),
    Search(
        "fedssd",
        "search_fedcurv",
        "table1",
        "FedCurv",
        {"method.lam": [1e-5, 1e-4, 1e-3, 1e-2]},
        TABLE1_ACC,
        "FedCurv lambda",
    ),
    Search("fedssd", "search_moon", "table1", "MOON", {"method.mu": [0.1, 1.0, 5.0, 10.0]}, TABLE1_ACC, "MOON mu"),
    # both readings of the distillation term: the paper's M^2 (unset) and M (mask_weight=m, not the paper's text)
    Search(
        "fedssd",
        "search_fedssd",
        "table1",
        "FedSSD",
        {"method.m_max": [0.0001, 0.001, 0.01, 0.1], "method.mask_weight": [None, "m"]},
        TABLE1_ACC,
        "FedSSD M_max, weighting the squared difference by M^2 (the paper's text) or M",
    ),
]
