"""Run one fully resolved config by hand.

    python -m shared.run [config.yaml] [key=value ...] [--out DIR]

Overrides use dotted keys (`partition.beta=0.1`, `local.epochs=2`); `method=fedprox`,
`model=resnet8` and `dataset=cifar100` set the name. Without --out, the run goes to
results/runs/<run id>/. `--print-config` shows the resolved config and exits.
"""
from __future__ import annotations

import argparse
import json
import sys

import yaml

from shared.config import ConfigError, load_config, run_id, to_dict
from shared.data import DataError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("args", nargs="*", help="an optional YAML file, then key=value overrides")
    parser.add_argument("--out", help="output directory (default: results/runs/<run id>)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    ns = parser.parse_args(argv)

    files = [a for a in ns.args if "=" not in a]
    overrides = [a for a in ns.args if "=" in a]
    try:
        if len(files) > 1:
            raise ConfigError(f"at most one config file, got {files}")
        cfg = load_config(files[0] if files else None, overrides)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rid = run_id(cfg)
    if ns.print_config:
        print(yaml.safe_dump({"run_id": rid, **to_dict(cfg)}, sort_keys=False), end="")
        return 0

    from shared.trainer import run  # torch is imported only once the config is valid

    out = ns.out or f"results/runs/{rid}"
    try:
        summary = run(cfg, out)
    except (ConfigError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    keep = ("status", "final_acc", "best_acc", "rounds_to_target", "wall_time_s")
    print(json.dumps({"out": out, **{k: summary[k] for k in keep}}))
    return 0 if summary["status"] == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
