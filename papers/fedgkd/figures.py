"""FedGKD's figures as data (`FIGURES`, which tables.py lists beside its tables): Fig. 3's
partitions (upper half) and its FedAvg against FedGKD over α and participation (lower half, on a
grid of its own), and Fig. 4's learning curves."""

from papers.fedgkd.protocol import ALPHAS, CV_SETTINGS, PROTOCOL
from shared.targets.figure_declarations import Figure
from shared.targets.table_declarations import Column, Metric, Row, Table

# Fig. 3's lower half: FedAvg and FedGKD (M=1) on CIFAR-10 at each α of its upper half and each
# participation ratio of Table 5, the best accuracy (Table 5's "Best"); the paper prints no number.
# Its runs at α = 0.5 are Table 5's, FedAvg's at C = 0.2 Table 3's, FedGKD's there Table 7's (M=1).
PARTICIPATION_GRID = Table(
    paper="fedgkd",
    name="fig3_bottom_grid",
    caption="FedAvg and FedGKD (M=1) on CIFAR-10 over α and the participation ratio",
    base=PROTOCOL,
    metric=Metric("best_acc"),  # Table 5's "Best"
    rows=[Row("FedAvg", {"name": "fedavg"}), Row("FedGKD", {"name": "fedgkd", "gamma": 0.2, "buffer": 1})],
    columns=[
        Column(f"α={alpha:g} C={c:g}", {"partition": {"beta": alpha}, "federation": {"participation": c}})
        for alpha in ALPHAS
        for c in (0.1, 0.2, 0.3, 0.4)
    ],
    reported={},
)

FIGURES = [
    Figure(
        "fedgkd",
        "fig3",
        "Visualization of the non-IID-ness on CIFAR-10 (α = 1, 0.5, 0.1; 20 clients).",
        kind="partitions",
        table="table3",
        columns=[c.label for c in CV_SETTINGS if c.label.startswith("CIFAR-10 ")],
    ),
    Figure(
        "fedgkd",
        "fig3_bottom",
        "Performance of FedAvg and FedGKD (M=1) with ResNet-8 on CIFAR-10 under different α and participation "
        "ratio setting.",
        kind="sweep",
        table=PARTICIPATION_GRID,
    ),
    Figure(
        "fedgkd",
        "fig4",
        "Test accuracy of FedAvg, FedProx and FedGKD on CV datasets over the communication rounds. "
        "From top to bottom, CIFAR-10, CIFAR-100, Tiny-ImageNet; from left to right, α from 0.1 to 1.",
        kind="curves",
        table="table3",
        rows=["FedAvg", "FedProx", "FedGKD"],
        accuracies=("global_acc",),  # the paper draws the global model's test accuracy alone
        panels=[
            [f"{data} α={alpha}" for alpha in ("0.1", "0.5", "1")]
            for data in ("CIFAR-10", "CIFAR-100", "Tiny-ImageNet")
        ],
    ),
]
