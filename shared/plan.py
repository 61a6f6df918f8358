"""What regenerating a table costs before anything runs: its runs, the training samples they
process, and an estimate of GPU-hours.

    python -m shared.plan fedssd table2 [--scale paper]
    python -m shared.plan fedssd            # every table, figure and search of the paper

The estimate is samples processed / throughput, with THROUGHPUT the local-training speed of
one GPU for each model (a forward pass for testing counts a third of a training sample). These
speeds are assumptions for a plain fp32 loop on a current data-centre GPU, not measurements:
replace them with `benchmarks/` numbers for your hardware.
"""
from __future__ import annotations

import argparse
import math

from shared.config import RunConfig
from shared.config import ConfigError
from shared.experiments import Cell, expand, paper_searches, paper_tables

TRAIN_SIZE = {"cifar10": 50_000, "cifar100": 50_000, "tiny_imagenet": 100_000, "femnist": 805_263,
              "femnist_digits": 382_705, "office_caltech10": 2_025, "ag_news": 120_000, "sst5": 8_544}
TEST_SIZE = {"cifar10": 10_000, "cifar100": 10_000, "tiny_imagenet": 10_000, "femnist": 80_000,
             "femnist_digits": 40_000, "office_caltech10": 508, "ag_news": 7_600, "sst5": 2_210}
THROUGHPUT = {"fedavg_cnn": 20_000, "resnet8": 12_000, "resnet50": 1_500, "resnet50_gn": 1_200,
              "alexnet_bn": 3_000, "distilbert": 400}  # training samples per second (assumed)


def samples(cfg: RunConfig) -> tuple[float, float]:
    """(training samples, test forward passes) of one run at paper scale."""
    name = cfg.dataset.name
    train = TRAIN_SIZE.get(name, 50_000)
    if cfg.dataset.train_subset:
        train = min(train, cfg.dataset.train_subset)
    train *= 1 - cfg.dataset.val_fraction
    share = math.ceil(cfg.federation.participation * cfg.partition.clients - 1e-9) / cfg.partition.clients
    trained = cfg.federation.rounds * share * train * cfg.local.epochs
    evaluations = math.ceil(cfg.federation.rounds / cfg.eval.every)
    models_tested = 1 + (share * cfg.partition.clients if cfg.eval.local else 0)
    return trained, evaluations * models_tested * TEST_SIZE.get(name, 10_000)


def gpu_hours(cfg: RunConfig) -> float:
    trained, tested = samples(cfg)
    return (trained + tested / 3) / THROUGHPUT.get(cfg.model.name, 2_000) / 3600


def plan(cells: list[Cell], seen: set[str] | None = None) -> dict:
    """The cells' runs (those in `seen`, counted elsewhere already, are left out) and their cost."""
    seen = set() if seen is None else seen
    runs = {c.run_id: c.config for c in cells if c.run_id not in seen}
    seen.update(runs)
    return {"runs": len(runs), "gpu_hours": sum(gpu_hours(cfg) for cfg in runs.values()),
            "training_samples": sum(samples(cfg)[0] for cfg in runs.values())}


def main(argv=None) -> None:
    from shared.figures import paper_figures

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paper")
    parser.add_argument("target", nargs="?", help="tableN, figN or search_* (default: all of the paper's)")
    parser.add_argument("--scale", default="paper")
    args = parser.parse_args(argv)
    figures = paper_figures(args.paper)
    targets = {**{n: (lambda t=t: expand(t, args.scale)) for n, t in paper_tables(args.paper).items()},
               **{n: (lambda f=f: f.cells(args.scale)) for n, f in figures.items()},
               **{n: (lambda s=s: expand(s.as_table(), args.scale)) for n, s in paper_searches(args.paper).items()}}
    if args.target:
        if args.target not in targets:
            raise ConfigError(f"{args.paper} has no target {args.target!r}; valid: {sorted(targets)}")
        targets = {args.target: targets[args.target]}
    seen: set[str] = set()
    print(f"{'target':<22}{'new runs':>9}{'GPU-hours':>11}   (runs shared with a target above are not counted again)")
    for name, cells in targets.items():
        cost = plan(cells(), seen)
        print(f"{name:<22}{cost['runs']:>9}{cost['gpu_hours']:>11.1f}")


if __name__ == "__main__":
    main()
