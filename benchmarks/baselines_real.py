"""Every baseline beside FedAvg on real CIFAR-10 for a few rounds: final accuracy and seconds
per round. A CPU-sized check that each method trains; not a table of the papers.

    python -m benchmarks.baselines_real [PATH] [--rounds 5] [--epochs 2]

Without PATH the official CIFAR-10 (`dataset=cifar10`, downloaded into the data root); PATH may
be a copy of it as an image folder (directory or zip). Results go to results/benchmarks/.
"""

import argparse
import json
from pathlib import Path

from benchmarks.fedssd_readings import cifar10
from shared.targets.configs import load_config
from shared.training.trainer import run

METHODS = {
    "fedavg": [],
    "fedprox": ["method.mu=0.01"],
    "fedcurv": ["method.lam=0.001"],
    "moon": ["method.mu=5", "model.projection_dim=256"],
    "fedntd": [],
    "fedlsd": ["method.alpha=0.3"],
    "fednova": [],
    "fedavgm": [],
    "fedproto": [],
    "feddistill": [],
    "fedgen": [],
    "scaffold": [],
}


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("data", nargs="?", help="a CIFAR-10 image folder (default: the official CIFAR-10)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--methods", nargs="*", default=list(METHODS))
    return parser


def main():
    parser = argument_parser()
    args = parser.parse_args()
    out = Path("results/benchmarks/baselines_real")
    rows = []
    for name in args.methods:
        cfg = load_config(
            None,
            [
                *cifar10(args.data),
                f"method={name}",
                f"federation.rounds={args.rounds}",
                f"local.epochs={args.epochs}",
                "trainer.progress=false",
                *METHODS[name],
            ],
        )
        summary = run(cfg, out / name)
        rows.append(
            {
                "method": name,
                "final_acc": summary["final_acc"],
                "global_acc": summary["global_acc"],
                "local_acc": summary["local_acc"][-1],
                "seconds_per_round": summary["wall_time_s"] / summary["rounds_completed"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    (out / "summary.json").write_text(json.dumps(rows, indent=1))
    print("\n| method | final acc (%) | local avg acc (%) | s / round |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['final_acc']:.2f} | {r['local_acc']:.2f} | {r['seconds_per_round']:.1f} |")


if __name__ == "__main__":
    main()
