"""FedAvg against FedSSD read two ways, on real data for a given number of rounds: the paper's
||M z_g - M z||^2 (the squared difference weighted by M^2) and `method.mask_weight=m` (weighted
by M, not the paper's text). FedSSD Table II's Dir(0.5) protocol (FedAvg-CNN, 10 clients, all
participating, NIID-Bench's split, B=64, SGD lr 0.01 momentum 0.9, M_max 0.01, 64 auxiliary
samples per class); the rounds, local epochs and training subset are arguments so that it fits
a CPU. Prints the global accuracy per round of each and writes JSON.

    python -m benchmarks.fedssd_readings PATH/TO/cifar10-jpeg.zip [--rounds 10] [--epochs 10]
        [--train-subset N] [--seed 0] [--threads 1] [--out results/benchmarks/fedssd_readings.json]

PATH may be any CIFAR-10 image folder (directory or zip).
"""
import argparse
import json
from pathlib import Path

import torch

from shared.config_loading import load_config
from shared.dotted import flatten
from shared.experiments import MOON_CIFAR10
from shared.trainer import run

READINGS = {  # run directory -> (label, overrides)
    "fedavg": ("FedAvg", ["method=fedavg"]),
    "fedssd-m2": ("FedSSD, M^2 (the paper's text)", ["method=fedssd", "method.m_max=0.01", "aux.per_class=64"]),
    "fedssd-m": ("FedSSD, M (mask_weight=m)",
                 ["method=fedssd", "method.m_max=0.01", "aux.per_class=64", "method.mask_weight=m"]),
}


def protocol(args) -> list[str]:
    """Table II's Dir(0.5) column at the sizes given on the command line."""
    overrides = [f"{k}={v}" for k, v in flatten(MOON_CIFAR10).items() if k != "dataset.name"]
    overrides += ["dataset=imagefolder", f"dataset.path={args.data}", f"federation.rounds={args.rounds}",
                  f"local.epochs={args.epochs}", f"seed={args.seed}", "eval.local=false", "trainer.progress=false"]
    return overrides + ([f"dataset.train_subset={args.train_subset}"] if args.train_subset else [])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--train-subset", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: leave the other cores free)")
    parser.add_argument("--out", default="results/benchmarks/fedssd_readings.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    curves = {}
    for name, (label, overrides) in READINGS.items():
        cfg = load_config(None, protocol(args) + overrides)
        summary = run(cfg, out.parent / "fedssd_readings" / name)
        curves[label] = {"global_acc": summary["global_acc"], "final_acc": summary["final_acc"],
                         "seconds_per_round": summary["wall_time_s"] / summary["rounds_completed"]}
        print(json.dumps({label: curves[label]}), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "curves": curves}, indent=1))
    labels = list(curves)
    print("\n| round | " + " | ".join(labels) + " |\n|---|" + "---|" * len(labels))
    for i in range(args.rounds):
        print(f"| {i + 1} | " + " | ".join(f"{curves[k]['global_acc'][i]:.2f}" for k in labels) + " |")
    print("| s / round | " + " | ".join(f"{curves[k]['seconds_per_round']:.1f}" for k in labels) + " |")


if __name__ == "__main__":
    main()
