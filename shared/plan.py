"""What regenerating a table costs before anything runs: its runs, the training samples they
process, and an estimate of GPU-hours, with a total.

    python -m shared.plan fedssd table2 [--scale paper]
    python -m shared.plan fedssd            # every table, figure and search of the paper
    python -m shared.plan fedssd --device cpu   # hours on this machine's CPU, from CPU measurements
    python -m shared.plan --shared [--out DIR]  # runs that tables of several papers need, their numbers beside ours

The estimate is samples processed / throughput (a forward pass for testing counts a third of a
training sample), per model. The throughput is measured where this machine has measurements,
else assumed (THROUGHPUT: a plain fp32 loop on a current data-centre GPU), and the output says
which for every model:
- finished workflow runs (results/runs/<id>/metrics.json: samples trained and tested over the
  training's seconds; a run job's results/benchmarks/runs/<id>.tsv where metrics.json has no
  time), on the --device kind (cuda by default);
- speed benchmark results (benchmarks/results/*.json, results/benchmarks/*.json, written by
  `python -m benchmarks.speed`): the fastest variant of our trainer, on that device.
"""
from __future__ import annotations

import argparse
import csv
import html
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from shared.data.catalog import DATASETS, DatasetInfo
from shared.config.schema import ConfigError, RunConfig, run_id
from shared.targets.experiments import Cell, all_tables, expand, load_metrics, paper_searches, paper_tables
from shared.runs.metrics import cell_value

if TYPE_CHECKING:  # imported where a listing is made: the workflow's start (gpu_hours) never needs pandas
    import pandas as pd

THROUGHPUT = {"fedavg_cnn": 20_000, "resnet8": 12_000, "resnet50": 1_500, "resnet50_gn": 1_200,
              "alexnet_bn": 3_000, "distilbert": 400}  # training samples per second (assumed)


def samples(cfg: RunConfig) -> tuple[float, float]:
    """(training samples, test forward passes) of one run at paper scale."""
    info = DATASETS.get(cfg.dataset.name, DatasetInfo(""))  # imagefolder, synthetic: CIFAR-sized
    train = info.train_size
    if cfg.dataset.train_subset:
        train = min(train, cfg.dataset.train_subset)
    train *= 1 - cfg.dataset.val_fraction
    share = math.ceil(cfg.federation.participation * cfg.partition.clients - 1e-9) / cfg.partition.clients
    trained = cfg.federation.rounds * share * train * cfg.local.epochs
    evaluations = math.ceil(cfg.federation.rounds / cfg.eval.every)
    models_tested = 1 + (share * cfg.partition.clients if cfg.eval.local else 0)
    return trained, evaluations * models_tested * info.test_size


def gpu_hours(cfg: RunConfig, throughput: dict[str, float] | None = None) -> float:
    trained, tested = samples(cfg)
    speed = (throughput or {}).get(cfg.model.name) or THROUGHPUT.get(cfg.model.name, 2_000)
    return (trained + tested / 3) / speed / 3600


def plan(cells: list[Cell], seen: set[str] | None = None, throughput: dict[str, float] | None = None) -> dict:
    """The cells' runs (those in `seen`, counted elsewhere already, are left out) and their cost."""
    seen = set() if seen is None else seen
    runs = {c.run_id: c.config for c in cells if c.run_id not in seen}
    seen.update(runs)
    return {"runs": len(runs), "gpu_hours": sum(gpu_hours(cfg, throughput) for cfg in runs.values()),
            "training_samples": sum(samples(cfg)[0] for cfg in runs.values())}


# --- calibration from measurements ----------------------------------------------------------

def device_kind(device: str | None) -> str:
    return "cuda" if str(device or "").startswith("cuda") else "cpu"


def run_samples(cfg: dict, metrics: dict) -> float:
    """Training samples plus a third of the test forward passes a finished run processed."""
    clients = metrics.get("client_samples") or []
    participation = cfg.get("federation", {}).get("participation", 1.0)
    rounds = metrics.get("rounds_completed") or cfg.get("federation", {}).get("rounds", 0)
    trained = rounds * participation * sum(clients) * cfg.get("local", {}).get("epochs", 1)
    dataset = cfg.get("dataset", {})
    synthetic = dataset.get("synthetic") or {}
    if dataset.get("name") == "synthetic":
        test = synthetic.get("num_classes", 10) * synthetic.get("test_per_class", 10)
    else:
        test = DATASETS.get(dataset.get("name"), DatasetInfo("")).test_size
    evaluations = len(metrics.get("eval_rounds") or [])
    tested = evaluations * (1 + (participation * len(clients) if cfg.get("eval", {}).get("local", True) else 0)) * test
    return trained + tested / 3


def measured_throughput(device: str = "cuda", runs_dir: str | Path = "results/runs",
                        benchmark_dirs=("results/benchmarks/runs",),
                        speed_dirs=("benchmarks/results", "results/benchmarks")) -> dict[str, dict]:
    """model name -> {"samples_per_s", "source"} from this machine's measurements on `device`
    (cuda or cpu): finished runs first, else speed benchmark results."""
    import yaml

    found: dict[str, dict] = {}
    totals: dict[str, list[float]] = {}
    runs_dir = Path(runs_dir)
    for metrics_path in sorted(runs_dir.glob("*/metrics.json")) if runs_dir.is_dir() else []:
        try:
            metrics = json.loads(metrics_path.read_text())
            cfg = yaml.safe_load((metrics_path.parent / "config.yaml").read_text())
        except (OSError, ValueError, yaml.YAMLError):
            continue
        if metrics.get("status") != "completed" or device_kind(metrics.get("device")) != device:
            continue
        seconds = metrics.get("wall_time_s") or 0.0
        if not seconds:
            for folder in benchmark_dirs:
                tsv = Path(folder) / f"{metrics_path.parent.name}.tsv"
                if tsv.exists():
                    with open(tsv, newline="") as f:
                        seconds = float(next(csv.DictReader(f, delimiter="\t"))["s"])
                    break
        done = run_samples(cfg, metrics)
        if seconds > 0 and done > 0:
            model = cfg.get("model", {}).get("name", "?")
            total = totals.setdefault(model, [0.0, 0.0, 0])
            total[0] += done
            total[1] += seconds
            total[2] += 1
    for model, (done, seconds, count) in totals.items():
        found[model] = {"samples_per_s": done / seconds, "source": f"measured: {count} finished runs in {runs_dir}"}
    for folder in speed_dirs:
        for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
            try:
                result = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(result, dict) or device_kind(result.get("device")) != device:
                continue
            model = result.get("model")  # the model benchmarks/speed.py trained
            ours = [v.get("samples_per_s") for name, v in (result.get("variants") or {}).items()
                    if name != "reference" and isinstance(v, dict) and v.get("samples_per_s")]
            if model and ours and model not in totals:
                best = max(ours)
                if best > found.get(model, {}).get("samples_per_s", 0):
                    found[model] = {"samples_per_s": best, "source": f"measured: speed benchmark {path}"}
    return found


# --- one experiment, several papers ---------------------------------------------------------

def experiment_id(cell: Cell) -> str:
    """The run id of a cell's config at seed 0: the same experiment whatever the seed."""
    return run_id(replace(cell.config, seed=0))


def ours(cells: list[Cell], metric, runs_dir: Path) -> str:
    """Our mean ± std over the finished seeds, for the metrics a run gives alone (a count of rounds
    to another row's accuracy needs that row: '-')."""
    values = []
    for cell in cells:
        if metric.kind != "rounds_to_row" and (runs_dir / cell.run_id / "metrics.json").exists():
            metrics = load_metrics(runs_dir, cell.run_id)
            if metrics.get("status") == "completed":
                values.append(cell_value(metric, metrics, None))
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f} ({len(values)} seeds)"


def shared_runs(scale: str = "paper", runs_dir: str | Path = "results/runs", runtime: dict | None = None) -> pd.DataFrame:
    """Every experiment (one resolved config, any seed) that tables of more than one paper need:
    one row per table cell using it, with the paper's number and ours."""
    import pandas as pd

    from shared.reporting.claims import data_label

    uses: dict[str, list] = {}
    for table in all_tables():
        for cell in expand(table, scale, runtime):
            uses.setdefault(experiment_id(cell), []).append((table, cell))
    records = []
    for experiment, used in uses.items():
        if len({table.paper for table, _ in used}) < 2:
            continue
        by_cell: dict[tuple, list[Cell]] = {}
        for table, cell in used:
            by_cell.setdefault((table.paper, table.name, cell.row.label, cell.column.label), []).append(cell)
        for (paper, name, row, column), cells in by_cell.items():
            table = next(t for t, _ in used if (t.paper, t.name) == (paper, name))
            col = next(c for c in table.columns if c.label == column)
            reported = table.reported.get(row, [None] * len(table.columns))[table.columns.index(col)]
            metric = table.metric_for(col)
            note = next((i.note for i in table.inconsistencies if (i.row, i.column) == (row, column)), "")
            records.append(dict(
                experiment=experiment, method=cells[0].config.method["name"], dataset=data_label(table, cells),
                paper=paper, table=name, row=row, column=column, metric=metric.label,
                paper_number="-" if reported is None or reported.mean is None else
                f"{reported.mean:g}" + ("" if reported.std is None else f" ± {reported.std:g}") + (" §" if note else ""),
                paper_note=note, ours=ours(cells, metric, Path(runs_dir)), runs=";".join(c.run_id for c in cells), scale=scale))
    columns = ["experiment", "method", "dataset", "paper", "table", "row", "column", "metric", "paper_number", "paper_note",
               "ours", "runs", "scale"]
    return pd.DataFrame.from_records(records, columns=columns)


def shared_markdown(df: pd.DataFrame, scale: str) -> str:
    lines = [f"# One experiment, several papers (scale: {scale})", "",
             "Each experiment is one resolved config (its runs are shared: trained once); every table cell "
             "that uses it, with the paper's printed number and ours (mean ± std over our finished seeds).", ""]
    for experiment, rows in df.groupby("experiment", sort=False):
        first = rows.iloc[0]
        lines += [f"## {first.method} on {first.dataset} (experiment {experiment})", "",
                  "| paper | table | row | column | metric | paper's number | ours |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r.paper} | {r.table} | {r.row} | {r.column} | {r.metric} | {r.paper_number} | {r.ours} |"
                  for r in rows.itertuples()]
        lines += [f"- § {r.paper} {r.table}, {r.row} at {r.column}: {r.paper_note}" for r in rows.itertuples()
                  if r.paper_note]
        lines.append("")
    return "\n".join(lines)


def write_shared_runs(scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> None:
    """shared.md, shared.csv and shared.html (for the report)."""
    write_shared_files(shared_runs(scale, runs_dir, runtime), scale, Path(out_dir))


def write_shared_files(df: pd.DataFrame, scale: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = shared_markdown(df, scale)
    (out / "shared.md").write_text(text)
    df.to_csv(out / "shared.csv", index=False)
    table = df.drop(columns=["runs"]).to_html(index=False, border=0, escape=True)
    (out / "shared.html").write_text(f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>"
                                     f"One experiment, several papers</title></head><body><h2>One experiment, several "
                                     f"papers (scale: {html.escape(scale)})</h2>{table}</body></html>\n")


def main(argv=None) -> None:
    from shared.targets.figure_declarations import paper_figures

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paper", nargs="?")
    parser.add_argument("target", nargs="?", help="tableN, figN or search_* (default: all of the paper's)")
    parser.add_argument("--scale", default="paper")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="the measurements to calibrate from (default cuda: GPU-hours)")
    parser.add_argument("--assumed", action="store_true", help="ignore measurements; use the assumed throughputs")
    parser.add_argument("--shared", action="store_true",
                        help="list the runs that tables of several papers need, the papers' numbers beside ours")
    parser.add_argument("--out", help="with --shared: also write shared.md/.csv/.html into this folder")
    args = parser.parse_args(argv)
    if args.shared:
        found = shared_runs(args.scale)
        print(shared_markdown(found, args.scale))
        if args.out:
            write_shared_files(found, args.scale, Path(args.out))
        return
    if not args.paper:
        parser.error("name a paper, or --shared")
    figures = paper_figures(args.paper)
    targets = {**{n: (lambda t=t: expand(t, args.scale)) for n, t in paper_tables(args.paper).items()},
               **{n: (lambda f=f: f.cells(args.scale)) for n, f in figures.items()},
               **{n: (lambda s=s: expand(s.as_table(), args.scale)) for n, s in paper_searches(args.paper).items()}}
    if args.target:
        if args.target not in targets:
            raise ConfigError(f"{args.paper} has no target {args.target!r}; valid: {sorted(targets)}")
        targets = {args.target: targets[args.target]}
    measured = {} if args.assumed else measured_throughput(args.device)
    throughput = {model: m["samples_per_s"] for model, m in measured.items()}
    unit = "GPU-hours" if args.device == "cuda" else "CPU-hours"
    seen: set[str] = set()
    models: set[str] = set()
    total = {"runs": 0, "gpu_hours": 0.0}
    print(f"{'target':<22}{'new runs':>9}{unit:>11}   (runs shared with a target above are not counted again)")
    for name, cells in targets.items():
        cells = cells()
        models |= {c.config.model.name for c in cells}
        cost = plan(cells, seen, throughput)
        total["runs"] += cost["runs"]
        total["gpu_hours"] += cost["gpu_hours"]
        print(f"{name:<22}{cost['runs']:>9}{cost['gpu_hours']:>11.1f}")
    print(f"{'total':<22}{total['runs']:>9}{total['gpu_hours']:>11.1f}")
    print(f"\nthroughput (training samples per second, on {args.device}):")
    for model in sorted(models):
        if model in measured:
            print(f"  {model:<12}{measured[model]['samples_per_s']:>10,.0f}  {measured[model]['source']}")
        else:
            print(f"  {model:<12}{THROUGHPUT.get(model, 2_000):>10,}  assumed (no measurement on {args.device} here)")


if __name__ == "__main__":
    main()
