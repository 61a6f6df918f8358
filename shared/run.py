"""Run one fully resolved config by hand.

    python -m shared.run [config.yaml] [key=value ...] [--out DIR]
    python -m shared.run --json '{"method": {"name": "fedavg"}, ...}' --out DIR
    python -m shared.run --json A --out DIR_A --json B --out DIR_B ...   (several runs, one process, in groups)

Overrides use dotted keys (`partition.beta=0.1`, `local.epochs=2`); `method=fedprox`,
`model=resnet8` and `dataset=cifar100` set the name, and apply to every --json config. Without
--out, a run goes to results/runs/<run id>/. `--print-config` shows the resolved config and
exits. Several runs share the process: those that can train in one batched step train as a
group (shared/training/group_training.py), the others one after another. The workflow's jobs
train their runs through shared/workflow_job.py, which names them by run id and scale.

Exit codes, so that retries see transient failures: 0 for a run that completed or diverged (a
diverged run is a result: metrics.json with status `diverged: ...`); 1 when training raised, 2
for a config or data error, both without metrics.json, except with `--record-failure` (a
workflow job's last attempt): then metrics.json says `failed: ...`, failure.json beside it holds
the error, the exit code is 0, and the table marks the cell. The workflow retries a recorded
failure on its next invocation (a `retry_run` job marks it first: workflow/rules/runs.smk
`retry_marker`).
"""

from __future__ import annotations

import argparse
import json
import sys

import yaml

from shared.config.dotted import flatten
from shared.config.schema import ConfigError, excerpt, run_id, to_dict
from shared.data.catalog import DataError
from shared.runs.directory import RunDirectoryError, check_output, is_disk_full, write_error
from shared.runs.numerics import resolve_device, select_device
from shared.targets.configs import load_config
from shared.targets.run_groups import form_groups
from shared.training.group_training import GroupRefused, run_group
from shared.training.trainer import print_error, run


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m shared.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("args", nargs="*", help="an optional YAML file, then key=value overrides")
    parser.add_argument(
        "--out",
        action="append",
        help="output directory (default: results/runs/<run id>); one per --json when there are several",
    )
    parser.add_argument(
        "--json",
        action="append",
        help="the config as a JSON mapping (applied before key=value overrides); repeat for several runs",
    )
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument(
        "--record-failure",
        action="store_true",
        help="record an exception during training in metrics.json (status failed) and exit 0, "
        "so that a table shows the cell as failed instead of stopping",
    )
    return parser


def resolve_configs(ns: argparse.Namespace) -> tuple[list, list[str]]:
    """The runs' configs and output directories (none given: the default ones)."""
    # a config file first, if any; every later argument is a key=value override (else an error)
    files = ns.args[:1] if ns.args and "=" not in ns.args[0] else []
    overrides = ns.args[len(files) :]
    jsons, outs = ns.json or [None], ns.out or []
    if len(outs) > 1 and len(outs) != len(jsons) or len(jsons) > 1 and outs and len(outs) != len(jsons):
        raise ConfigError(f"{len(jsons)} --json configs and {len(outs)} --out directories: give one --out per --json")
    cfgs = [
        load_config(files[0] if files else None, [*as_overrides(parse_json(j, "--json")), *overrides]) for j in jsons
    ]
    return cfgs, outs


def parse_json(text: str | None, where: str) -> dict:
    """A JSON mapping given on the command line or in a file; anything else is one line."""
    try:
        value = json.loads(text) if text else {}
    except ValueError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a JSON mapping, got {excerpt(value)}")
    return value


def main(argv: list[str] | None = None) -> int:
    ns = argument_parser().parse_args(argv)
    try:
        cfgs, outs = resolve_configs(ns)
    except (ConfigError, FileNotFoundError) as exc:
        return input_error(exc)
    if ns.print_config:
        print(
            "---\n".join(yaml.safe_dump({"run_id": run_id(cfg), **to_dict(cfg)}, sort_keys=False) for cfg in cfgs),
            end="",
        )
        return 0
    outs = outs or [f"results/runs/{run_id(cfg)}" for cfg in cfgs]
    return check_outputs(outs) or train_on_device(cfgs, outs, ns.record_failure)


def check_outputs(outs: list[str]) -> int:
    """Every output directory checked before any data loads: 0, or the input error's exit code."""
    try:
        for out in outs:
            check_output(out)
    except ConfigError as exc:
        return input_error(exc)
    return 0


def train_on_device(cfgs: list, outs: list[str], record_failure: bool, restore: bool = False, attempt: int = 1) -> int:
    """The runs trained on the first one's device (`train_all`); the highest exit code. A device
    this machine lacks fails the command, not the runs: they are not recorded as failed."""
    try:
        device = resolve_device(cfgs[0].trainer.device)
    except ConfigError as exc:
        return input_error(exc)
    select_device(device)  # before any CUDA context: a job given cuda:i never touches GPU 0
    return max(train_all(cfgs, outs, record_failure, restore, attempt))


def train_all(cfgs: list, outs: list[str], record_failure: bool, restore: bool, attempt: int) -> list[int]:
    """Exit codes of the runs, trained in groups where they can share one batched step (runs
    with one `group_key`, shared/training/group_training.py), else one after another with a one-line
    note saying why. A group that raises is trained again one run after another, each from
    its checkpoint, so that a failure is recorded (or retried) for the run that fails."""

    codes = {}
    for group in form_groups({str(i): cfg for i, cfg in enumerate(cfgs)}, len(cfgs)):
        members = [int(i) for i in group]
        if len(members) > 1:
            try:
                summaries = run_group([cfgs[i] for i in members], [outs[i] for i in members], restore, keep=True)
                codes.update({i: report(summary, outs[i]) for i, summary in zip(members, summaries)})
                continue
            except GroupRefused as why:
                print(f"note: {len(members)} runs train one after another: {why}", file=sys.stderr, flush=True)
            except Exception as exc:  # each run again alone, which records or retries its own failure
                print(
                    f"note: the group of {len(members)} runs failed ({type(exc).__name__}: {excerpt(str(exc))}); "
                    "its runs train one after another",
                    file=sys.stderr,
                    flush=True,
                )
        codes.update({i: train(cfgs[i], outs[i], record_failure, restore, attempt) for i in members})
    return [codes[i] for i in range(len(cfgs))]


def input_error(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


def train(cfg, out: str, record_failure: bool, restore: bool = False, attempt: int = 1) -> int:
    """One run to completion; prints its summary line and returns the exit code (module
    docstring). A finished run keeps a copy of its metrics.json: when Snakemake deletes a
    failed job's outputs although its run finished (a sibling of a group job failed; SLURM,
    which enforces time limits every 30 s or so, killed the job just after the run ended), the
    workflow's retry (`restore`) puts them back instead of training the run again. Every
    change to the directory happens in `run`, holding its lock, once it is known to be this
    run's (shared/runs/directory.py), a recorded failure too."""

    try:
        summary = run(cfg, out, restore, record_attempt=attempt if record_failure else None, keep=True)
    except RunDirectoryError as exc:  # not this run's directory, or another writer's: nothing is written to it
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if is_disk_full(exc):  # one line, no failure recorded: the next attempt resumes
            print(f"error: run in {out}: {write_error(exc)}", file=sys.stderr)
            return 1
        if record_failure:  # raised while the failure (already printed) was being recorded
            print(f"error: the failure is not recorded: {excerpt(str(exc))}", file=sys.stderr)
            return 1
        print_error(exc)
        print(f"run in {out} failed (attempt {attempt}); no metrics.json, so that the job is retried", file=sys.stderr)
        return 2 if isinstance(exc, (ConfigError, DataError)) else 1
    return report(summary, out)


def report(summary: dict, out: str) -> int:
    """Print a run's summary line; exit code 0."""
    keep = ("status", "final_acc", "best_acc", "rounds_to_target", "wall_time_s")
    line = {"out": out, **{k: summary.get(k) for k in keep}}
    if "restored" in summary:
        line["restored"] = summary["restored"]
    print(json.dumps(line), flush=True)
    return 0


def as_overrides(values: dict) -> list[str]:
    """{"a": {"b": 1}} -> ["a.b=1"], so a JSON config goes through the same path as overrides."""
    return [f"{key}={json.dumps(value)}" for key, value in flatten(values).items()]


if __name__ == "__main__":
    sys.exit(main())
