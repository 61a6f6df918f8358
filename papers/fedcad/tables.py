"""FedCAD (He et al., "Class-Wise Adaptive Self Distillation for Heterogeneous Federated
Learning", FL-AAAI-22): its tables as data, with the numbers the paper reports."""
from shared.experiments import MOON_CIFAR10, Column, Reported, Row, Table
from shared.figures import Figure

R = Reported

# "Hyper-parameters": SGD lr 0.01, momentum 0.9, E=10, B=64, 100 rounds on CIFAR-10, C=1,
# 10 clients, Dir(0.5); FedAvg-CNN on CIFAR-10. The server holds 32 auxiliary samples per class.

# The paper tunes FedProx's mu in {0.001, 0.01, 0.1}, FedLSD's weight in {0.1, 0.3, 0.5} (T=2)
# and FedCAD's beta, gamma in {0, 0.3, 0.5, 0.7}, but does not report the chosen values; these
# are the defaults until the search targets pick them.
METHODS = [
    Row("FedAvg", {"name": "fedavg"}),
    Row("FedProx", {"name": "fedprox", "mu": 0.01}),
    Row("FedLSD", {"name": "fedlsd", "alpha": 0.3, "temperature": 2.0}),
    Row("FedCAD", {"name": "fedcad"}, config={"aux": {"per_class": 32}}),
]

TABLES = [
    Table(
        paper="fedcad",
        name="table2",
        caption="The top-1 test accuracy with different levels of data heterogeneity on CIFAR10.",
        base=MOON_CIFAR10,
        rows=METHODS,
        columns=[
            Column(f"δ={d:g}", {"partition": {"kind": "dirichlet", "beta": d}}, rf"$\delta={d:g}$")
            for d in (0.1, 0.5, 5.0, 10.0)
        ],
        reported={  # the paper prints single numbers, no spread
            "FedAvg": [R(61.73), R(71.29), R(71.56), R(72.98)],
            "FedProx": [R(62.85), R(71.52), R(71.82), R(72.26)],
            "FedLSD": [R(61.54), R(72.56), R(73.43), R(73.34)],
            "FedCAD": [R(63.80), R(73.14), R(74.00), R(73.47)],
        },
        curves=True,  # Fig. 4 shows the learning curves on CIFAR-10
    ),
]

FIGURES = [
    Figure("fedcad", "fig4", "The learning curves on CIFAR-10 (Dir(0.5)): global accuracy and local average accuracy.",
           kind="curves", table="table2", columns=["δ=0.5"]),
]
