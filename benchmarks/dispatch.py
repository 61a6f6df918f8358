"""Operators dispatched per group step and per training round, at a tiny scale on the CPU.

    python -m benchmarks.dispatch [key=value ...] [--repeats N] [--steps-only]

First, for each method of FedSSD's Table II, the non-view operators (each at least one kernel
on a GPU: what a step's CUDA graph replays) of one step of a group of its runs
(benchmarks/group_step.py), one line each:

    non-view ops per group step: <method> <N>

Then one FedSSD run against a group of 15 (the FedSSD row of FedSSD's Table II: 5 settings x 3
seeds), per round (not with --steps-only). A round here is what every round repeats: sampling,
the method's server step (teacher and M_class), the clients' local training and the aggregation;
evaluation is left out. The count is every aten operator torch.profiler records (nested ones
included). The single run trains the way a run trains by default (one client after another); the
group trains every (run, client) pair in one batched step (shared/training/group_training.py).
Prints both counts, the ratio `group ops / single-run ops` (the target is at most 1.5), and the
CPU seconds per run and round of the group against the single run's default path (median of
--repeats rounds; none with --repeats 0).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.group_step import non_view, record_group_step, small_group, start_members
from shared.campaign.gate_cases import method_cases
from shared.config.schema import RunConfig
from shared.targets.configs import load_config
from shared.targets.table_declarations import expand, get_table
from shared.training.group_training import GroupClients
from shared.training.timed_rounds import train_alone
from shared.training.trainer import Member, begin_round

# FedSSD's Table II setting cut to seconds on a CPU: CIFAR-shaped synthetic data, its 10
# clients all taking part, about 5 batches of 64 per client and 2 local epochs (10 steps a round)
TINY = [
    "dataset=synthetic",
    "dataset.synthetic.train_per_class=320",
    "dataset.synthetic.test_per_class=10",
    "local.epochs=2",
    "federation.rounds=50",
    "trainer.device=cpu",
    "trainer.progress=false",
    "trainer.tensorboard=false",
]


def fedssd_row(overrides: list[str]) -> list[RunConfig]:
    """The FedSSD row of Table II at paper scale (5 settings x 3 seeds), at the tiny scale."""
    cells = [c for c in expand(get_table("fedssd", "table2"), "paper") if c.config.method["name"] == "fedssd"]
    return [
        load_config(
            None,
            [
                "method=fedssd",
                f"seed={c.config.seed}",
                "aux.per_class=64",
                *partition_overrides(c.config),
                *TINY,
                *overrides,
            ],
        )
        for c in cells
    ]


def partition_overrides(cfg: RunConfig) -> list[str]:
    p = cfg.partition
    return [f"partition.kind={p.kind}", f"partition.beta={p.beta}", f"partition.k={p.k}"]


def one_round(members: list[Member], train_clients) -> None:
    sampled = [begin_round(m) for m in members]
    for member, results in zip(members, train_clients(members, sampled)):
        member.setup.method.aggregate(member.setup.global_model, [r.update for r in results])


def measure(members: list[Member], train_clients, repeats: int) -> tuple[int, float | None]:
    """aten operators of one round, and the median seconds of `repeats` more (None for 0)."""
    one_round(members, train_clients)  # warm-up: first-call costs are not per round
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        one_round(members, train_clients)
    ops = sum(1 for event in prof.events() if event.name.startswith("aten::"))
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        one_round(members, train_clients)
        seconds.append(time.perf_counter() - started)
    return ops, statistics.median(seconds) if seconds else None


def step_counts() -> dict[str, int]:
    """Row label -> non-view operators of one group step, for each method of FedSSD's Table II."""
    return {
        case.split("-", 2)[2]: len(non_view(record_group_step(small_group(cfg)).ops))  # "fedssd-table2-<row>"
        for case, cfg in method_cases(["papers/fedssd/table2"]).items()
    }


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dispatch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("overrides", nargs="*", help="key=value applied to every run")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median); 0: count operators only")
    parser.add_argument("--steps-only", action="store_true", help="the operators per group step alone")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser()
    args = parser.parse_args(argv)
    for method, count in step_counts().items():
        print(f"non-view ops per group step: {method} {count}", flush=True)
    if args.steps_only:
        return
    cfgs = fedssd_row(args.overrides)
    with tempfile.TemporaryDirectory() as root:
        single = start_members(cfgs[:1], Path(root) / "single", alone=True)
        single_ops, single_seconds = measure(single, train_alone, args.repeats)
        group = start_members(cfgs, Path(root) / "group")
        group_ops, group_seconds = measure(group, GroupClients(group), args.repeats)
    print(f"threads: {torch.get_num_threads()}, runs in the group: {len(cfgs)}")
    print(
        f"aten ops per round: single run {single_ops}, group {group_ops}; group / single = {group_ops / single_ops:.2f}"
    )
    if not args.repeats:
        return
    per_run = group_seconds / len(cfgs)
    print(
        f"CPU seconds per round and run: single run (default path) {single_seconds:.3f}, in the group "
        f"{per_run:.3f} ({per_run / single_seconds:.2f}x)"
    )


if __name__ == "__main__":
    main()
