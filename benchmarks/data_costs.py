"""What each dataset costs the first time and afterwards: download and verification (when its
files are not in the data root yet), conversion to the cached tensors, and a later load.

    python -m benchmarks.data_costs NAME ... [key=value ...] [--rebuild] [--out FILE]

NAME is a dataset (`cifar10`, `femnist_digits`, `tiny_imagenet`, `sst5`, ...); the key=value
overrides apply to each (`data_root=DIR`, `model.pretrained=DIR` for the text datasets,
`dataset.path=...` for `imagefolder`). `--rebuild` deletes a dataset's cached tensors first, so
that the conversion is timed even where it ran before (the raw files stay). The log lines of
shared.data.datasets split the first load into download and conversion. Prints a table and writes JSON
(default results/benchmarks/data_costs.json).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from shared.config.schema import ConfigError
from shared.data.catalog import DataError, data_root, dataset_info
from shared.data.datasets import load_dataset
from shared.targets.configs import load_config


def cache_files(root: Path, name: str) -> list[Path]:
    """The dataset's cached tensors: <name>.pt, or <name>-<variant>.pt (splits, tokenizers)."""
    return sorted(p for p in (root / "cache").glob(f"{name}*.pt") if p.stem == name or p.stem.startswith(f"{name}-"))


def files_in(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def measure(name: str, overrides: list[str], rebuild: bool) -> dict:
    extra = ["model=distilbert"] if dataset_info(name).text else []
    cfg = load_config(None, [f"dataset={name}", *extra, *overrides])
    root = data_root(cfg.data_root)
    if rebuild:
        for cache in cache_files(root, name):
            cache.unlink()
    cached_before, present_before = bool(cache_files(root, name)), files_in(root)
    started = time.perf_counter()
    dataset = load_dataset(cfg)
    first = time.perf_counter() - started
    downloaded = sorted(str(p.relative_to(root)) for p in files_in(root) - present_before if p.parent.name != "cache")
    started = time.perf_counter()
    load_dataset(cfg)
    again = time.perf_counter() - started
    return {
        "train": len(dataset.train),
        "test": len(dataset.test),
        "classes": dataset.num_classes,
        "first_load_s": first,
        "cached_before": cached_before,
        "downloaded": downloaded,
        "later_load_s": again,
        "cache_mb": sum(p.stat().st_size for p in cache_files(root, name)) / 1e6,
    }


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.data_costs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("args", nargs="+", help="dataset names, then key=value overrides")
    parser.add_argument("--rebuild", action="store_true", help="delete each dataset's cached tensors first")
    parser.add_argument("--out", default="results/benchmarks/data_costs.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = argument_parser().parse_args(argv)
    names = [a for a in ns.args if "=" not in a]
    overrides = [a for a in ns.args if "=" in a]
    results = {}
    for name in names:
        try:
            results[name] = measure(name, overrides, ns.rebuild)
        except (ConfigError, DataError) as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 2
    report = {
        "datasets": results,
        "overrides": overrides,
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "command": " ".join(["python -m benchmarks.data_costs", *(argv or sys.argv[1:])]),
    }
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print("| dataset | train | test | classes | first load (s) | what it did | later load (s) | cache (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        did = (
            "loaded its cache"
            if r["cached_before"]
            else ("downloaded " + ", ".join(r["downloaded"]) + ", converted" if r["downloaded"] else "converted")
        )
        print(
            f"| {name} | {r['train']} | {r['test']} | {r['classes']} | {r['first_load_s']:.2f} | {did} | "
            f"{r['later_load_s']:.2f} | {r['cache_mb']:.0f} |"
        )
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
