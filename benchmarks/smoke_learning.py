"""Does a table learn at smoke scale? Trains every cell of a table at `scale=smoke` (in-process,
one torch thread per worker) and prints the mean final accuracy per row and column, marking
cells at chance (`°`, as the tables do), and per column the paper's own method minus FedAvg.

    python -m benchmarks.smoke_learning fedssd table2 [--jobs 2] [--seeds 2]
        [--set dataset.synthetic.noise=2.0 --set federation.rounds=4] [--out results/benchmarks/smoke_learning]

`--set` overrides the smoke configs (dotted key=value, as `python -m shared.run` takes them),
so that another smoke data set or scale can be tried without editing the code; finished runs
under --out are reused (a run's directory is its run id). The evidence behind the smoke scale's
data and sizes in shared/experiments.py (README: Two commands on a fresh machine).
"""
import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import torch
import yaml

from shared.dotted import nested
from shared import experiments
from shared.experiments import expand, get_table
from shared.trainer import run


def train(job: tuple) -> tuple[str, str, int, float, str]:
    cell_key, cfg, out = job
    torch.set_num_threads(1)
    summary = run(cfg, out)
    return (*cell_key, summary["final_acc"], summary["status"])


def parse_sets(pairs: list[str]) -> dict:
    """`key=value` pairs as a nested dict, each value read as YAML (expand checks them)."""
    return nested({key: yaml.safe_load(value) for key, _, value in (p.partition("=") for p in pairs)})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paper")
    parser.add_argument("table")
    parser.add_argument("--set", action="append", default=[], dest="sets", help="dotted key=value on the smoke configs")
    parser.add_argument("--smoke", action="append", default=[], help="NAME=VALUE: another value of a SMOKE_* "
                        "constant of shared/experiments.py (SMOKE_LOCAL_EPOCHS=5), to try another smoke scale")
    parser.add_argument("--seeds", type=int, default=None, help="at most this many of the smoke scale's seeds")
    parser.add_argument("--rows", nargs="*", help="only these rows (default: all)")
    parser.add_argument("--columns", nargs="*", help="only these columns (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="results/benchmarks/smoke_learning")
    args = parser.parse_args(argv)
    for name, _, value in (s.partition("=") for s in args.smoke):
        assert hasattr(experiments, name), f"shared.experiments has no {name}"
        setattr(experiments, name, yaml.safe_load(value))
    table = get_table(args.paper, args.table)
    overrides = {**parse_sets(args.sets), "trainer": {"device": "cpu", "progress": False}}
    cells = expand(table, "smoke", overrides)
    seeds = sorted({c.seed for c in cells})[: args.seeds]
    cells = [c for c in cells if c.seed in seeds and (not args.rows or c.row.label in args.rows)
             and (not args.columns or c.column.label in args.columns)]
    jobs = [((c.row.label, c.column.label, c.seed), c.config, Path(args.out) / c.run_id) for c in cells]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(train, jobs))
    seconds = time.perf_counter() - started
    frame = pd.DataFrame(results, columns=["row", "column", "seed", "acc", "status"])
    print(report(table, frame, 100 / cells[0].config.dataset.synthetic.num_classes, seconds, args))


def report(table, frame: pd.DataFrame, chance: float, seconds: float, args) -> str:
    """The matrix of mean final accuracies (° at chance), own method minus FedAvg, and timing."""
    means = frame.pivot_table(index="row", columns="column", values="acc", aggfunc="mean")
    means = means.reindex(index=[r.label for r in table.rows if r.label in means.index],
                          columns=[c.label for c in table.columns if c.label in means.columns])
    marked = means.map(lambda a: f"{a:.2f}{'°' if abs(a - chance) <= 0.5 else ''}")
    own = next((r for r in means.index if r.lower() == table.paper.lower()), None)
    lines = [f"{table.paper}/{table.name} at smoke scale, {frame.seed.nunique()} seed(s), --smoke {args.smoke} --set {args.sets}",
             marked.to_markdown()]
    if own and "FedAvg" in means.index:
        diff = (means.loc[own] - means.loc["FedAvg"]).map(lambda d: f"{d:+.2f}")
        lines.append(f"\n{own} - FedAvg: " + ", ".join(f"{c} {d}" for c, d in diff.items()))
    at_chance = int(means.map(lambda a: abs(a - chance) <= 0.5).to_numpy().sum())
    not_completed = frame[frame.status != "completed"]
    lines.append(f"cells at chance: {at_chance}; runs not completed: {len(not_completed)}; "
                 f"{len(frame)} runs in {seconds:.0f} s on {args.jobs} worker(s)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
