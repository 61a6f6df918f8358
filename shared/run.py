"""Run one fully resolved config by hand.

    python -m shared.run [config.yaml] [key=value ...] [--out DIR]
    python -m shared.run --json '{"method": {"name": "fedavg"}, ...}' --out DIR   (the workflow's form)

Overrides use dotted keys (`partition.beta=0.1`, `local.epochs=2`); `method=fedprox`,
`model=resnet8` and `dataset=cifar100` set the name. Without --out, the run goes to
results/runs/<run id>/. `--print-config` shows the resolved config and exits.
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback

import yaml

from shared.config import ConfigError, load_config, run_id, to_dict
from shared.data import DataError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("args", nargs="*", help="an optional YAML file, then key=value overrides")
    parser.add_argument("--out", help="output directory (default: results/runs/<run id>)")
    parser.add_argument("--json", help="the config as a JSON mapping (applied before key=value overrides)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--record-failure", action="store_true",
                        help="record an exception during training in metrics.json (status failed) and exit 0, "
                             "so that a table shows the cell as failed instead of stopping")
    parser.add_argument("--gpu", choices=["auto"], help="auto: on a host with several GPUs, take a free one")
    ns = parser.parse_args(argv)

    files = [a for a in ns.args if "=" not in a]
    overrides = [a for a in ns.args if "=" in a]
    try:
        if len(files) > 1:
            raise ConfigError(f"at most one config file, got {files}")
        base = json.loads(ns.json) if ns.json else {}
        cfg = load_config(files[0] if files else None, [*flatten(base), *overrides])
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rid = run_id(cfg)
    if ns.print_config:
        print(yaml.safe_dump({"run_id": rid, **to_dict(cfg)}, sort_keys=False), end="")
        return 0

    from shared.trainer import record_failure, run  # torch is imported only once the config is valid

    out = ns.out or f"results/runs/{rid}"
    if ns.gpu:
        cfg.trainer.device = claim_gpu(out) or cfg.trainer.device
    try:
        summary = run(cfg, out)
    except (ConfigError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not ns.record_failure:
            raise
        traceback.print_exc()
        summary = record_failure(cfg, out, exc)
    keep = ("status", "final_acc", "best_acc", "rounds_to_target", "wall_time_s")
    print(json.dumps({"out": out, **{k: summary[k] for k in keep}}))
    return 0 if summary["status"] == "completed" or ns.record_failure else 1


def flatten(values: dict, prefix: str = "") -> list[str]:
    """{"a": {"b": 1}} -> ["a.b=1"], so a JSON config goes through the same path as overrides."""
    items = []
    for key, value in values.items():
        if isinstance(value, dict) and value:
            items += flatten(value, f"{prefix}{key}.")
        else:
            items.append(f"{prefix}{key}={json.dumps(value)}")
    return items


_held_locks = []


def claim_gpu(out: str) -> str | None:
    """On a host with several GPUs, lock the first free one for the life of this process (one
    lock file per host and GPU), so concurrent workflow jobs each train on their own GPU."""
    import fcntl
    import socket
    from pathlib import Path

    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count <= 1:
        return None
    lock_dir = Path(out).resolve().parent.parent / ".gpu-locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        handle = open(lock_dir / f"{socket.gethostname()}-{index}.lock", "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        _held_locks.append(handle)
        return f"cuda:{index}"
    print("warning: every GPU is taken; sharing cuda:0 (set --resources gpu=N to the GPU count)", file=sys.stderr)
    return "cuda:0"


if __name__ == "__main__":
    sys.exit(main())
