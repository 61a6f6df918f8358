"""FedSSD (He et al., "Learning Critically: Selective Self Distillation in Federated Learning
on Non-IID Data"): its tables as data, with the numbers the paper reports."""
from shared.experiments import MOON_CIFAR10, Column, Reported, Row, Table
from shared.figures import Figure

R = Reported

# Section 5.1: CIFAR-10 with FedAvg-CNN, 10 clients, all participating, 100 rounds, E=10, B=64,
# SGD lr 0.01 momentum 0.9. The server holds 64 auxiliary samples per class.

# Hyperparameters the paper reports for CIFAR-10 (Section 5.1, "Baselines").
CIFAR10_METHODS = [
    Row("FedAvg", {"name": "fedavg"}),
    Row("FedProx", {"name": "fedprox", "mu": 0.01}),
    Row("FedCurv", {"name": "fedcurv", "lam": 1e-3}),
    Row("MOON", {"name": "moon", "mu": 5.0}, config={"model": {"projection_dim": 256}}),
    Row("FedNTD", {"name": "fedntd", "tau": 1.0, "beta": 1.0}),
    Row("FedCAD", {"name": "fedcad"}, config={"aux": {"per_class": 32}}),
    Row("FedSSD", {"name": "fedssd", "m_max": 0.01}, config={"aux": {"per_class": 64}}),
]

HETEROGENEITY = [
    Column("#K=2", {"partition": {"kind": "classes", "k": 2}}, r"\#K=2"),
    Column("#K=5", {"partition": {"kind": "classes", "k": 5}}, r"\#K=5"),
    Column("δ=0.1", {"partition": {"kind": "dirichlet", "beta": 0.1}}, r"$\delta=0.1$"),
    Column("δ=0.5", {"partition": {"kind": "dirichlet", "beta": 0.5}}, r"$\delta=0.5$"),
    Column("δ=10", {"partition": {"kind": "dirichlet", "beta": 10.0}}, r"$\delta=10$"),
]

TABLES = [
    Table(
        paper="fedssd",
        name="table2",
        caption="The top-1 test accuracy with different levels of data heterogeneity on CIFAR10.",
        base=MOON_CIFAR10,
        rows=CIFAR10_METHODS,
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
    ),
]

FIGURES = [
    Figure("fedssd", "fig6", "Statistical heterogeneity among clients under #K=2, #K=5 and Dir(0.1, 0.5, 10).",
           kind="partitions", table="table2"),
    # Fig. 7's CIFAR-10 panels (default setting, Dir(0.5)); CIFAR-100 and Tiny-ImageNet come with Table I.
    Figure("fedssd", "fig7", "The learning curves on CIFAR10 with default settings.",
           kind="curves", table="table2", columns=["δ=0.5"]),
]
