"""Does a table learn at smoke scale? Trains every cell of a table at `scale=smoke` (in-process,
one torch thread per worker) and prints the mean final accuracy per row and column, marking
cells at chance (`°`) and cells whose every seed equals FedAvg's (`=`), as the tables do, per
column the paper's own method minus FedAvg, and the single seeds at chance.

    python -m benchmarks.smoke_learning fedssd table2 [--jobs 2] [--seeds 2]
        [--set dataset.synthetic.noise=2.0 --set federation.rounds=4] [--out results/benchmarks/smoke_learning]

`--set` overrides the smoke configs (dotted key=value, as `python -m shared.run` takes them),
so that another smoke data set or scale can be tried without editing the code; finished runs
under --out are reused (a run's directory is its run id). The evidence behind the smoke scale's
data and sizes in shared/targets/scales.py (README: Try it first).

Measured (2 seeds, FedSSD Table II; the earlier scale is `--smoke SMOKE_ROUNDS=3 --smoke
SMOKE_LOCAL_EPOCHS=2 --smoke SMOKE_SAMPLES_PER_CLIENT=100 --smoke SMOKE_OVERLAP=null --smoke
SMOKE_TEST_PER_CLASS=50 --smoke SMOKE_MAX_TEST=500`): 3 rounds of 2 epochs on about 100
samples a client left MOON at chance at δ=0.1, FedAvg at 100% at #K=5 and δ=10, and FedSSD
equal to FedAvg in 4 of 5 columns (its mask was zero while the global model was weak, and
M^2 <= 1e-4 after); 4 rounds of 10 epochs at batch size 8 left no cell at chance, FedAvg at
31-78%, and FedSSD 0.05-0.35 points from FedAvg in 4 of 5 columns, but at δ=0.1 each seed at
FedAvg's (62.90, 58.10; marked `=`, as the tables mark it), and MOON's seed 1 at chance at δ=0.5
and δ=10. Today's batch size 6 leaves no cell and no seed at chance, FedAvg at 37-81%, and every
method apart from FedAvg in every column (FedSSD by 0.05-0.70). Tried and dropped: 5 rounds of
1 epoch, 3 rounds of 10 epochs, batch size 10, 500 or 2,000 test samples, 5 rounds, 20-, 24- or
32-pixel images (FedSSD tied FedAvg in some column, a different one each time), batch size 5
and batch size 4 at 9 epochs (a tie too), batch size 4 at 8 and 10 epochs (no tie, but more CPU
than batch size 6; benchmarks/README.md: Smoke scale).
"""

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import torch
import yaml

from shared.config.dotted import nested
from shared.reporting.summary import REFERENCE_ROW, equals_reference
from shared.targets import scales
from shared.targets.table_declarations import expand, get_table
from shared.training.trainer import run


def train(job: tuple) -> tuple[str, str, int, float, str]:
    cell_key, cfg, out = job
    torch.set_num_threads(1)
    summary = run(cfg, out)
    return (*cell_key, summary["final_acc"], summary["status"])


def parse_sets(pairs: list[str]) -> dict:
    """`key=value` pairs as a nested dict, each value read as YAML (expand checks them)."""
    return nested({key: yaml.safe_load(value) for key, _, value in (p.partition("=") for p in pairs)})


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paper")
    parser.add_argument("table")
    parser.add_argument("--set", action="append", default=[], dest="sets", help="dotted key=value on the smoke configs")
    parser.add_argument(
        "--smoke",
        action="append",
        default=[],
        help="NAME=VALUE: another value of a SMOKE_* "
        "constant of shared/targets/scales.py (SMOKE_LOCAL_EPOCHS=5), to try another smoke scale",
    )
    parser.add_argument("--seeds", type=int, default=None, help="at most this many of the smoke scale's seeds")
    parser.add_argument("--rows", nargs="*", help="only these rows (default: all)")
    parser.add_argument("--columns", nargs="*", help="only these columns (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="results/benchmarks/smoke_learning")
    return parser


def main(argv=None):
    parser = argument_parser()
    args = parser.parse_args(argv)
    for name, _, value in (s.partition("=") for s in args.smoke):
        if not name.startswith("SMOKE_") or not hasattr(scales, name):
            parser.error(f"--smoke {name}: shared/targets/scales.py has no such SMOKE_* constant")
        setattr(scales, name, yaml.safe_load(value))
    table = get_table(args.paper, args.table)
    overrides = {**parse_sets(args.sets), "trainer": {"device": "cpu", "progress": False}}
    cells = expand(table, "smoke", overrides)
    seeds = sorted({c.seed for c in cells})[: args.seeds]
    cells = [
        c
        for c in cells
        if c.seed in seeds
        and (not args.rows or c.row.label in args.rows)
        and (not args.columns or c.column.label in args.columns)
    ]
    jobs = [((c.row.label, c.column.label, c.seed), c.config, Path(args.out) / c.run_id) for c in cells]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(train, jobs))
    seconds = time.perf_counter() - started
    frame = pd.DataFrame(results, columns=["row", "column", "seed", "acc", "status"])
    print(report(table, frame, 100 / cells[0].config.dataset.synthetic.num_classes, seconds, args))


def pipe_table(frame: pd.DataFrame) -> str:
    """A Markdown table of `frame`, its index as the first column (pandas' to_markdown needs
    tabulate, which is no dependency of ours)."""
    lines = [
        f"| {frame.index.name or ''} | " + " | ".join(map(str, frame.columns)) + " |",
        "|---|" + "---|" * len(frame.columns),
    ]
    lines += [f"| {index} | " + " | ".join(map(str, row)) + " |" for index, row in zip(frame.index, frame.to_numpy())]
    return "\n".join(lines)


def report(table, frame: pd.DataFrame, chance: float, seconds: float, args) -> str:
    """The matrix of mean final accuracies (° at chance, = where every seed equals FedAvg's, as
    the tables mark them), own method minus FedAvg, the single seeds at chance, and timing."""
    means = frame.pivot_table(index="row", columns="column", values="acc", aggfunc="mean")
    means = means.reindex(
        index=[r.label for r in table.rows if r.label in means.index],
        columns=[c.label for c in table.columns if c.label in means.columns],
    )
    runs = frame.rename(columns={"acc": "value"})
    equal = {(r, c): equals_reference(runs, r, c) for r in means.index for c in means.columns}
    marked = pd.DataFrame(
        {
            c: [
                f"{means.loc[r, c]:.2f}{'°' if abs(means.loc[r, c] - chance) <= 0.5 else ''}"
                f"{'=' if equal[r, c] else ''}"
                for r in means.index
            ]
            for c in means.columns
        },
        index=means.index,
    )
    own = next((r for r in means.index if r.lower() == table.paper.lower()), None)
    lines = [
        f"{table.paper}/{table.name} at smoke scale, {frame.seed.nunique()} seed(s), "
        f"--smoke {args.smoke} --set {args.sets}",
        pipe_table(marked),
    ]
    if own and REFERENCE_ROW in means.index:
        diff = (means.loc[own] - means.loc[REFERENCE_ROW]).map(lambda d: f"{d:+.2f}")
        lines.append(f"\n{own} - {REFERENCE_ROW}: " + ", ".join(f"{c} {d}" for c, d in diff.items()))
    at_chance = int(means.map(lambda a: abs(a - chance) <= 0.5).to_numpy().sum())
    seeds_at_chance = frame[(frame.acc - chance).abs() <= 0.5]
    not_completed = frame[frame.status != "completed"]
    lines.append(
        f"cells at chance: {at_chance}; cells equal to {REFERENCE_ROW} at every seed (=): {sum(equal.values())}; "
        f"single seeds at chance: {len(seeds_at_chance)} "
        f"{[(r.row, r.column, r.seed) for r in seeds_at_chance.itertuples()]}; runs not completed: "
        f"{len(not_completed)}; {len(frame)} runs in {seconds:.0f} s on {args.jobs} worker(s)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
