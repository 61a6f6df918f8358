"""FedCSD's Fig. 1 drawn from its probe's frame (papers/fedcsd/exploratory.py): a module of its
own, so that a change to the drawing leaves the probe's code (shared/targets/probes.py), and so
its GPU hours, as they are."""

from __future__ import annotations

from pathlib import Path

from shared.targets.table_declarations import Cell


def draw_exploratory(cells: list[Cell], runs_dir: Path, out_stem: Path, title: str, probed: list, **_) -> None:
    """(a)-(c) each measure per local epoch, a colour a variant, solid the global model (the
    local models' average) and dashed the local models' mean; (d) FedAvg's accuracy on the test
    set and the local training data. `figure.csv` holds the probe's points."""
    import seaborn as sns

    from shared.reporting.figure_style import finish, integer_ticks, pyplot

    plt = pyplot()
    frame = probed[0]
    frame.to_csv(f"{out_stem}.csv", index=False)
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    panels = (
        ("logit_distance", "(a) logit distance: KL(start || model)"),
        ("feature_distance", "(b) feature distance: l2 to the start"),
        ("test_acc", "(c) test accuracy (%)"),
    )
    lines = {"style": "model", "style_order": ["global", "local"]}
    for ax, (value, _) in zip(axes, panels):
        sns.lineplot(frame, x="epoch", y=value, hue="variant", legend=ax is axes[0], ax=ax, **lines)
    accuracy = frame[frame.variant == "FedAvg"].melt(
        id_vars=["model", "epoch"], value_vars=["test_acc", "train_acc"], var_name="data", value_name="acc"
    )
    accuracy["data"] = accuracy["data"].map({"test_acc": "test set", "train_acc": "local training data"})
    sns.lineplot(accuracy, x="epoch", y="acc", hue="data", palette=["black", "grey"], ax=axes[3], **lines)
    for ax, name in zip(axes, [name for _, name in panels] + ["(d) FedAvg: accuracy (%)"]):
        ax.set(title=name, xlabel="local epoch", ylabel=None)
        integer_ticks(ax.xaxis)
    finish(fig, out_stem, title)
    plt.close(fig)
