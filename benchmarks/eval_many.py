"""Testing many models on one test set: `evaluate` in a loop against one `evaluate_many` pass.

    python -m benchmarks.eval_many [--models 15] [--images 10000] [--model fedavg_cnn]
                                   [--device cpu] [--repeats 3] [key=value ...]

Builds `--models` differently initialised models and a synthetic test set shaped like
CIFAR-10's (3x32x32, `--images` of them, 10 classes), then prints, for each way, the seconds
for the whole test set (best of `--repeats`) and the operators dispatched per test batch
(torch.profiler's aten:: events, nested ones included, over one whole evaluation divided by
its batches of eval.batch_size), and checks that both ways give every model the same
accuracy. key=value overrides go to the config (eval.batch_size=..., trainer.amp=true).
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from shared.data.federation import build_federation
from shared.methods.fedavg import snapshot
from shared.models.registry import model_for
from shared.targets.configs import load_config
from shared.training.evaluation import evaluate, evaluate_many


def seconds(work, repeats: int, device: torch.device) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def dispatched(work) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        work()
    return sum(1 for event in profile.events() if event.name.startswith("aten::"))


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=15)
    parser.add_argument("--images", type=int, default=10_000, help="test images (a multiple of 10)")
    parser.add_argument("--model", default="fedavg_cnn")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser()
    args = parser.parse_args(argv)
    cfg = load_config(
        None,
        [
            "dataset=synthetic",
            "dataset.synthetic.train_per_class=1",
            f"dataset.synthetic.test_per_class={args.images // 10}",
            "partition.clients=1",
            f"model={args.model}",
            f"trainer.device={args.device}",
            *args.overrides,
        ],
    )
    device = torch.device(args.device)
    federation = build_federation(cfg, device)
    models = []
    for seed in range(args.models):
        torch.manual_seed(seed)
        models.append(model_for(cfg, federation).to(device))
    states = [snapshot(m) for m in models]
    test = federation.test

    def in_a_loop():
        return [evaluate(m, test, federation, cfg) for m in models]

    def in_one_pass():
        return evaluate_many(models[0], states, test, federation, cfg)

    assert [r["acc"] for r in in_a_loop()] == [r["acc"] for r in in_one_pass()], "the two ways disagree"
    batches = math.ceil(len(test) / cfg.eval.batch_size)
    print(
        f"{args.models} x {args.model} on {len(test)} test images, eval.batch_size={cfg.eval.batch_size}, "
        f"{device}, {torch.get_num_threads()} torch threads, trainer.amp={cfg.trainer.amp}"
    )
    print(f"{'way':24} {'seconds':>8} {'operators per test batch':>25}")
    for name, work in (("evaluate in a loop", in_a_loop), ("evaluate_many", in_one_pass)):
        print(f"{name:24} {seconds(work, args.repeats, device):8.2f} {dispatched(work) / batches:25.0f}")


if __name__ == "__main__":
    main()
