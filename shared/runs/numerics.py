"""Where and how a run computes: its device (trainer.device on this machine, made the process's
current one before any CUDA context), deterministic kernels, cuDNN's benchmarking, no TF32 and
cuBLAS's fixed workspace; recorded in each run's environment (shared/runs/provenance.py)."""

from __future__ import annotations

import os
import platform

import torch

from shared.config.schema import check

# cuBLAS sums a matrix product in the same order every time only with a fixed workspace, and it
# reads this once, when the process's first cuBLAS call initialises it: so it is set as soon as
# this module is imported (the trainer and the commands import it), before any run could touch
# CUDA (torch's reproducibility notes; 8 buffers of 4 MiB), not in `set_numerics`, which a
# process may call after its first product. A value the user exported wins.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def set_numerics(device: torch.device, deterministic: bool) -> None:
    """How this process computes, set before a run's first kernel and recorded in the run's
    environment (shared/runs/provenance.py). torch's switches are process-wide: the runs of one
    process share them (a group's runs have one `trainer.deterministic`, shared/targets/run_groups.py).

    deterministic  use_deterministic_algorithms (an operation without a deterministic kernel
                   raises instead of summing atomically; new memory is not NaN-filled), cuDNN
                   without benchmarking, whose choice of algorithm varies with timing; off:
                   cuDNN benchmarks, the fastest
    TF32           off, always: float32 products in float32, as on the CPU the tests compare
                   with (on Ampere and later cuDNN would use TF32 for convolutions by default,
                   rounding inputs to 10 mantissa bits); bf16 is `trainer.amp`, part of a run's id
    """
    torch.use_deterministic_algorithms(deterministic, warn_only=False)
    # deterministic mode would also fill every new tensor's memory (each operator's output) with
    # NaN first, a debugging aid against reading uninitialised memory that costs a write of every
    # output and changes no result of correct code
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = device.type == "cuda" and not deterministic
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def resolve_device(name: str) -> torch.device:
    """trainer.device on this machine: `auto` takes the GPU where there is one; a device this
    machine lacks is a ConfigError here, before any data is loaded (the config itself is
    checked where it is written, often a machine without the GPU that will run it)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        check(
            count > (device.index or 0),
            f"trainer.device={name}: this machine has "
            f"{f'{count} CUDA device(s)' if count else 'no CUDA device'}; use trainer.device=auto or cpu",
        )
    if device.type == "mps":
        check(
            torch.backends.mps.is_available(), f"trainer.device={name}: this machine has no MPS device; use auto or cpu"
        )
    return device


def select_device(device: torch.device) -> None:
    """Make `cuda:i` the process's current CUDA device before anything opens a CUDA context:
    otherwise a context opens on GPU 0, and whatever takes the current device (a new stream, a
    graph's memory pool, synchronize, memory statistics) works on GPU 0."""
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)


def device_name(device: torch.device) -> str:
    """The device's name as each round and metrics.json record it: the GPU's model, else the CPU's."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
