"""The workflow's run job (workflow/rules/common.smk, RUN_COMMAND): the runs it names trained as
`python -m shared.run` trains them, with what a job adds.

    python -m shared.workflow_job --scale smoke --runs results/runs/ID ... [runtime key=value ...]
        [--configs FILE] [--attempt N --attempts M] [--gpu auto]

A job names its runs by output directory (`--runs results/runs/<run id>`, or its metrics.json)
and scale; the config is looked up among the workflow's tables, figures and searches at that
scale, so that nothing but the run id reaches Snakemake's rerun triggers. The key=value
overrides a job passes are the runtime keys (device, data root, trainer.client_threads, ...),
which do not change a run's id, and a job refuses any that would.

Exit codes as shared/run.py's. On a job's last attempt (`--attempt N --attempts N`) a failure
is recorded (as `python -m shared.run --record-failure` records it): metrics.json says
`failed: ...`, failure.json beside it holds the error, and the exit code is 0. A retry puts back
a finished run whose metrics.json Snakemake deleted (`RunDirectory.claim`'s restore). With
`--gpu auto` on a host with several GPUs, the job takes a free one (`claim_gpu`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shared.config.schema import RUNTIME_KEYS, ConfigError, excerpt, run_id, to_dict
from shared.run import as_overrides, check_outputs, input_error, parse_json, train_on_device
from shared.targets.configs import load_config
from shared.targets.resolve import workflow_cells


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m shared.workflow_job", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        metavar="DIR",
        required=True,
        help="the runs by output directory (results/runs/<run id>, or its metrics.json), then any runtime "
        "key=value overrides: configs are looked up at --scale",
    )
    parser.add_argument("args", nargs="*", help="runtime key=value overrides")
    parser.add_argument("--scale", default="paper", help="the scale whose runs to look up")
    parser.add_argument(
        "--configs",
        metavar="FILE",
        help="a JSON file of run id -> config the workflow wrote (else the configs are found by expanding "
        "every table at --scale, which takes seconds)",
    )
    parser.add_argument("--attempt", type=int, default=1, help="this job's attempt (Snakemake's)")
    parser.add_argument(
        "--attempts",
        type=int,
        help="the job's attempts in all: on the last, a failure is recorded (as shared.run's --record-failure)",
    )
    parser.add_argument("--gpu", choices=["auto"], help="auto: on a host with several GPUs, take a free one")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = argument_parser().parse_args(argv)
    overrides = ns.args + [a for a in ns.runs if "=" in a]  # key=value after --runs DIR ... are overrides
    outs = [str(Path(d).parent) if Path(d).name == "metrics.json" else d for d in ns.runs if "=" not in d]
    try:
        cfgs = workflow_configs([Path(d).name for d in outs], ns.scale, overrides, ns.configs)
    except (ConfigError, FileNotFoundError) as exc:
        return input_error(exc)
    code = check_outputs(outs)
    if code:
        return code
    if ns.gpu:  # one GPU for the process, whatever the number of runs
        device = claim_gpu(outs[0])
        for cfg in cfgs:
            cfg.trainer.device = device or cfg.trainer.device
    print(
        f"attempt {ns.attempt} of {ns.attempts or 1}: {len(cfgs)} run(s) at scale={ns.scale}: "
        + " ".join(run_id(cfg) for cfg in cfgs),
        flush=True,
    )
    last_attempt = ns.attempts is not None and ns.attempt >= ns.attempts
    return train_on_device(cfgs, outs, last_attempt, restore=True, attempt=ns.attempt)


def workflow_configs(run_ids: list[str], scale: str, overrides: list[str], configs: str | None = None) -> list:
    """The configs of the workflow's runs `run_ids` at `scale`, with the runtime overrides;
    from `configs` (run id -> config, written by the workflow) where it has them all."""

    names = {o.split("=", 1)[0] for o in overrides}
    if not names <= set(RUNTIME_KEYS):
        raise ConfigError(
            f"--runs takes only runtime overrides ({', '.join(RUNTIME_KEYS)}), got {sorted(names - set(RUNTIME_KEYS))}"
        )
    found = {}
    if configs and Path(configs).exists():
        try:
            text = Path(configs).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--configs {configs}: cannot read it ({excerpt(str(exc))})") from None
        written = parse_json(text, f"--configs {configs}")
        found = {rid: written[rid] for rid in run_ids if isinstance(written.get(rid), dict)}
    if len(found) < len(run_ids):
        for _, _, cell in workflow_cells(scale):
            if cell.run_id in run_ids:
                found[cell.run_id] = to_dict(cell.config)
    missing = [r for r in run_ids if r not in found]
    if missing:
        raise ConfigError(f"run(s) {missing} belong to no table, figure or search at scale={scale}")
    cfgs = []
    for rid in run_ids:
        cfg = load_config(None, [*as_overrides(found[rid]), *overrides])
        if run_id(cfg) != rid:
            raise ConfigError(f"run {rid}: the overrides {overrides} change its id")
        cfgs.append(cfg)
    return cfgs


_held_locks = []


def claim_gpu(out: str) -> str | None:
    """On a host with several GPUs, lock the first free one for the life of this process (one
    lock file per host and GPU), so concurrent workflow jobs each train on their own GPU."""
    import fcntl
    import socket

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
