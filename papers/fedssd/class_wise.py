"""FedSSD Figs. 3-4 (Section 3.2, "Global Model Mis-Prediction"): the global model is not
equally reliable on every class, and on a client's majority classes its local model beats it.

Fig. 3: "the class-wise test accuracy of the global model Acc_G^t and the local model of client 0
Acc_0^t in each round", on Dir(0.5) and IID CIFAR-10. The runs record each local model's
per-class accuracy (eval.local=per_class); as in Fig. 2, Acc_G^t is the model the round's clients
start from, the record before's `per_class_acc`.

Fig. 4: "a randomly selected client's (client ID=8) confusion matrix on non-IID Dir(0.5)
CIFAR10": (a) its data, (b) the global model, (c) FedAvg's and (d) FedSSD's local model after
local training. The paper does not say from which round; we train client 8 for the protocol's
local epochs from the FedAvg run's final global model, once with each method, so that the
local objective is the only difference (FedSSD as printed, and its weight-M reading beside it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from papers.fedssd.fedssd import confusion_counts
from shared.config.dotted import deep_merge
from shared.config.schema import to_dict
from shared.methods.fedavg import predict
from shared.runs.files import read_history, read_summary
from shared.runs.partition_files import PARTITION_FILE, read_partition
from shared.targets.configs import load_config
from shared.targets.table_declarations import Cell, Row
from shared.training.evaluation import autocast
from shared.training.probe import final_model, trained_from

FIG3_CLIENT, FIG4_CLIENT = 0, 8  # the paper's clients


def class_wise_points(history: list[dict], client: int) -> list[tuple[int, int, float, float]]:
    """(round t, class k, Acc_G^t(k), Acc_client^t(k)) for each round in which `client`'s local
    model and the model it started from were tested per class."""
    return [
        (record["round"], k, global_acc, local_acc)
        for before, record in zip(history, history[1:])
        if "per_class_acc" in before and client in record.get("clients", []) and "local_per_class_acc" in record
        for k, (global_acc, local_acc) in enumerate(
            zip(before["per_class_acc"], record["local_per_class_acc"][record["clients"].index(client)])
        )
    ]


def class_wise_frame(cell: Cell, runs_dir: Path) -> pd.DataFrame:
    """setting, round, class, acc_global, acc_local of a completed run (else no rows)."""
    completed = read_summary(runs_dir / cell.run_id)["status"] == "completed"
    points = class_wise_points(read_history(runs_dir / cell.run_id) or [], FIG3_CLIENT) if completed else []
    frame = pd.DataFrame(points, columns=["round", "class", "acc_global", "acc_local"])
    return frame.assign(setting=cell.column.label)[["setting", "round", "class", "acc_global", "acc_local"]]


def draw_class_wise(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, **_) -> None:
    """Per setting, heatmaps of class x round: the global model, client 0's local model, and
    their difference; `figure.csv` holds every point."""
    import seaborn as sns

    from shared.reporting.figure_style import finish, pyplot

    plt = pyplot()
    runs_dir = Path(runs_dir)
    cells = [c for c in cells if c.seed == cells[0].seed]  # one run a setting, as the paper draws it
    frames = [class_wise_frame(cell, runs_dir) for cell in cells]
    pd.concat(frames).to_csv(f"{out_stem}.csv", index=False)
    fig, axes = plt.subplots(len(frames), 3, figsize=(15, 3.6 * len(frames)), squeeze=False)
    panels = (
        ("acc_global", "Acc_G(k): global model", "Blues", (0, 100)),
        ("acc_local", f"Acc_{FIG3_CLIENT}(k): client {FIG3_CLIENT}'s local model", "Blues", (0, 100)),
        ("difference", f"Acc_{FIG3_CLIENT}(k) - Acc_G(k)", "RdBu", (-100, 100)),
    )
    for row, cell, frame in zip(axes, cells, frames):
        counts = np.array(read_partition(runs_dir / cell.run_id / PARTITION_FILE)[FIG3_CLIENT])
        labels = [f"{k} ({share:.0%})" for k, share in enumerate(counts / max(counts.sum(), 1))]
        frame = frame.assign(difference=frame.acc_local - frame.acc_global)
        for ax, (value, name, colours, (low, high)) in zip(row, panels):
            ax.set(title=f"{cell.column.label}: {name}", xlabel="round t", ylabel="class (client's share of its data)")
            if frame.empty:  # a run that did not complete: its rounds are not the figure's
                ax.text(0.5, 0.5, "no completed run", ha="center", va="center", transform=ax.transAxes)
                continue
            grid = frame.pivot(index="class", columns="round", values=value)
            sns.heatmap(grid, ax=ax, cmap=colours, vmin=low, vmax=high, yticklabels=labels, cbar_kws={"label": "%"})
    finish(fig, out_stem, title)
    plt.close(fig)


def confusion(model, federation, cfg) -> np.ndarray:
    """Counts of (true class, predicted class) of `model` on the test split."""
    model.eval()
    with autocast(cfg, federation.device):  # as the run's own evaluation
        predicted = predict(model, federation.test.x, federation.augmenter, cfg.eval.batch_size).argmax(1)
    return confusion_counts(predicted, federation.test.y, federation.num_classes).long().cpu().numpy()


def probe_confusions(fedavg: Cell, rows: list[Row], runs_dir: Path, client: int = FIG4_CLIENT) -> dict:
    """Panel -> matrix: the client's samples per class ("data", one row), the FedAvg run's final
    global model's confusion counts, and those of the local model each of `rows` trains on the
    client from it (`local.epochs` epochs)."""
    cfg = fedavg.config
    federation, global_model = final_model(cfg, runs_dir / fedavg.run_id)
    panels = {"data": federation.counts[client][None, :], "global model": confusion(global_model, federation, cfg)}
    for row in rows:
        local_cfg = load_config(None, deep_merge(to_dict(cfg), deep_merge(row.config, {"method": row.method})))
        torch.manual_seed(cfg.seed)
        model = trained_from(global_model, federation, local_cfg, client, cfg.federation.rounds)
        panels[f"{row.label} local model"] = confusion(model, federation, local_cfg)
    return panels


def draw_confusions(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, rows: list[Row], **_) -> None:
    """The client's data, then each confusion matrix normalised by its true class;
    `figure.csv` holds the counts (the data's: samples per class, with no predicted class)."""
    import seaborn as sns

    from shared.reporting.figure_style import finish, pyplot

    plt = pyplot()
    panels = probe_confusions(cells[0], rows, Path(runs_dir))
    data = panels["data"][0]
    pd.concat(
        [
            pd.DataFrame({"panel": "data", "true": range(len(data)), "predicted": pd.NA, "count": data}),
            *(
                pd.DataFrame(matrix)
                .rename_axis(index="true", columns="predicted")
                .stack()
                .rename("count")
                .reset_index()
                .assign(panel=name)
                for name, matrix in panels.items()
                if name != "data"
            ),
        ]
    )[["panel", "true", "predicted", "count"]].to_csv(f"{out_stem}.csv", index=False)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.4))
    for ax, (letter, (name, matrix)) in zip(axes, zip("abcdefgh", panels.items())):
        if name == "data":
            ax.bar(range(matrix.shape[1]), matrix[0], color="grey")
            ax.set(xlabel="class", ylabel="samples", xticks=range(matrix.shape[1]))
        else:
            shares = matrix / matrix.sum(1, keepdims=True).clip(min=1)
            sns.heatmap(
                shares, ax=ax, cmap="Blues", vmin=0, vmax=1, annot=True, fmt=".2f", cbar=False, annot_kws={"size": 6}
            )
            ax.set(xlabel="predicted class", ylabel="true class")
        ax.set_title(f"({letter}) " + (f"client {FIG4_CLIENT}'s data" if name == "data" else name))
    finish(fig, out_stem, title)
    plt.close(fig)
