"""FedCAD Fig. 1 (student abstract Fig. 2): what one client's local training keeps of the
global model, class by class.

Protocol (both texts): train a global model for 10 rounds with FedAvg, send it to one client,
train 10 local epochs there with FedAvg, FedLSD and FedCAD, and test each local model per
class. The paper's "certain client" holds classes 6-9 mostly; we take the client whose label
distribution has the lowest entropy (the most skewed one), or `client` if given.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from shared.config.dotted import deep_merge
from shared.config.schema import to_dict
from shared.targets.configs import load_config
from shared.targets.table_declarations import Cell, Table
from shared.training.evaluation import evaluate
from shared.training.probe import final_model, trained_from

# Student abstract, Fig. 2: per-class share of the client's data and per-class accuracy.
REPORTED = pd.DataFrame(
    [
        [0.0, 0.0, 0.02, 0.03, 0.04, 0.08, 0.18, 0.22, 0.22, 0.22],
        [0.58, 0.8, 0.62, 0.78, 0.67, 0.72, 0.3, 0.03, 0.18, 0.07],
        [0.0, 0.1, 0.39, 0.42, 0.21, 0.24, 0.65, 0.81, 0.86, 0.83],
        [0.56, 0.79, 0.62, 0.78, 0.69, 0.61, 0.47, 0.05, 0.25, 0.12],
        [0.48, 0.68, 0.54, 0.71, 0.59, 0.51, 0.66, 0.38, 0.72, 0.65],
    ],
    index=["Data", "Global", "FedAvg", "FedLSD", "FedCAD"],
    columns=range(10),
)

LOCAL_EPOCHS = 10


def most_skewed_client(counts: np.ndarray) -> int:
    share = counts / counts.sum(1, keepdims=True).clip(min=1)
    entropy = -(share * np.log(share.clip(min=1e-12))).sum(1)
    return int(entropy.argmin())


def probe(table: Table, fedavg: Cell, runs_dir: Path, client: int | None = None) -> pd.DataFrame:
    """Rows Data / Global / one per method of `table`, columns the classes; fractions in [0, 1].

    `fedavg` is the run of 10 FedAvg rounds whose model.pt is the starting point; each of the
    table's rows then trains the chosen client for 10 epochs from it."""
    cfg = fedavg.config
    federation, global_model = final_model(cfg, runs_dir / fedavg.run_id)
    cid = most_skewed_client(federation.counts) if client is None else client
    counts = federation.counts[cid]
    rows = {
        "Data": counts / counts.sum(),
        "Global": np.array(evaluate(global_model, federation.test, federation, cfg)["per_class_acc"]) / 100,
    }
    for row in table.rows:
        local_cfg = load_config(
            None,
            deep_merge(to_dict(cfg), deep_merge(row.config, {"method": row.method, "local": {"epochs": LOCAL_EPOCHS}})),
        )
        model = trained_from(global_model, federation, local_cfg, cid, cfg.federation.rounds)
        rows[row.label] = np.array(evaluate(model, federation.test, federation, local_cfg)["per_class_acc"]) / 100
    return pd.DataFrame(rows, index=federation.dataset.classes).T.rename_axis(f"client {cid}")


def draw_per_class(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, table: Table, **_) -> None:
    """Ours above, the paper's numbers below, as the student abstract prints them."""
    import seaborn as sns

    from shared.reporting.figure_style import finish, pyplot

    plt = pyplot()

    ours = probe(table, cells[0], Path(runs_dir))
    ours.to_csv(f"{out_stem}.csv")
    fig, axes = plt.subplots(2, 1, figsize=(7, 6.5))
    for ax, frame, name in ((axes[0], ours, "ours"), (axes[1], REPORTED, "paper (student abstract, Fig. 2)")):
        sns.heatmap(
            frame, ax=ax, annot=True, fmt=".2f", cmap="Blues", vmin=0, vmax=1, cbar=False, annot_kws={"size": 8}
        )
        ax.set_title(name)
        ax.set_xlabel("class")
    finish(fig, out_stem, title)  # the title wrapped to the heatmaps' width: they fill the canvas
    plt.close(fig)
