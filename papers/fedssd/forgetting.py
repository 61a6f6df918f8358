"""FedSSD Fig. 2: local training forgets the global model's knowledge (Section 3.1), drawn from
Table II's FedAvg runs, one setting per level of heterogeneity.

"In each round t, we record the performance of the global model on the uniform test dataset
Acc_G^t and the average test accuracy of the updated local models Acc_L^t": Acc_G^t is the
accuracy of w^t, the model the round's clients start from, and Acc_L^t that of the local models
they train from it. A run's round record holds the accuracy of the model the round ends with
(after aggregation) beside its local models, so Acc_G^t is the record before's `global_acc`;
the first round, whose starting model is untested, has no point.

(a) Acc_L^t against Acc_G^t, a dot per round, under the diagonal where the local models forgot;
(b) Acc_G^t - Acc_L^t, averaged over the rounds of each run, then over its seeds.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from shared.runs.files import read_history, read_summary
from shared.targets.table_declarations import Cell


def forgetting_points(history: list[dict]) -> list[tuple[int, float, float]]:
    """(round t, Acc_G^t, Acc_L^t) for each round whose starting model and local models were tested."""
    return [
        (record["round"], before["global_acc"], record["local_acc"])
        for before, record in zip(history, history[1:])
        if "global_acc" in before and "local_acc" in record
    ]


def forgetting_frame(cells: list[Cell], runs_dir: Path) -> pd.DataFrame:
    """setting, seed, round, acc_g, acc_l of every completed run's rounds."""
    rows = [
        dict(setting=cell.column.label, seed=cell.seed, round=t, acc_g=acc_g, acc_l=acc_l)
        for cell in cells
        if read_summary(runs_dir / cell.run_id)["status"] == "completed"
        for t, acc_g, acc_l in forgetting_points(read_history(runs_dir / cell.run_id) or [])
    ]
    return pd.DataFrame(rows, columns=["setting", "seed", "round", "acc_g", "acc_l"])


def draw_forgetting(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, **_) -> None:
    """The scatter (a) and the gaps (b) of FedAvg's runs, and `figure.csv` with every point."""
    from shared.reporting.figure_style import finish, legend_of, pyplot, series_styles

    plt = pyplot()
    frame = forgetting_frame(cells, Path(runs_dir))
    frame.to_csv(f"{out_stem}.csv", index=False)
    settings = list(dict.fromkeys(c.column.label for c in cells))
    looks = series_styles(settings)
    fig, (scatter, gaps) = plt.subplots(1, 2, figsize=(9, 3.8))
    for setting in settings:
        part = frame[frame.setting == setting]
        look = looks[setting]
        scatter.scatter(part.acc_g, part.acc_l, s=8, color=look["color"], marker=look["marker"], label=setting)
    low, high = min(scatter.get_xlim()[0], scatter.get_ylim()[0]), max(scatter.get_xlim()[1], scatter.get_ylim()[1])
    scatter.plot([low, high], [low, high], color="grey", linewidth=0.8, linestyle="--")
    scatter.set(xlabel="Acc_G: global model (%)", ylabel="Acc_L: local models' mean (%)", title="(a) a dot per round")
    per_run = frame.assign(gap=frame.acc_g - frame.acc_l).groupby(["setting", "seed"]).gap.mean()
    means = per_run.groupby("setting").mean().reindex(settings)
    spreads = per_run.groupby("setting").std(ddof=0).reindex(settings)
    spreads[per_run.groupby("setting").size().reindex(settings) < 2] = float("nan")  # one seed: no spread to show
    gaps.bar(range(len(settings)), means, yerr=spreads, color=[looks[s]["color"] for s in settings], capsize=3)
    gaps.set_xticks(range(len(settings)), settings)
    gaps.set(ylabel="Acc_G - Acc_L (%), mean over rounds", title="(b) forgetting per setting (std over seeds)")
    finish(fig, out_stem, title, None, legend_of([scatter]))
    plt.close(fig)
