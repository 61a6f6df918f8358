"""Learning curves of one or more runs, finished or still going, as a PNG:

    python -m shared.curves RUN_DIR... [-o FILE.png]
    python -m shared.curves --partition RUN_DIR... [-o FILE.png]   # each run's partition instead

Four panels against the communication round: the global model's test accuracy, the local
models' average test accuracy, the global model's test loss and the clients' average training
loss. Each run is read from its metrics.jsonl, which the trainer rewrites after every round (so a
running job can be watched), or from metrics.json's curves where there is no metrics.jsonl; its
line is labelled by method and seed from the run's config.yaml. With --partition, each run's
partition.csv (training samples per client and class) is drawn as the tables' partition figures
draw it, a panel per run. The files are read through
shared/runs/files.py, as every other reader of a run's files reads them. Nothing here imports
torch or the trainer: it draws on a login node while the runs train elsewhere."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from shared.reporting.palette import style
from shared.runs.files import RunFilesError, printable, read_history, read_run_config, read_summary
from shared.runs.partition_files import PARTITION_FILE, read_partition

# (key in a metrics.jsonl record, panel title, y-axis label)
PANELS = (
    ("global_acc", "global model", "test accuracy (%)"),
    ("local_acc", "local models (average)", "test accuracy (%)"),
    ("global_loss", "global model", "test loss"),
    ("train_loss", "local models (average)", "training loss"),
)
# metrics.json's curves, for runs whose metrics.jsonl is gone: key in metrics.json -> panel key
SUMMARY_CURVES = {"global_acc": "global_acc", "local_acc": "local_acc", "global_loss": "global_loss"}


@dataclass
class RunCurves:
    """One run's per-round numbers, by panel key: (rounds, values), None values left out."""

    path: Path
    label: str
    status: str
    series: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return max((r[-1] for r, _ in self.series.values() if r), default=0)


def run_label(run_dir: Path, config: dict) -> str:
    """ "FedSSD, seed 1" from config.yaml; the directory's name where there is none."""
    method = config.get("method", {})
    name = method.get("name") if isinstance(method, dict) else method
    if not name:
        return run_dir.name
    seed = config.get("seed")
    return f"{name}, seed {seed}" if seed is not None else str(name)


def series_from_records(records: list[dict]) -> dict[str, tuple[list[int], list[float]]]:
    series = {}
    for key, _, _ in PANELS:
        points = [(r["round"], r[key]) for r in records if r.get(key) is not None and "round" in r]
        if points:
            series[key] = ([p[0] for p in points], [float(p[1]) for p in points])
    return series


def series_from_summary(metrics: dict) -> dict[str, tuple[list[int], list[float]]]:
    rounds = metrics.get("eval_rounds") or []
    series = {}
    for source, key in SUMMARY_CURVES.items():
        points = [(r, v) for r, v in zip(rounds, metrics.get(source) or []) if v is not None]
        if points:
            series[key] = ([p[0] for p in points], [float(p[1]) for p in points])
    return series


def load_run(run_dir: str | Path) -> RunCurves:
    """A run directory's curves: metrics.jsonl (per round, also while training), else the
    curves in metrics.json. Raises FileNotFoundError where there is neither."""
    run_dir = Path(run_dir)
    config = read_run_config(run_dir)
    try:
        metrics = read_summary(run_dir)
    except FileNotFoundError:
        metrics = None
    records = read_history(run_dir)
    if records is not None:
        series = series_from_records(records)
    elif metrics is not None:
        series = series_from_summary(metrics)
    else:
        raise FileNotFoundError(
            f"{run_dir}: neither metrics.jsonl nor metrics.json (not started, or not a run directory)"
        )
    status = metrics.get("status", "finished") if metrics is not None else "running"
    return RunCurves(run_dir, run_label(run_dir, config), status, series)


def distinct_labels(runs: list[RunCurves]) -> None:
    """Two runs with one label (same method and seed, different settings) get their directory
    names added, so that every line in the legend names one run."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.label] = counts.get(run.label, 0) + 1
    for run in runs:
        if counts[run.label] > 1:
            run.label = f"{run.label} ({run.path.name})"


def plot(runs: list[RunCurves], out: str | Path) -> Path:
    """The four panels for `runs`, one line each, written to `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    distinct_labels(runs)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), squeeze=False)
    for i, run in enumerate(runs):
        look = style(i)  # one style per run
        suffix = "" if run.status == "completed" else f" [{run.status.split(':')[0]}]"
        for ax, (key, _, _) in zip(axes.flat, PANELS):
            if key in run.series:
                rounds, values = run.series[key]
                ax.plot(
                    rounds,
                    values,
                    label=run.label + suffix,
                    markevery=max(1, len(rounds) // 10),
                    markersize=4,
                    linewidth=1.3,
                    **look,
                )
    for ax, (_key, title, ylabel) in zip(axes.flat, PANELS):
        ax.set_title(f"{title}: {ylabel.removesuffix(' (%)')}")
        ax.set_xlabel("communication round")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if not ax.lines:
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes, color="0.5")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in axes.flat[1:]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    fig.legend(handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))), frameon=False)
    rows = -(-len(labels) // 4)
    fig.tight_layout(rect=(0, 0.04 * rows, 1, 1))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def plot_partitions(run_dirs: list[Path], out: str | Path) -> Path:
    """Each run's partition, a panel per run titled by its directory, written to `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from shared.reporting.figures import partition_heatmap

    fig, axes = plt.subplots(1, len(run_dirs), figsize=(3.9 * len(run_dirs), 3.6), squeeze=False)
    for ax, run_dir in zip(axes[0], run_dirs):
        partition_heatmap(ax, np.array(read_partition(run_dir / PARTITION_FILE)))
        ax.set_title(run_dir.name, fontsize=9)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def main_partitions(run_dirs: list[str], out: str) -> int:
    found = [Path(d) for d in run_dirs if (Path(d) / "partition.csv").is_file()]
    for missing in sorted(set(run_dirs) - {str(d) for d in found}):
        print(f"skipped: {printable(missing)} holds no partition.csv", file=sys.stderr)
    if not found:
        print("error: none of the given directories holds a run's partition.csv", file=sys.stderr)
        return 1
    try:
        print(f"wrote {plot_partitions(found, out)}")
    except (RunFilesError, ValueError) as exc:  # ValueError: rows of other lengths
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 1
    return 0


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m shared.curves", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (results/runs/<run id>)")
    parser.add_argument("-o", "--out", help="the PNG to write (default: curves.png, or partition.png with --partition)")
    parser.add_argument("--partition", action="store_true", help="draw each run's partition instead of its curves")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    if args.partition:
        return main_partitions(args.runs, args.out or "partition.png")
    runs = []
    for run_dir in args.runs:
        try:
            runs.append(load_run(run_dir))
        except (FileNotFoundError, RunFilesError) as exc:
            print(f"skipped: {printable(exc)}", file=sys.stderr)
        except (ValueError, TypeError, KeyError) as exc:  # a record's field of another type
            print(f"skipped: {printable(run_dir)}: holds what a run does not write ({printable(exc)})", file=sys.stderr)
    if not runs:
        print("error: none of the given directories holds a run's metrics", file=sys.stderr)
        return 1
    out = plot(runs, args.out or "curves.png")
    for run in runs:
        print(f"{run.label}: {run.rounds} rounds ({run.status})")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
