"""FedAvg against FedSSD read two ways and Table III's constant MSE, on real data: the paper's
||M z_g - M z||^2 (the squared difference weighted by M^2), `method.mask_weight=m` (weighted
by M, not the paper's text), and alpha ||z_g - z||^2 with alpha = M_max (Table III's MSE row).
Table III has SSD ahead of the constant MSE at the same alpha; under the printed reading SSD's
weight is at most alpha^2, a hundredth of the MSE's, so the arms' order tests the readings.
FedSSD Table II's Dir(0.5) protocol (FedAvg-CNN, 10 clients, all participating, NIID-Bench's
split, B=64, SGD lr 0.01 momentum 0.9, M_max 0.01, 64 auxiliary samples per class, E=10); the
rounds (Table I's T for FedSSD is 33), epochs and training subset are arguments. Prints the
global accuracy per round of each arm and writes JSON, a CSV of per-round curves and a figure.

    python -m benchmarks.fedssd_readings [PATH] [--rounds 33] [--epochs 10]
        [--train-subset N] [--seed 0] [--arms fedavg fedssd-m2 fedssd-m mse] [--threads 1]
        [--out results/benchmarks/fedssd_readings.json]

Without PATH the official CIFAR-10 (`dataset=cifar10`, downloaded into the data root); PATH may
be a copy of it as an image folder (directory or zip, `dataset=imagefolder`). Each arm is a run directory beside
--out: a command stopped part-way continues from each arm's last round when run again. Arms run
one after another; to use more cores run one process per arm with its own --arms and --out, and
join them with `--join OUT.json ...` (writes the CSV, the table and the figure of all of them).
"""

import argparse
import csv
import json
from pathlib import Path

import torch

from shared.config.dotted import flatten
from shared.targets.configs import load_config
from shared.targets.table_declarations import MOON_CIFAR10
from shared.training.trainer import run

READINGS = {  # run directory -> (label, overrides)
    "fedavg": ("FedAvg", ["method=fedavg"]),
    "fedssd-m2": ("FedSSD, M^2 (the paper's text)", ["method=fedssd", "method.m_max=0.01", "aux.per_class=64"]),
    "fedssd-m": (
        "FedSSD, M (mask_weight=m)",
        ["method=fedssd", "method.m_max=0.01", "aux.per_class=64", "method.mask_weight=m"],
    ),
    "mse": (
        "Constant MSE, alpha 0.01 (Table III's MSE row)",
        ["method=fedssd", "method.loss=mse", "method.m_max=0.01"],
    ),
}


def cifar10(path: str | None) -> list[str]:
    """The official CIFAR-10, or a copy of it as an image folder at `path`."""
    return ["dataset=imagefolder", f"dataset.path={path}"] if path else ["dataset=cifar10"]


def protocol(args) -> list[str]:
    """Table II's Dir(0.5) column at the sizes given on the command line."""
    overrides = [f"{k}={v}" for k, v in flatten(MOON_CIFAR10).items() if k != "dataset.name"]
    overrides += [
        *cifar10(args.data),
        f"federation.rounds={args.rounds}",
        f"local.epochs={args.epochs}",
        f"seed={args.seed}",
        "eval.local=false",
        "trainer.progress=false",
    ]
    return overrides + ([f"dataset.train_subset={args.train_subset}"] if args.train_subset else [])


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", help="a CIFAR-10 image folder (default: the official CIFAR-10)")
    parser.add_argument("--rounds", type=int, default=33)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--train-subset", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", nargs="+", choices=list(READINGS), default=list(READINGS))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: leave the other cores free)")
    parser.add_argument("--out", default="results/benchmarks/fedssd_readings.json")
    parser.add_argument("--join", nargs="+", metavar="JSON", help="join earlier outputs into --out instead of training")
    return parser


def main(argv=None):
    parser = argument_parser()
    args = parser.parse_args(argv)
    if args.data and args.join:
        parser.error("give the data folder or --join with earlier outputs, not both")
    out = Path(args.out)
    curves = join(args.join) if args.join else train(args, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "curves": curves}, indent=1))
    write_curves(curves, out.with_suffix(".csv"))
    print(markdown(curves))
    draw(curves, out.with_suffix(".png"))


def train(args, out: Path) -> dict:
    torch.set_num_threads(args.threads)
    curves = {}
    for name in args.arms:
        label, overrides = READINGS[name]
        cfg = load_config(None, protocol(args) + overrides)
        summary = run(cfg, out.parent / "fedssd_readings" / name)
        curves[label] = {
            "global_acc": summary["global_acc"],
            "final_acc": summary["final_acc"],
            "seconds_per_round": summary["wall_time_s"] / summary["rounds_completed"],
        }
        print(json.dumps({label: curves[label]}), flush=True)
    return curves


def join(paths: list[str]) -> dict:
    curves = {}
    for path in paths:
        curves.update(json.loads(Path(path).read_text())["curves"])
    return curves


def write_curves(curves: dict, path: Path):
    """One row per round and arm: round, arm, global test accuracy."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["round", "arm", "global_acc"])
        for label, c in curves.items():
            writer.writerows((i + 1, label, acc) for i, acc in enumerate(c["global_acc"]))


def markdown(curves: dict) -> str:
    """The summary the benchmark README takes: the last round, the mean of the last five, the mean
    difference from FedAvg after the first ten rounds, the first round at or above 65%."""
    base = curves.get(READINGS["fedavg"][0])
    lines = [
        "| arm | last round | mean of last 5 | mean difference from FedAvg, rounds 11- | first round >= 65% |",
        "|---|---|---|---|---|",
    ]
    for label, c in curves.items():
        acc = c["global_acc"]
        diff = (
            "-"
            if base is None or c is base
            else f"{sum(a - b for a, b in zip(acc[10:], base['global_acc'][10:])) / max(len(acc) - 10, 1):+.2f}"
        )
        first = next((i + 1 for i, a in enumerate(acc) if a >= 65), "-")
        lines.append(f"| {label} | {acc[-1]:.2f} | {sum(acc[-5:]) / len(acc[-5:]):.2f} | {diff} | {first} |")
    return "\n".join(lines)


def draw(curves: dict, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, c in curves.items():
        ax.plot(range(1, len(c["global_acc"]) + 1), c["global_acc"], label=label)
    ax.set(xlabel="round", ylabel="global test accuracy (%)", title="FedSSD's readings, CIFAR-10 Dir(0.5)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
