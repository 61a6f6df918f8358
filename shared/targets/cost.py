"""What a run costs before it runs: the training samples it processes and an estimate of its
GPU-hours (samples / throughput per model), calibrated from this machine's measurements where
it has them. shared.plan prints it per target; the workflow's runs.smk asks a run's wall time
of it and shared.campaign sizes its units with it, so it imports neither torch nor pandas.

The estimate is samples processed / throughput (a forward pass for testing counts a third of a
training sample), per model. The throughput is measured where this machine has measurements,
else assumed (THROUGHPUT: a plain fp32 loop on a current data-centre GPU):
- finished workflow runs on real data (results/runs/<id>/metrics.json: samples trained and
  tested over the training's seconds; a run job's results/benchmarks/runs/<id>.tsv where
  metrics.json has no time), on the device kind asked for (cuda or cpu); a reduced scale's
  synthetic runs are left out, their steps too small to say what a sample costs;
- speed benchmark results (benchmarks/results/*.json, results/benchmarks/*.json, written by
  `python -m benchmarks.speed`): the fastest variant of our trainer, on that device.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from shared.config.schema import RunConfig
from shared.data.catalog import DATASETS, DatasetInfo
from shared.runs.files import RunFilesError, read_run_config, read_summary
from shared.targets.table_declarations import Cell

THROUGHPUT = {
    "fedavg_cnn": 20_000,
    "resnet8": 12_000,
    "resnet50": 1_500,
    "resnet50_gn": 1_200,
    "alexnet_bn": 3_000,
    "distilbert": 400,
}  # training samples per second (assumed)


def samples(cfg: RunConfig) -> tuple[float, float]:
    """(training samples, test forward passes) of one run: a reduced scale's synthetic stand-in
    counts its own size, an image folder CIFAR's."""
    info = DATASETS.get(cfg.dataset.name, DatasetInfo(""))
    if cfg.dataset.name == "synthetic":
        s = cfg.dataset.synthetic
        info = DatasetInfo("", train_size=s.num_classes * s.train_per_class, test_size=s.num_classes * s.test_per_class)
    train = info.train_size
    if cfg.dataset.train_subset:
        train = min(train, cfg.dataset.train_subset)
    if cfg.partition.kind == "writers" and cfg.partition.writers and info.writer_count:
        train *= min(1.0, cfg.partition.writers / info.writer_count)  # writers of about equal size
    if cfg.dataset.val_source is None:  # else the validation rows lie apart from the clients' data
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
    return {
        "runs": len(runs),
        "gpu_hours": sum(gpu_hours(cfg, throughput) for cfg in runs.values()),
        "training_samples": sum(samples(cfg)[0] for cfg in runs.values()),
    }


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


def run_throughput(metrics_path: Path, device: str, benchmark_dirs) -> tuple[str, float, float] | None:
    """(model name, samples, seconds) of a run completed on `device`; None for any other run,
    or a damaged one (fields of the wrong type: `status` names it)."""
    try:  # within a run's limits, as plain text: a shipped run may have been edited by hand
        metrics = read_summary(metrics_path.parent)
        cfg = read_run_config(metrics_path.parent)
    except (OSError, RunFilesError):
        return None
    if not isinstance(metrics, dict) or not isinstance(cfg, dict):
        return None
    if metrics.get("status") != "completed" or device_kind(metrics.get("device")) != device:
        return None
    # a reduced scale's synthetic stand-in: its tiny images and clients time steps, not samples
    if cfg.get("dataset", {}).get("name") == "synthetic":
        return None
    seconds = metrics.get("wall_time_s") or 0.0
    if not seconds:
        for folder in benchmark_dirs:
            tsv = Path(folder) / f"{metrics_path.parent.name}.tsv"
            if tsv.exists():
                with open(tsv, newline="") as f:
                    seconds = float(next(csv.DictReader(f, delimiter="\t"))["s"])
                break
    try:
        done = run_samples(cfg, metrics)
        model = cfg.get("model", {}).get("name", "?")
        return (str(model), done, seconds) if seconds > 0 and done > 0 else None
    except (TypeError, AttributeError, ValueError, OverflowError):  # OverflowError: a count too large for a float
        return None


def measured_throughput(
    device: str = "cuda",
    runs_dir: str | Path = "results/runs",
    benchmark_dirs=("results/benchmarks/runs",),
    speed_dirs=("benchmarks/results", "results/benchmarks"),
) -> dict[str, dict]:
    """model name -> {"samples_per_s", "source"} from this machine's measurements on `device`
    (cuda or cpu): finished runs first, else speed benchmark results."""
    found: dict[str, dict] = {}
    totals: dict[str, list[float]] = {}
    runs_dir = Path(runs_dir)
    for metrics_path in sorted(runs_dir.glob("*/metrics.json")) if runs_dir.is_dir() else []:
        measured = run_throughput(metrics_path, device, benchmark_dirs)
        if measured is not None:
            model, done, seconds = measured
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
            ours = [
                v.get("samples_per_s")
                for name, v in (result.get("variants") or {}).items()
                if name != "reference" and isinstance(v, dict) and v.get("samples_per_s")
            ]
            if model and ours and model not in totals:
                best = max(ours)
                if best > found.get(model, {}).get("samples_per_s", 0):
                    found[model] = {"samples_per_s": best, "source": f"measured: speed benchmark {path}"}
    return found
