"""What a GPU machine can tell us beyond a campaign session (scripts/gpu-session.sh): the gpu
tests, the speed benchmark's variants and a profile of the campaign's group step, in one folder.

    python3 -m benchmarks.first_run --out DIR [--data cifar10-folder] --minutes M   (from the checkout)

Steps, each in a child process bounded by what is left of the budget, each writing into DIR as
it goes (a step that fails or runs out of time is recorded and the next one starts); DIR holds
these files:

    environment.json    Python, packages, torch, CUDA, cuDNN, driver, the GPU and its memory,
                        nvidia-smi's report (shared/campaign/session.py, as a session records it)
    gpu-tests.xml       `pytest -m gpu` as JUnit XML
    speed.json          benchmarks/speed.py's FedSSD benchmark, rewritten after every variant
    trace.json          a torch.profiler trace of PROFILED_STEPS replays of the campaign's group
                        step (FedSSD Table II's first unit: a row's settings in one batched
                        step), after WARM_STEPS unprofiled ones (capture, warm-up); profile.txt
                        its operators by time (chrome://tracing or Perfetto for the trace)
    first-run.log       every step's output
    summary.md          a table of what passed and how fast, also printed at the end
    summary.json        the same, for a program

Data: `--data` takes CIFAR-10 as an image folder, a directory or a .zip (`dataset=imagefolder`,
benchmarks/README.md); without it the benchmark and the profile train on synthetic CIFAR-shaped
data. Without CUDA (a rehearsal on a laptop or CI) the gpu tests skip and the benchmark and
profile shrink to a tiny federation.
Needs only torch, numpy, pandas, matplotlib, seaborn and pytest (docs/install.md: A GPU
machine without network).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
# the benchmark's and the profile's federation where there is no GPU: seconds on one core
TINY = [
    "dataset.synthetic.train_per_class=30",
    "dataset.synthetic.test_per_class=10",
    "dataset.synthetic.image_size=16",
    "partition.clients=4",
    "local.epochs=1",
    "aux.per_class=5",
]
PROFILED_STEPS, WARM_STEPS = 20, 3
LOG = "first-run.log"


class Clock:
    """The run's time budget, shared out among the steps."""

    def __init__(self, minutes: float):
        self.deadline = time.monotonic() + 60 * minutes

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


def data_overrides(data: str | None, cuda: bool) -> list[str]:
    if data:
        return ["dataset=imagefolder", f"dataset.path={Path(data).resolve()}"]
    return ["dataset=synthetic", *([] if cuda else TINY)]


def subprocess_env() -> dict:
    """The child sees this checkout first, whatever the caller's PYTHONPATH."""
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path}


def write_environment(out: Path) -> dict:
    from shared.campaign.session_checks import environment_record

    env = environment_record(out / "environment.json")
    gpu = env["gpu0"]["name"] if env["cuda_available"] else "no CUDA device"
    return {"step": "environment", "ok": True, "detail": f"torch {env['torch']}, {gpu}"}


def run_logged(command: list[str], log: Path, timeout: float) -> int | None:
    """Run `command` with its output in `log`; its exit code, None when it ran out of time. At
    the limit it gets ^C (SIGINT) first, on which pytest still writes its report of the tests it
    ran, and is killed only if it has not ended 30 s later."""
    with open(log, "a") as handle:
        proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=subprocess_env(), cwd=REPO)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        handle.write(f"\nstopped after {timeout:.0f} s (the first run's time budget)\n")
        return None


def junit_counts(xml: Path) -> dict:
    """tests, failures, errors and skipped of a JUnit XML report, summed over its suites."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    return {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}


def gpu_tests(out: Path, timeout: float) -> dict:
    xml = out / "gpu-tests.xml"
    code = run_logged(
        [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", "tests"],
        out / LOG,
        timeout,
    )
    if not xml.exists():
        return {"step": "gpu tests", "ok": False, "detail": f"no report (exit {code}); see {LOG}"}
    c = junit_counts(xml)
    passed = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    # exit 5: no test collected at all
    return {
        "step": "gpu tests",
        "ok": code == 0 or (code == 5 and not c["failures"] + c["errors"]),
        "detail": f"{passed} passed, {c['failures']} failed, {c['errors']} errors, {c['skipped']} skipped"
        + ("" if code is not None else " (stopped at its time limit)"),
    }


def speed(out: Path, overrides: list[str], cuda: bool, timeout: float) -> dict:
    """FedSSD's setting (benchmarks/speed.py), the variants in turn until its share of the time is spent."""
    report = out / "speed.json"
    config = "fedssd" if cuda else "cpu"
    # ours first, the fastest first: what a cut-off benchmark still tells; 2 rounds give a
    # second-round time without the first's warm-up
    variants = (
        ["--variants", "batched", "sequential", "batched-bf16", "bf16", "reference", "--rounds", "2"]
        if cuda
        else ["--variants", "batched", "sequential", "reference", "--rounds", "1"]
    )
    minutes = max(0.1, (timeout - 60) / 60)  # a minute for the variant that is running when the budget ends
    code = run_logged(
        [
            sys.executable,
            "-m",
            "benchmarks.speed",
            config,
            *overrides,
            *variants,
            "--minutes",
            f"{minutes:.2f}",
            "--out",
            str(report),
        ],
        out / LOG,
        timeout,
    )
    if not report.exists():
        return {"step": "speed", "ok": False, "detail": f"no report (exit {code}); see {LOG}"}
    result = json.loads(report.read_text())
    rows = ", ".join(f"{v} {r['seconds_per_round']:.2f} s/round" for v, r in result["variants"].items())
    skipped = f"; not run: {', '.join(result['skipped'])}" if result.get("skipped") else ""
    return {"step": "speed", "ok": code == 0, "detail": (rows or "no variant finished") + skipped}


class ProfileDone(Exception):
    """The profiled steps are taken: the round stops there."""


def group_configs(overrides: list[str], cuda: bool) -> list:
    """FedSSD Table II's first unit as the campaign trains it (seed 0 of the first row's
    settings, one batched step), on this data, for one round; on a CPU a tiny federation, its
    batched step asked for."""
    from shared.campaign.train import GROUP_LIMIT
    from shared.config.schema import identity
    from shared.run import as_overrides
    from shared.targets.configs import load_config
    from shared.targets.copies import campaign_runs
    from shared.targets.run_groups import form_groups

    runs, _ = campaign_runs(["papers/fedssd/table2"], "paper", None)
    group = form_groups(runs, GROUP_LIMIT)[0]
    unit = [rid for rid in group if runs[rid].seed == min(runs[r].seed for r in group)]
    extra = [
        *overrides,
        "federation.rounds=1",
        "trainer.progress=false",
        f"trainer.device={'cuda' if cuda else 'cpu'}",
        *([] if cuda else ["trainer.clients_per_step=2", "local.epochs=12"]),
    ]  # TINY: 2 steps an epoch
    return [load_config(None, [*as_overrides(identity(runs[rid])), *extra]) for rid in unit]


def profile_group(out: Path, overrides: list[str], cuda: bool) -> dict:
    """PROFILED_STEPS steps of the group (after WARM_STEPS unprofiled) under torch.profiler;
    the round stops once they are taken. Runs in a child process (`profile`): bounded in time."""
    from torch.profiler import ProfilerActivity, schedule

    from shared.training.batched import BatchedClients
    from shared.training.group_training import run_group

    cfgs = group_configs(overrides, cuda)
    sort = "cuda_time_total" if cuda else "cpu_time_total"

    def ready(prof) -> None:
        prof.export_chrome_trace(str(out / "trace.json"))
        (out / "profile.txt").write_text(prof.key_averages().table(sort_by=sort, row_limit=40) + "\n")

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    take_step = BatchedClients.take_step
    started = time.perf_counter()
    with torch.profiler.profile(
        activities=activities,
        on_trace_ready=ready,
        schedule=schedule(wait=0, warmup=WARM_STEPS, active=PROFILED_STEPS, repeat=1),
    ) as prof:

        def profiled_step(self, sizes):
            take_step(self, sizes)
            prof.step()
            if prof.step_num >= WARM_STEPS + PROFILED_STEPS:
                raise ProfileDone

        BatchedClients.take_step = profiled_step
        try:
            with tempfile.TemporaryDirectory() as tmp:
                run_group(cfgs, [Path(tmp, str(i)) for i in range(len(cfgs))])
        except ProfileDone:
            pass
        finally:
            BatchedClients.take_step = take_step
        steps = prof.step_num
    return {
        "step": "profile",
        "ok": (out / "trace.json").is_file(),
        "detail": f"{min(max(steps - WARM_STEPS, 0), PROFILED_STEPS)} group steps of {len(cfgs)} runs "
        f"({cfgs[0].method['name']}, {cfgs[0].dataset.name}, {cfgs[0].partition.clients} clients each) "
        f"in {time.perf_counter() - started:.1f} s with the profiler",
    }


def profile(out: Path, data: str | None, timeout: float) -> dict:
    """`profile_group` in a child process, stopped at its share of the budget."""
    result = out / ".profile.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.first_run",
        "--out",
        str(out),
        "--profile-into",
        str(result),
        "--minutes",
        f"{timeout / 60:.2f}",
        *(["--data", data] if data else []),
    ]
    code = run_logged(command, out / LOG, timeout)
    if not result.is_file():
        return {"step": "profile", "ok": False, "detail": f"no profile (exit {code}); see {LOG}"}
    done = json.loads(result.read_text())
    result.unlink()
    return done


def guarded(step: str, work) -> dict:
    """A step's result; an exception is recorded as the step's failure, not the run's end."""
    started = time.perf_counter()
    try:
        result = work()
    except Exception as exc:  # the next steps still run: each tells something on its own
        result = {"step": step, "ok": False, "detail": f"{type(exc).__name__}: {exc}"}
    return {**result, "seconds": time.perf_counter() - started}


def summary_table(results: list[dict]) -> str:
    lines = ["| step | result | seconds | detail |", "|---|---|---|---|"]
    lines += [
        f"| {r['step']} | {'ok' if r['ok'] else 'FAILED'} | {r['seconds']:.0f} | {r['detail']} |" for r in results
    ]
    return "\n".join(lines) + "\n"


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.first_run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="the folder everything goes into (created)")
    parser.add_argument(
        "--data", help="CIFAR-10 as an image folder or its .zip (dataset=imagefolder); default: synthetic data"
    )
    parser.add_argument("--minutes", type=float, required=True, help="the time budget for all steps, in minutes")
    parser.add_argument("--profile-into", type=Path, help=argparse.SUPPRESS)  # the child that runs the profile
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock, cuda = Clock(args.minutes), torch.cuda.is_available()
    overrides = data_overrides(args.data, cuda)
    if args.profile_into:
        done = guarded("profile", lambda: profile_group(out, overrides, cuda))
        args.profile_into.write_text(json.dumps(done) + "\n")
        return 0
    results = [guarded("environment", lambda: write_environment(out))]
    # the tests get half the budget, the benchmark 60% of what is left, the profile the rest
    results.append(guarded("gpu tests", lambda: gpu_tests(out, 0.5 * clock.left())))
    results.append(guarded("speed", lambda: speed(out, overrides, cuda, 0.6 * clock.left())))
    results.append(guarded("profile", lambda: profile(out, args.data, clock.left())))
    table = summary_table(results)
    (out / "summary.md").write_text(table)
    (out / "summary.json").write_text(json.dumps(results, indent=1) + "\n")
    print(table, end="")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
