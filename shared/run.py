"""Run one fully resolved config by hand.

    python -m shared.run [config.yaml] [key=value ...] [--out DIR]
    python -m shared.run --json '{"method": {"name": "fedavg"}, ...}' --out DIR   (the workflow's form)
    python -m shared.run --json A --out DIR_A --json B --out DIR_B ...   (several runs, one process)

Overrides use dotted keys (`partition.beta=0.1`, `local.epochs=2`); `method=fedprox`,
`model=resnet8` and `dataset=cifar100` set the name, and apply to every --json config. Without
--out, a run goes to results/runs/<run id>/. `--print-config` shows the resolved config and
exits. Several runs share the process and its GPU (shared/multirun.py).
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
    parser.add_argument("--out", action="append", help="output directory (default: results/runs/<run id>); "
                                                        "one per --json when there are several")
    parser.add_argument("--json", action="append",
                        help="the config as a JSON mapping (applied before key=value overrides); repeat for several runs")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--record-failure", action="store_true",
                        help="record an exception during training in metrics.json (status failed) and exit 0, "
                             "so that a table shows the cell as failed instead of stopping")
    parser.add_argument("--gpu", choices=["auto"], help="auto: on a host with several GPUs, take a free one")
    ns = parser.parse_args(argv)

    files = [a for a in ns.args if "=" not in a]
    overrides = [a for a in ns.args if "=" in a]
    jsons, outs = ns.json or [None], ns.out or []
    try:
        if len(files) > 1:
            raise ConfigError(f"at most one config file, got {files}")
        if len(outs) > 1 and len(outs) != len(jsons) or len(jsons) > 1 and outs and len(outs) != len(jsons):
            raise ConfigError(f"{len(jsons)} --json configs and {len(outs)} --out directories: give one --out per --json")
        cfgs = [load_config(files[0] if files else None, [*flatten(json.loads(j) if j else {}), *overrides]) for j in jsons]
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if ns.print_config:
        print("---\n".join(yaml.safe_dump({"run_id": run_id(cfg), **to_dict(cfg)}, sort_keys=False) for cfg in cfgs), end="")
        return 0

    from shared.multirun import run_all  # torch is imported only once the configs are valid
    from shared.trainer import resolve_device

    outs = outs or [f"results/runs/{run_id(cfg)}" for cfg in cfgs]
    if ns.gpu:  # one GPU for the process, whatever the number of runs
        device = claim_gpu(outs[0])
        for cfg in cfgs:
            cfg.trainer.device = device or cfg.trainer.device
    jobs = [lambda cfg=cfg, out=out: train(cfg, out, ns.record_failure) for cfg, out in zip(cfgs, outs)]
    return max(run_all(cfgs, jobs, resolve_device(cfgs[0].trainer.device)))


def train(cfg, out: str, record_failure: bool) -> int:
    """One run to completion; prints its summary line and returns the exit code."""
    from shared.trainer import record_failure as record, run

    try:
        summary = run(cfg, out)
    except (ConfigError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not record_failure:
            raise
        traceback.print_exc()
        summary = record(cfg, out, exc)
    keep = ("status", "final_acc", "best_acc", "rounds_to_target", "wall_time_s")
    print(json.dumps({"out": out, **{k: summary[k] for k in keep}}), flush=True)
    return 0 if summary["status"] == "completed" or record_failure else 1


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
