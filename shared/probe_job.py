"""The workflow's probe job (workflow/rules/tables.smk, rule probe): a figure's probe
(`Figure.probe`, shared/targets/figure_declarations.py) on one finished run, saved as CSV where
the figure's drawing reads it.

    python -m shared.probe_job papers/fedcsd/fig1 --run results/runs/ID --out FILE --scale S
        [--configs FILE] [--gpu auto] [runtime key=value ...]

The run's config is found as a run job finds it (shared/workflow_job.py: --configs, else by
expanding the targets at --scale), the runtime overrides too; `--gpu auto` takes a free GPU on a
host with several. A run that did not complete, or has no model.pt (shipped runs carry none), is
refused before a GPU is taken. Exit codes: 0 written, 1 the probe raised, 2 refused input (one
line)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from shared.config.schema import ConfigError
from shared.run import input_error
from shared.runs.files import RunFilesError, read_summary, write_atomically
from shared.targets.figure_declarations import get_figure
from shared.targets.probes import PROBE_NAME, probe_code, probe_problem
from shared.targets.resolve import TargetError, command_targets
from shared.workflow_job import claim_gpu, workflow_configs


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m shared.probe_job", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("figure", metavar="TARGET", help="the figure, as Snakemake names it: papers/<paper>/figN")
    parser.add_argument("args", nargs="*", help="runtime key=value overrides")
    parser.add_argument("--run", type=Path, required=True, metavar="DIR", help="the run's folder (results/runs/ID)")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the CSV to write")
    parser.add_argument("--scale", default="paper", help="the scale whose runs to look up")
    parser.add_argument("--configs", metavar="FILE", help="the workflow's run id -> config file (shared.workflow_job)")
    parser.add_argument("--gpu", choices=["auto"], help="auto: on a host with several GPUs, take a free one")
    return parser


def check_finished_model(run: Path) -> None:
    """A completed run with its final model (model.pt), before a GPU is taken and data loaded:
    a run restored from results/shipped/ carries no model."""
    status = read_summary(run)["status"]
    if status != "completed":
        raise ConfigError(f"run {run.name} is {status!r}, not completed: no final model to probe")
    if not (run / "model.pt").is_file():
        raise ConfigError(
            f"run {run.name} has no model.pt (shipped runs carry none): train it here, or unpack an archive of it "
            f"packed with --models (python -m shared.archive)"
        )


def main(argv: list[str] | None = None) -> int:
    ns = argument_parser().parse_intermixed_args(argv)  # the runtime overrides come after the options
    try:
        paper, names = command_targets([ns.figure])
        figure = get_figure(paper, names[0]) if len(names) == 1 and names[0].startswith("fig") else None
        if figure is None or figure.probe is None:
            raise ConfigError(f"{ns.figure}: not a figure with a probe")
        named = PROBE_NAME.fullmatch(ns.out.name)
        if named and named.group(4) != probe_code(figure):  # the workflow named it for code that has changed since
            raise ConfigError(
                f"--out {ns.out.name}: named for probe code {named.group(4)}, today's is {probe_code(figure)}"
            )
        (cfg,) = workflow_configs([ns.run.name], ns.scale, ns.args, ns.configs)
        check_finished_model(ns.run)
    except (ConfigError, TargetError, FileNotFoundError, RunFilesError) as exc:
        return input_error(exc)
    if ns.gpu:  # as a run job takes one (its lock folder beside the runs)
        cfg.trainer.device = claim_gpu(str(ns.run / "metrics.json")) or cfg.trainer.device
    started = time.monotonic()
    data = figure.probe(cfg, ns.run, ns.scale).to_csv(index=False).encode()
    problem = probe_problem(figure, data)  # as an archive's reader checks it on another machine
    if problem:  # its hours are not thrown away: the frame is kept beside, for a look
        aside = ns.out.with_name(f"{ns.out.name}.rejected")
        write_atomically(aside, lambda tmp: tmp.write_bytes(data))
        raise ValueError(f"{ns.figure}'s probe of run {ns.run.name} {problem}; it is kept in {aside}")
    write_atomically(ns.out, lambda tmp: tmp.write_bytes(data))
    seconds = time.monotonic() - started
    rows = len(data.splitlines()) - 1
    print(f"probe {ns.figure} of run {ns.run.name}: {rows} rows in {seconds:.0f} s -> {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
