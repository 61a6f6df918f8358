"""What a GPU machine runs first: everything it can tell us in under ten minutes, in one folder.

    python -m benchmarks.first_run --out DIR [--data cifar10-jpeg.zip] [--minutes 9]
    scripts/gpu-first-run.sh DIR [cifar10-jpeg.zip]          (the same, with the checkout on PYTHONPATH)

Steps, each with its share of the time budget, each writing into DIR as it goes (a step that
fails or runs out of time is recorded and the next one starts):

    environment.json    Python, packages, torch, CUDA, cuDNN, driver, the GPU and its memory,
                        the numerics a run sets (shared/seeding.py), nvidia-smi's report
    gpu-tests.xml       `pytest -m gpu` as JUnit XML (gpu-tests.log: its output)
    speed.json          benchmarks/speed.py's FedSSD benchmark, rewritten after every variant
    fedssd-trace.json   a torch.profiler trace of one FedSSD round (chrome://tracing or Perfetto),
                        fedssd-profile.txt its operators by time
    summary.md          a table of what passed and how fast, also printed at the end

Data: `--data` takes CIFAR-10 as a JPEG zip (`dataset=imagefolder`, benchmarks/README.md); without
it the benchmark and the profile train on synthetic CIFAR-shaped data. Without CUDA (a rehearsal
on a laptop or CI) the gpu tests skip and the benchmark and profile shrink to a tiny federation.
Needs only torch, numpy, pandas, matplotlib, seaborn and pytest (README: On a GPU machine
without network).
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
TINY = ["dataset.synthetic.train_per_class=30", "dataset.synthetic.test_per_class=10",
        "dataset.synthetic.image_size=16", "partition.clients=4", "local.epochs=1", "aux.per_class=5"]


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
    from shared.provenance import environment
    from shared.seeding import set_numerics

    cuda = torch.cuda.is_available()
    set_numerics(torch.device("cuda" if cuda else "cpu"), deterministic=True)  # what a run sets by default
    env = {**environment(), "torch": torch.__version__, "cuda_available": cuda,
           "executable": sys.executable, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        env["gpu0"] = {"name": props.name, "capability": f"{props.major}.{props.minor}",
                       "memory_gib": round(props.total_memory / 2**30, 1), "multiprocessors": props.multi_processor_count}
        env["bf16_supported"] = torch.cuda.is_bf16_supported()
    (out / "environment.json").write_text(json.dumps(env, indent=1, default=str) + "\n")
    try:
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        smi = "nvidia-smi: not found\n"
    (out / "nvidia-smi.txt").write_text(smi)
    gpu = env["gpu0"]["name"] if cuda else "no CUDA device"
    return {"step": "environment", "ok": True, "detail": f"torch {torch.__version__}, {gpu}"}


def run_logged(command: list[str], log: Path, timeout: float) -> int | None:
    """Run `command` with its output in `log`; its exit code, None when it ran out of time. At
    the limit it gets ^C (SIGINT) first, on which pytest still writes its report of the tests it
    ran, and is killed only if it has not ended 30 s later."""
    with open(log, "w") as handle:
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
    code = run_logged([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                       f"--junitxml={xml}", "tests"], out / "gpu-tests.log", timeout)
    if not xml.exists():
        return {"step": "gpu tests", "ok": False, "detail": f"no report (exit {code}); see gpu-tests.log"}
    c = junit_counts(xml)
    passed = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    # exit 5: no test collected at all
    return {"step": "gpu tests", "ok": code == 0 or (code == 5 and not c["failures"] + c["errors"]),
            "detail": f"{passed} passed, {c['failures']} failed, {c['errors']} errors, {c['skipped']} skipped"
                      + ("" if code is not None else " (stopped at its time limit)")}


def speed(out: Path, overrides: list[str], cuda: bool, timeout: float) -> dict:
    """FedSSD's setting (benchmarks/speed.py), the variants in turn until its share of the time is spent."""
    report = out / "speed.json"
    config = "fedssd" if cuda else "cpu"
    # ours first, the fastest first: what a cut-off benchmark still tells; 2 rounds give a
    # second-round time without the first's warm-up
    variants = (["--variants", "batched", "sequential", "batched-bf16", "bf16", "reference", "--rounds", "2"] if cuda
                else ["--variants", "batched", "sequential", "reference", "--rounds", "1"])
    minutes = max(0.1, (timeout - 60) / 60)  # a minute for the variant that is running when the budget ends
    code = run_logged([sys.executable, "-m", "benchmarks.speed", config, *overrides, *variants,
                       "--minutes", f"{minutes:.2f}", "--out", str(report)], out / "speed.log", timeout)
    if not report.exists():
        return {"step": "speed", "ok": False, "detail": f"no report (exit {code}); see speed.log"}
    result = json.loads(report.read_text())
    rows = ", ".join(f"{v} {r['seconds_per_round']:.2f} s/round" for v, r in result["variants"].items())
    skipped = f"; not run: {', '.join(result['skipped'])}" if result.get("skipped") else ""
    return {"step": "speed", "ok": code == 0, "detail": (rows or "no variant finished") + skipped}


def profile(out: Path, overrides: list[str], cuda: bool) -> dict:
    """One FedSSD round under torch.profiler, after an unprofiled round that compiles and warms up."""
    from torch.profiler import ProfilerActivity

    from shared import trainer
    from shared.config_loading import load_config
    from shared.run import as_overrides
    from benchmarks.speed import FEDSSD

    base = [o for o in as_overrides(FEDSSD) if not o.startswith("dataset.name=")]
    # one local epoch: a round of every kernel the method launches, in a trace that stays small
    cfg = load_config(None, [*base, *overrides, "local.epochs=1", "federation.rounds=1", "trainer.progress=false",
                             f"trainer.device={'cuda' if cuda else 'cpu'}"])
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with tempfile.TemporaryDirectory() as tmp:
        trainer.run(cfg, Path(tmp, "warm-up"))
        started = time.perf_counter()
        with torch.profiler.profile(activities=activities) as prof:
            summary = trainer.run(cfg, Path(tmp, "profiled"))
        seconds = time.perf_counter() - started
    prof.export_chrome_trace(str(out / "fedssd-trace.json"))
    sort = "cuda_time_total" if cuda else "cpu_time_total"
    (out / "fedssd-profile.txt").write_text(prof.key_averages().table(sort_by=sort, row_limit=40) + "\n")
    return {"step": "profile", "ok": summary["status"] == "completed",
            "detail": f"one round (1 local epoch, {cfg.dataset.name}, {cfg.partition.clients} clients) "
                      f"{seconds:.1f} s under the profiler"}


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
    lines += [f"| {r['step']} | {'ok' if r['ok'] else 'FAILED'} | {r['seconds']:.0f} | {r['detail']} |" for r in results]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the folder everything goes into (created)")
    parser.add_argument("--data", help="CIFAR-10 as a JPEG zip (dataset=imagefolder); default: synthetic data")
    parser.add_argument("--minutes", type=float, default=9.0, help="time budget for all steps (default 9)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock, cuda = Clock(args.minutes), torch.cuda.is_available()
    overrides = data_overrides(args.data, cuda)
    results = [guarded("environment", lambda: write_environment(out))]
    # the tests get 60% of the budget, the benchmark most of what is left, the profile the rest
    results.append(guarded("gpu tests", lambda: gpu_tests(out, 0.6 * clock.left())))
    results.append(guarded("speed", lambda: speed(out, overrides, cuda, max(30.0, clock.left() - 60))))
    results.append(guarded("profile", lambda: profile(out, overrides, cuda)))
    table = summary_table(results)
    (out / "summary.md").write_text(table)
    (out / "summary.json").write_text(json.dumps(results, indent=1) + "\n")
    print(table, end="")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
