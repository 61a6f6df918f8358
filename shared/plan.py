"""What regenerating a table costs before anything runs: its runs, the training samples they
process, and an estimate of GPU-hours, with a total.

    python -m shared.plan fedssd table2 [--scale paper]
    python -m shared.plan fedssd            # every table, figure and search of the paper
    python -m shared.plan fedssd --device cpu   # hours on this machine's CPU, from CPU measurements

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
import json
import math
from pathlib import Path

from shared.catalog import DATASETS, DatasetInfo
from shared.config import ConfigError, RunConfig
from shared.experiments import Cell, expand, paper_searches, paper_tables

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


def main(argv=None) -> None:
    from shared.figures import paper_figures

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paper")
    parser.add_argument("target", nargs="?", help="tableN, figN or search_* (default: all of the paper's)")
    parser.add_argument("--scale", default="paper")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="the measurements to calibrate from (default cuda: GPU-hours)")
    parser.add_argument("--assumed", action="store_true", help="ignore measurements; use the assumed throughputs")
    args = parser.parse_args(argv)
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
