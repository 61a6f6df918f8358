"""Several runs in one process and on one GPU:

    python -m shared.run --json CONFIG_A --out DIR_A --json CONFIG_B --out DIR_B ...

A run of a small model leaves most of a GPU idle even with its clients batched: between its
kernels the GPU waits on Python, on host synchronisation, and each kernel fills a fraction of
the device. Runs in threads of one process, each on a CUDA stream of its own, fill those gaps
for each other. Each run writes exactly what it writes alone (results/runs/<id>/...).

Threads share torch's global random generator, so runs go side by side only where nothing draws
from it outside the lock `shared.seeding.GLOBAL_RNG` (around the initial weights and the
per-round reseed): every run's method has the capability `no_global_rng` (shared/fedavg.py,
checked in shared/client_training.py), nothing is compiled (torch.compile is not thread-safe),
no run captures CUDA graphs (the batched step of `trainer.clients_per_step` does: a capture
forbids the device-wide synchronisations and `empty_cache` that other threads may make meanwhile,
and the stream pool hands the same streams out again after 32), and all runs ask for the same
`trainer.deterministic` (a process-wide switch). Otherwise, and on the CPU, whose cores one run
already uses, the runs go one after another in this process, with a one-line note saying why.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import torch

from shared.config import RunConfig
from shared.client_training import missing_capabilities
from shared.methods import method_class


def side_by_side_reason(configs: list[RunConfig], device: torch.device) -> str | None:
    """Why these runs cannot share the GPU side by side (None when they can)."""
    if device.type != "cuda":
        return f"device {device} (threads would only compete for its cores)"
    for cfg in configs:
        reason = missing_capabilities(method_class(cfg.method["name"]), cfg.method["name"], "several runs per process")
        if reason:
            return f"{reason}: it may draw from torch's global random generator"
        if cfg.trainer.compile:
            return "trainer.compile (torch.compile is not thread-safe)"
        if cfg.trainer.clients_per_step > 1 and cfg.trainer.cuda_graphs:
            return (f"trainer.clients_per_step={cfg.trainer.clients_per_step} captures CUDA graphs, which other "
                    f"threads' work may break (trainer.cuda_graphs=false lets such runs go side by side)")
    if len({cfg.trainer.deterministic for cfg in configs}) > 1:
        return "the runs differ in trainer.deterministic, which is one switch for the whole process"
    return None


def run_all(configs: list[RunConfig], jobs: list[Callable[[], int]], device: torch.device) -> list[int]:
    """Run `jobs` (one per config, each training its run and returning an exit code) side by
    side when `side_by_side_reason` allows it, else one after another; an exception in a job is
    raised once all have finished."""
    reason = side_by_side_reason(configs, device) if len(jobs) > 1 else None
    if reason or len(jobs) == 1:
        if reason:
            print(f"note: {len(jobs)} runs go one after another: {reason}", flush=True)
        return [job() for job in jobs]

    def on_own_stream(job: Callable[[], int]) -> int:
        with torch.cuda.stream(torch.cuda.Stream(device)):
            return job()

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(on_own_stream, job) for job in jobs]
    return [future.result() for future in futures]
