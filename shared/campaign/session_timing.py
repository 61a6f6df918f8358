"""A campaign session's timing record, `timing.json`: for every unit `train` trained (a run, or
a group in one batched step), what it was and where its seconds went.

    units[]     runs (ids), method, model, lanes (the (run, client) pairs of a round),
                steps_per_round, useful_share (of the lane-steps paid for, those a client had a
                batch for), rounds timed, seconds_per_round split into preparation, steps,
                aggregation, evaluation and checkpointing (shared/training/round_timing.py), the first
                round's seconds apart (a CUDA graph's capture, warm-up), peak GPU memory (null
                on a CPU), the GPU's utilisation sampled in the unit (null where not sampled)
    gpu         nvidia-smi's utilisation and memory every SAMPLE_SECONDS over the session
                (null without nvidia-smi or on a CPU)

The file is rewritten (atomically) after every unit, and with the unit in progress (its outcome
"in progress") whenever `train` refreshes the state within a unit, so a session killed from
outside still leaves what it timed. Without torch: `shared.campaign` imports it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

from shared.runs.files import write_atomically
from shared.training.round_timing import PHASES, RoundTiming, observing

OVERRUN_SECONDS = 5  # past train's deadline: its stacks (`stacks_if_overrun`)

TIMING_FORMAT = "fedrepro-session-timing/2"  # 2: a unit's lanes and lanes_per_step (were slots)
SAMPLE_SECONDS = 10
QUERY = [
    "nvidia-smi",
    "--query-gpu=utilization.gpu,memory.used",
    "--format=csv,noheader,nounits",
    f"--loop={SAMPLE_SECONDS}",
]


class GpuSampler:
    """nvidia-smi's utilisation (%) and memory (MiB) of GPU 0 every SAMPLE_SECONDS, read in a
    thread: [seconds since the session started, percent, MiB]. No nvidia-smi: no samples."""

    def __init__(self, origin: float):
        self.origin, self.samples, self.proc = origin, [], None
        try:
            self.proc = subprocess.Popen(QUERY, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:  # no nvidia-smi here
            return
        threading.Thread(target=self.read, daemon=True).start()

    @property
    def sampling(self) -> bool:
        return self.proc is not None

    def read(self) -> None:
        for line in self.proc.stdout:
            fields = [f.strip() for f in line.split(",")]
            if len(fields) >= 2 and all(f.replace(".", "", 1).isdigit() for f in fields[:2]):
                # the first GPU's line of each sample (one line per GPU)
                if not self.samples or time.time() - self.origin - self.samples[-1][0] > 1:
                    self.samples.append([round(time.time() - self.origin, 1), float(fields[0]), float(fields[1])])

    def between(self, start: float, end: float) -> list[list[float]]:
        return [s for s in list(self.samples) if start <= s[0] <= end]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def peak_memory_mib(cuda: bool, reset: bool = False) -> float | None:
    """The process's peak GPU memory allocated by torch since the last reset (None off CUDA)."""
    if not cuda or "torch" not in sys.modules:
        return None
    import torch

    if not torch.cuda.is_initialized():
        return 0.0 if not reset else None
    if reset:
        torch.cuda.reset_peak_memory_stats()
        return None
    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


def unit_summary(rounds: list[RoundTiming]) -> dict:
    """The unit's rounds in one record: its size, its steps and their useful share, and the
    mean seconds of a round by phase, the first round apart."""
    if not rounds:
        return {
            "rounds": 0,
            "lanes": None,
            "steps_per_round": None,
            "useful_share": None,
            "seconds_per_round": None,
            "first_round_s": None,
        }
    paid = sum(r.paid_lane_steps for r in rounds)
    useful = sum(sum(r.lane_steps) for r in rounds)
    later = rounds[1:] or rounds  # the first round pays for capture and warm-up
    per_round = {phase: round(statistics.fmean(r.seconds.get(phase, 0.0) for r in later), 3) for phase in PHASES}
    return {
        "rounds": len(rounds),
        "lanes": max(r.lanes for r in rounds),
        "lanes_per_step": max(r.lanes_per_step for r in rounds),
        "steps_per_round": round(statistics.fmean(r.steps for r in rounds), 1),
        "useful_share": round(useful / paid, 3) if paid else None,
        "seconds_per_round": {"total": round(sum(per_round.values()), 3), **per_round},
        "first_round_s": round(sum(rounds[0].seconds.values()), 3),
    }


def earlier_units(path: Path) -> list[dict]:
    """The units a timing record at `path` holds already (none where it is not one)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    units = record.get("units") if isinstance(record, dict) and record.get("format") == TIMING_FORMAT else None
    return [u for u in units if isinstance(u, dict)] if isinstance(units, list) else []


class SessionTiming:
    """timing.json for one `train` command: `unit(...)` around each unit it trains."""

    def __init__(self, path: Path, device: str):
        self.path, self.device, self.origin = Path(path), device, time.time()
        self.cuda = device.startswith("cuda")
        self.units: list[dict] = earlier_units(self.path)  # a session's earlier train command's (a retry's)
        self.current: UnitTimer | None = None  # the unit training now
        self.sampler = GpuSampler(self.origin) if self.cuda else None

    def unit(self, rids: list[str], method: str, model: str) -> "UnitTimer":
        return UnitTimer(self, {"runs": rids, "method": method, "model": model})

    def add(self, record: dict) -> None:
        self.units.append(record)
        self.write()

    def write(self) -> None:
        sampled = self.sampler is not None and self.sampler.sampling
        record = {
            "format": TIMING_FORMAT,
            "device": self.device,
            "started_at": self.origin,
            "seconds": round(time.time() - self.origin, 1),
            "sample_seconds": SAMPLE_SECONDS,
            "units": self.units + ([self.current.record("in progress")] if self.current is not None else []),
            "gpu": {"utilisation_pct_memory_mib": self.sampler.between(0, float("inf"))} if sampled else None,
        }
        write_atomically(self.path, lambda tmp: tmp.write_text(json.dumps(record, indent=1) + "\n"))

    def close(self) -> None:
        self.write()
        if self.sampler is not None:
            self.sampler.stop()


class UnitTimer:
    """The rounds trained inside `with` (any run's: a unit trains one at a time), summarised
    into the session's record at the end, however the unit ended (`outcome`)."""

    def __init__(self, session: SessionTiming, about: dict):
        self.session, self.about, self.rounds, self.outcome = session, about, [], "finished"

    def __enter__(self) -> "UnitTimer":
        self.started = time.time() - self.session.origin
        peak_memory_mib(self.session.cuda, reset=True)
        self.observing = observing(self.rounds.append)
        self.observing.__enter__()
        self.session.current = self
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self.observing.__exit__(kind, exc, tb)
        self.session.current = None
        self.session.add(self.record(self.outcome if kind is None else f"{kind.__name__}: {exc}"))

    def record(self, outcome: str) -> dict:
        """The unit's record as of now."""
        ended = time.time() - self.session.origin
        sampler = self.session.sampler
        samples = sampler.between(self.started, ended) if sampler is not None and sampler.sampling else None
        return {
            **self.about,
            "outcome": outcome,
            **unit_summary(self.rounds),
            "peak_gpu_memory_mib": peak_memory_mib(self.session.cuda),
            "gpu_utilisation": None
            if samples is None
            else {
                "mean_pct": round(statistics.fmean(s[1] for s in samples), 1) if samples else None,
                "samples": samples,
            },
            "started_s": round(self.started, 1),
            "ended_s": round(ended, 1),
        }


@contextlib.contextmanager
def session_timing(path: Path | None, device: str) -> Iterator[SessionTiming | None]:
    """The session's record at `path` (None: no record), closed however training ends;
    device "auto" is CUDA where torch sees a GPU."""
    if path is None:
        yield None
        return
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    record = SessionTiming(path, device)
    try:
        yield record
    finally:
        record.close()


@contextlib.contextmanager
def stacks_if_overrun(end: float) -> Iterator[None]:
    """Every thread's stack on stderr should training still run OVERRUN_SECONDS past `end` (its
    deadline, time.time()): a round that overran, a kernel or a sync that hangs, where no Python
    signal handler runs. faulthandler's own thread writes it, so that the log of a session
    stopped from outside says where it was."""
    try:
        faulthandler.dump_traceback_later(max(end - time.time(), 0) + OVERRUN_SECONDS, exit=False, file=sys.stderr)
        armed = True
    except (OSError, ValueError, AttributeError):  # a stderr without a file descriptor (a test capturing it)
        armed = False
    try:
        yield
    finally:
        if armed:
            faulthandler.cancel_dump_traceback_later()
