"""What regenerating a table costs before anything runs: its runs, the training samples they
process, and an estimate of GPU-hours, with subtotals for the tables, figures and searches
(`tables` is what regenerating a paper's tables costs) and a total.

    python -m shared.plan papers/fedssd/table2 [--scale paper]   # a target as Snakemake takes it
    python -m shared.plan fedssd table2     # the same
    python -m shared.plan papers/fedgkd/table6 papers/fedgkd/fig3_bottom   # several: a shared run counted once
    python -m shared.plan papers/fedssd     # every table, figure and search of the paper (or: fedssd)
    python -m shared.plan fedssd --device cpu   # hours on this machine's CPU, from CPU measurements
    python -m shared.plan --shared [--out DIR]  # runs that tables of several papers need, their numbers beside ours
                                                # (shared/reporting/shared_runs.py)

The estimate (shared/targets/cost.py) is samples processed / throughput (a forward pass for
testing counts a third of a training sample), per model. The throughput is measured where this
machine has measurements, else assumed (THROUGHPUT: a plain fp32 loop on a current data-centre
GPU), and the output says which for every model:
- finished workflow runs on real data (results/runs/<id>/metrics.json: samples trained and
  tested over the training's seconds; a run job's results/benchmarks/runs/<id>.tsv where
  metrics.json has no time), on the --device kind (cuda by default); a reduced scale's
  synthetic runs time steps, not samples, and are left out;
- speed benchmark results (benchmarks/results/*.json, results/benchmarks/*.json, written by
  `python -m benchmarks.speed`): the fastest variant of our trainer, on that device.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shared.reporting.shared_runs import shared_markdown, shared_runs, write_shared_files
from shared.targets.cost import THROUGHPUT, gpu_hours, measured_throughput, plan
from shared.targets.figure_declarations import get_figure
from shared.targets.papers import paper_names
from shared.targets.resolve import TargetError, command_targets, named_cells


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m shared.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "targets",
        nargs="*",
        metavar="TARGET",
        help="papers/<paper>/<name> as Snakemake takes them (several: a run they share counted once), "
        "papers/<paper> or <paper> (all of the paper's), or <paper> <name>",
    )
    parser.add_argument("--scale", default="paper")
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="the measurements to calibrate from (default cuda: GPU-hours)",
    )
    parser.add_argument("--assumed", action="store_true", help="ignore measurements; use the assumed throughputs")
    parser.add_argument(
        "--shared",
        action="store_true",
        help="list the runs that tables of several papers need, the papers' numbers beside ours",
    )
    parser.add_argument("--out", help="with --shared: also write shared.md/.csv/.html into this folder")
    return parser


# A target's kind by its name's start, and the name of the kind's subtotal
SUBTOTALS = {"table": "tables", "fig": "figures", "search_": "searches"}


def planned_targets(words: list[str]) -> list[tuple[str, str]]:
    """(paper, name) of each target the command line names, each once: `<paper> <name>` as two
    words, else each word a target as Snakemake takes it (shared.targets.resolve.command_targets)."""
    second = words[1] if len(words) == 2 else ""
    if second and "/" not in second and second not in paper_names() and not second.endswith("_searches"):
        paper, names = command_targets(words)
        return [(paper, name) for name in names]
    named = [(paper, name) for word in words for paper, names in [command_targets([word])] for name in names]
    return list(dict.fromkeys(named))  # a target named twice (a paper and one of its tables) is planned once


def target_costs(targets: list[tuple[str, str]], scale: str, throughput: dict) -> tuple[dict[str, dict], set[str]]:
    """Each target's new runs and GPU-hours, in the order named (a run that a target before it
    needs is counted there alone; a figure's probes, Figure.probe, with the figure), and the
    models they train; named `<paper>/<name>` where they are of several papers."""
    seen: set[str] = set()
    models: set[str] = set()
    costs = {}
    several = len({paper for paper, _ in targets}) > 1
    for paper, name in targets:
        cells = named_cells(paper, name, scale)
        models |= {c.config.model.name for c in cells}
        cost = costs[f"{paper}/{name}" if several else name] = plan(cells, seen, throughput)
        if name.startswith("fig") and (figure := get_figure(paper, name)).probe is not None:  # its own GPU jobs
            cost["gpu_hours"] += sum(figure.probe_cost * gpu_hours(c.config, throughput) for c in cells)
    return costs, models


def summed(costs) -> dict:
    costs = list(costs)
    return {"runs": sum(c["runs"] for c in costs), "gpu_hours": sum(c["gpu_hours"] for c in costs)}


def subtotals(costs: dict[str, dict]) -> dict[str, dict]:
    """The subtotals of the tables, the figures and the searches among `costs` (those present):
    what regenerating a paper's tables costs is its `tables` line."""
    kinds = {
        label: [cost for name, cost in costs.items() if name.rpartition("/")[2].startswith(start)]
        for start, label in SUBTOTALS.items()
    }
    return {label: summed(found) for label, found in kinds.items() if found}


def main(argv=None) -> None:
    parser = argument_parser()
    args = parser.parse_args(argv)
    if args.shared:
        found = shared_runs(args.scale)
        print(shared_markdown(found, args.scale))
        if args.out:
            write_shared_files(found, args.scale, Path(args.out))
        return
    if not args.targets:
        parser.error("name a target (papers/<paper>[/<name>]), or --shared")
    try:
        targets = planned_targets(args.targets)
    except TargetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    measured = {} if args.assumed else measured_throughput(args.device)
    throughput = {model: m["samples_per_s"] for model, m in measured.items()}
    unit = "GPU-hours" if args.device == "cuda" else "CPU-hours"
    costs, models = target_costs(targets, args.scale, throughput)
    print(f"{'target':<28}{'new runs':>9}{unit:>11}   (runs shared with a target above are not counted again)")
    for name, cost in costs.items():
        print(f"{name:<28}{cost['runs']:>9}{cost['gpu_hours']:>11.1f}")
    print("-" * 48)
    for name, cost in [*subtotals(costs).items(), ("total", summed(costs.values()))]:
        print(f"{name:<28}{cost['runs']:>9}{cost['gpu_hours']:>11.1f}")
    print(f"\nthroughput (training samples per second, on {args.device}):")
    for model in sorted(models):
        if model in measured:
            print(f"  {model:<12}{measured[model]['samples_per_s']:>10,.0f}  {measured[model]['source']}")
        else:
            print(f"  {model:<12}{THROUGHPUT.get(model, 2_000):>10,}  assumed (no measurement on {args.device} here)")


if __name__ == "__main__":
    main()
